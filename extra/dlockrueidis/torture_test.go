package dlockrueidis_test

import (
	"flag"
	"net"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/dlockio/dlock/driver"
	"github.com/dlockio/dlock/extra/dlockrueidis"
	"github.com/dlockio/dlock/internal/torture"
)

var (
	tortureSeed  = flag.Uint64("torture.seed", 0, "seed of the fault checker's rounds (0: from the time)")
	tortureRound = flag.Int("torture.round", -1, "run only this round of the seed")
	tortureMode  = flag.String("torture.mode", "", "run every round in this mode")
	tortureOut   = flag.String("torture.out", "", "directory to save the merged history of each failing round in")
)

// tortureConn is the fault checker's connection to a node: a rueidis
// client of its own, whose dial and writes time out as the checker's
// go-redis clients do.
func tortureConn(addr string, timeout time.Duration) (driver.Conn, func(), error) {
	rc, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress:      []string{addr},
		Dialer:           net.Dialer{Timeout: 500 * time.Millisecond},
		ConnWriteTimeout: max(timeout, time.Second),
	})
	if err != nil {
		return nil, nil, err
	}
	return dlockrueidis.Conn(rc), rc.Close, nil
}

// TestFaultCheckerFindsNoViolation runs the randomized fault checker (internal/torture) with
// every worker's Client on rueidis: every mode but the script-free one,
// which needs go-redis.
func TestFaultCheckerFindsNoViolation(t *testing.T) {
	if dlockrueidis.Alone(t) { // its goroutine check counts every goroutine of the process
		return
	}
	budget := 40 * time.Second
	switch {
	case !dlockrueidis.FullTier():
		budget = 15 * time.Second
	case testing.Short():
		budget = 20 * time.Second
	}
	torture.Run(t, torture.Options{Seed: *tortureSeed, Round: *tortureRound, Budget: budget, Out: *tortureOut, Mode: *tortureMode,
		Skip: []string{torture.ModeNoScripts}, Rerun: "cd extra/dlockrueidis && go test -race -run TestFaultCheckerFindsNoViolation ."})
}
