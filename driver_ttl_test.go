package dlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/driver"
	"github.com/dlockio/dlock/internal/goredisdriver"
)

// TestDriverLeaseTimesReachRedis: through a driver, where the Client's own
// lease time goes as an argument converted once and any other as it is,
// and through a quorum of drivers, every kind's lease lives in Redis the
// Client's lease time after an Acquire, a call's own after one with
// LeaseTTL, and what Extend asks, the Client's time or another.
func TestDriverLeaseTimesReachRedis(t *testing.T) {
	t.Parallel()
	const own, other, short = 40 * time.Second, 25 * time.Second, 5 * time.Second
	conn := func() driver.Conn {
		_, rdb := setup(t)
		return goredisdriver.Conn(rdb)
	}
	closing := func(c *dlock.Client, err error) *dlock.Client {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(context.Background()) })
		return c
	}
	one := func(opts ...dlock.Option) *dlock.Client {
		return closing(dlock.NewFrom(conn(), append(opts, dlock.LeaseTTL(own))...))
	}
	quorum := func(opts ...dlock.Option) *dlock.Client {
		return closing(dlock.NewRedlockFrom([]driver.Conn{conn(), conn(), conn()}, time.Second, append(opts, dlock.LeaseTTL(own))...))
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	// lives checks that l's lease has more than want less 5s left, and no
	// more than want.
	lives := func(what string, l *dlock.Lock, want time.Duration) {
		t.Helper()
		if left, err := l.TTL(ctx); err != nil || left > want || left <= want-5*time.Second {
			t.Errorf("%s: %v left (%v), want about %v", what, left, err, want)
		}
	}
	for _, c := range []struct {
		name string
		new  func(opts ...dlock.Option) *dlock.Client
	}{{"driver", one}, {"quorum", quorum}} {
		cl := c.new()
		type kind struct {
			name    string
			acquire func(opts ...dlock.LockOption) (*dlock.Lock, error)
		}
		kinds := []kind{{"mutex", func(o ...dlock.LockOption) (*dlock.Lock, error) { return cl.Acquire(ctx, "ttl-mutex", o...) }}}
		if c.name == "driver" { // (a quorum has locks only)
			reentrant, err := c.new(dlock.WithReentrant(true)).Owner("me")
			if err != nil {
				t.Fatal(err)
			}
			rw, err := cl.RWMutex("ttl-rw")
			if err != nil {
				t.Fatal(err)
			}
			sem, err := cl.Semaphore("ttl-sem", 2)
			if err != nil {
				t.Fatal(err)
			}
			kinds = append(kinds,
				kind{"owned", func(o ...dlock.LockOption) (*dlock.Lock, error) { return reentrant.Acquire(ctx, "ttl-owned", o...) }},
				kind{"writer", func(o ...dlock.LockOption) (*dlock.Lock, error) { return rw.Writer().Acquire(ctx, o...) }},
				kind{"reader", func(o ...dlock.LockOption) (*dlock.Lock, error) { return rw.Reader().Acquire(ctx, o...) }},
				kind{"permit", func(o ...dlock.LockOption) (*dlock.Lock, error) { return sem.Acquire(ctx, o...) }})
		}
		for _, k := range kinds {
			what := c.name + " " + k.name
			l, err := k.acquire()
			if err != nil {
				t.Fatalf("%s: Acquire: %v", what, err)
			}
			lives(what+", acquired", l, own)
			for _, d := range []time.Duration{short, own, other, own} {
				if err := l.Extend(ctx, d); err != nil {
					t.Fatalf("%s: Extend(%v): %v", what, d, err)
				}
				lives(what+", extended", l, d)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatalf("%s: Release: %v", what, err)
			}
			l, err = k.acquire(dlock.LeaseTTL(other))
			if err != nil {
				t.Fatalf("%s: Acquire(LeaseTTL): %v", what, err)
			}
			lives(what+", acquired with its own time", l, other)
			if err := l.Extend(ctx, own); err != nil {
				t.Fatalf("%s: Extend(%v): %v", what, own, err)
			}
			lives(what+", extended to the Client's time", l, own)
			if err := l.Release(ctx); err != nil {
				t.Fatalf("%s: Release: %v", what, err)
			}
		}
	}
}
