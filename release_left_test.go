package dlock_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/goredisdriver"
	"github.com/dlockio/dlock/internal/leakcheck"
	"github.com/dlockio/dlock/internal/redistest"
)

// After a driver call failed without a reply, a driver call's caller leaves
// when its context ends, and the command may still run; so does a pipelined
// call's through go-redis. A Release left so ran: the Release that follows
// finds the lease gone by its own hand, and reports it released, not lost.
func TestReleaseLeftInFlightThenRepeatedIsNotReportedLost(t *testing.T) {
	t.Parallel()
	for _, road := range []string{"go-redis", "driver"} {
		t.Run(road, func(t *testing.T) {
			t.Parallel()
			leakcheck.Check(t)
			s := redistest.Start(t, redistest.TCP())
			p := redistest.NewProxy(t, s.Addr())
			direct := s.Client(t)
			rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1})
			t.Cleanup(func() { rdb.Close() })
			var c *dlock.Client
			var err error
			if road == "driver" {
				c, err = dlock.NewFrom(goredisdriver.Conn(rdb), dlock.WithAutoExtend(false))
			} else {
				c, err = dlock.New(rdb, dlock.WithAutoExtend(false), pipelined(true))
			}
			if err != nil {
				t.Fatal(err)
			}
			ctx := t.Context()
			// A release that finds the lease gone counts it deleted by its lost
			// copy only on a server up for longer than the lease's age.
			if !waitFor(10*time.Second, func() bool {
				info, _ := direct.Info(ctx, "server").Result()
				for _, up := range []string{"0", "1", "2"} {
					if strings.Contains(info, "uptime_in_seconds:"+up+"\r") {
						return false
					}
				}
				return info != ""
			}) {
				t.Fatal("the server's uptime never reached 3s")
			}
			l, err := c.TryAcquire(ctx, "left-in-flight")
			if err != nil {
				t.Fatal(err)
			}
			if road == "driver" {
				// A driver call that fails without a reply (a refused dial):
				// calls are now guarded, each left by its caller when its
				// context ends.
				dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
				t.Cleanup(func() { dead.Close() })
				dc, err := dlock.NewFrom(goredisdriver.Conn(dead))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { dc.Close(context.Background()) })
				if _, err := dc.TryAcquire(ctx, "unreachable"); err == nil {
					t.Fatal("TryAcquire through a refused dial succeeded")
				}
			}

			p.Delay(500*time.Millisecond, 0) // the release reaches Redis after its caller left
			rctx, cancel := context.WithCancel(ctx)
			time.AfterFunc(100*time.Millisecond, cancel)
			if err := l.Release(rctx); err == nil {
				t.Fatal("Release returned nil before its command could reach Redis")
			}
			if !waitFor(10*time.Second, func() bool { return direct.Exists(ctx, "dlock:{left-in-flight}").Val() == 0 }) {
				t.Fatal("the release left in flight never deleted the lock")
			}
			p.Delay(0, 0)
			if err := l.Release(ctx); err != nil {
				t.Errorf("Release after the one left in flight = %v; want nil: its own release ended the lease", err)
			}
		})
	}
}
