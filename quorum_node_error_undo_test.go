package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/driver"
	"github.com/dlockio/dlock/internal/goredisdriver"
)

// refusingConn is go-redis's driver that refuses every script call before
// sending it (driver.ErrNotSent), as a client-side breaker may: Redis
// never sees it.
type refusingConn struct{ driver.Conn }

func (c refusingConn) Do(ctx context.Context, args ...any) (any, error) {
	if name, _ := driver.String(args[0]); strings.HasPrefix(strings.ToLower(name), "eval") {
		return nil, fmt.Errorf("%w: the breaker is open", driver.ErrNotSent)
	}
	return c.Conn.Do(ctx, args...)
}

// revokingConn is go-redis's driver that, before each script call, ends
// the lease it is for on its server (sets the marker key, KEYS[2], as an
// undo does): the call then finds its lease revoked there.
type revokingConn struct{ driver.Conn }

func (c revokingConn) Do(ctx context.Context, args ...any) (any, error) {
	if name, _ := driver.String(args[0]); strings.HasPrefix(strings.ToLower(name), "eval") {
		marker, _ := driver.String(args[4])
		if _, err := c.Conn.Do(ctx, "set", marker, "1", "px", 30000); err != nil {
			return nil, err
		}
	}
	return c.Conn.Do(ctx, args...)
}

// A Redlock attempt that node 1 alone granted, node 2's driver refused
// unsent and node 0 answered as first wraps it fails, and node 1's grant
// is undone: one node's error says nothing of the other nodes, so the
// attempt as a whole is not taken for one never sent (whose undo is
// skipped) nor for one whose lease no node holds (which only gets a new
// token): either left the grant to block the lock until its TTL.
func TestRedlockGrantNextToNodesThatFailedIsUndone(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		node0 func(driver.Conn) driver.Conn
	}{
		{"unsent", func(c driver.Conn) driver.Conn { return refusingConn{c} }},
		{"revoked", func(c driver.Conn) driver.Conn { return revokingConn{c} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srvs, nodes := startQuorum(t, 3)
			ctx := t.Context()
			conns := []driver.Conn{tc.node0(goredisdriver.Conn(nodes[0])), goredisdriver.Conn(nodes[1]), refusingConn{goredisdriver.Conn(nodes[2])}}
			c, err := dlock.NewRedlockFrom(conns, 100*time.Millisecond, dlock.LeaseTTL(30*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close(context.Background()) })
			if _, err := c.TryAcquire(ctx, tc.name); !errors.Is(err, dlock.ErrNotAcquired) {
				t.Fatalf("TryAcquire granted by node 1 alone = %v, want ErrNotAcquired", err)
			}
			n1, key := srvs[1].Client(t), "dlock:{"+tc.name+"}"
			if !waitFor(5*time.Second, func() bool { v, err := n1.Get(ctx, key).Result(); return err != nil || strings.HasPrefix(v, "~") }) {
				v, _ := n1.Get(ctx, key).Result()
				pttl, _ := n1.PTTL(ctx, key).Result()
				t.Errorf("node 1's lock 5s after the failed attempt = %q (%v left): its grant was not undone", v, pttl)
			}
		})
	}
}
