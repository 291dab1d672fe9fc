package dlockredigo_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"

	"github.com/gomodule/redigo/redis"

	"github.com/dlockio/dlock/driver"
	"github.com/dlockio/dlock/driver/drivertest"
	"github.com/dlockio/dlock/extra/dlockredigo"
)

// newPool returns a pool of connections to addr, closed in t's cleanup
// (after the Clients made on it, whose cleanups run first).
func newPool(t *testing.T, addr string) *redis.Pool {
	p := &redis.Pool{
		MaxIdle: 16,
		DialContext: func(ctx context.Context) (redis.Conn, error) {
			return redis.DialContext(ctx, "tcp", addr)
		},
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// sentinelPool returns a pool that dials the master the Sentinels at addrs
// name, asking them at each dial: redigo knows nothing of Sentinels.
func sentinelPool(t *testing.T, master string, addrs []string) *redis.Pool {
	p := &redis.Pool{
		MaxIdle: 16,
		DialContext: func(ctx context.Context) (redis.Conn, error) {
			var errs []error
			for _, a := range addrs {
				sc, err := redis.DialContext(ctx, "tcp", a)
				if err != nil {
					errs = append(errs, err)
					continue
				}
				hp, err := redis.Strings(redis.DoContext(sc, ctx, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", master))
				sc.Close()
				if err == nil && len(hp) == 2 {
					return redis.DialContext(ctx, "tcp", net.JoinHostPort(hp[0], hp[1]))
				}
				errs = append(errs, fmt.Errorf("sentinel %s: %v %w", a, hp, err))
			}
			return nil, errors.Join(errs...)
		},
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// TestDriverTable runs the shared driver table: on a single server, and on
// a master that Sentinels name (a pool whose dial asks them). redigo does
// not reach a Cluster, so that case is skipped.
func TestDriverTable(t *testing.T) {
	t.Parallel()
	drivertest.Run(t, drivertest.Setup{
		Server: func(t *testing.T, addr string) driver.Conn { return dlockredigo.Conn(newPool(t, addr)) },
		Sentinel: func(t *testing.T, master string, addrs []string) driver.Conn {
			return dlockredigo.Conn(sentinelPool(t, master, addrs))
		},
	})
}
