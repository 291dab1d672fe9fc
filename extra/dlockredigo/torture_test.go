package dlockredigo_test

import (
	"context"
	"flag"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/dlockio/dlock/driver"
	"github.com/dlockio/dlock/extra/dlockredigo"
	"github.com/dlockio/dlock/internal/torture"
)

var (
	tortureSeed  = flag.Uint64("torture.seed", 0, "seed of the fault checker's rounds (0: from the time)")
	tortureRound = flag.Int("torture.round", -1, "run only this round of the seed")
)

// tortureConn is the fault checker's connection to a node: a redigo pool
// of its own, whose dial, reads and writes time out as the checker's
// go-redis clients do.
func tortureConn(addr string, timeout time.Duration) (driver.Conn, func(), error) {
	io := max(timeout, time.Second)
	pool := &redis.Pool{
		MaxIdle: 16,
		DialContext: func(ctx context.Context) (redis.Conn, error) {
			return redis.DialContext(ctx, "tcp", addr, redis.DialConnectTimeout(500*time.Millisecond),
				redis.DialReadTimeout(io), redis.DialWriteTimeout(io))
		},
	}
	return dlockredigo.Conn(pool), func() { pool.Close() }, nil
}

// TestFaultCheckerFindsNoViolation runs the randomized fault checker
// (internal/torture) with every worker's Client on redigo: every mode but
// the script-free one, which needs go-redis.
func TestFaultCheckerFindsNoViolation(t *testing.T) {
	// Serial: its goroutine check counts every goroutine of the process.
	torture.Run(t, torture.Options{Seed: *tortureSeed, Round: *tortureRound, Budget: 30 * time.Second,
		Skip:  []string{torture.ModeNoScripts},
		Rerun: "cd extra/dlockredigo && go test -race -run TestFaultCheckerFindsNoViolation ."})
}
