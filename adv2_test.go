package dlock_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/dlockio/dlock"
)

var _ = math.MaxInt64

// TestAdv2DefaultMaxWaitBoundsEveryWait: a Client-wide MaxWait bounds the
// waits of every kind (campaign, permit, write hold, DoAll, an Owner
// Client's reentrant Acquire), each failing with ErrNotAcquired near the
// bound; TryAcquire ignores it.
func TestAdv2DefaultMaxWaitBoundsEveryWait(t *testing.T) {
	_, rdb := setup(t)
	const bound = 300 * time.Millisecond
	holder := newClient(t, rdb)
	c := newClient(t, rdb, dlock.MaxWait(bound))
	rc := newClient(t, rdb, dlock.MaxWait(bound), dlock.WithReentrant(true))
	rholder := newClient(t, rdb, dlock.WithReentrant(true))
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()

	hold := func(l *dlock.Lock, err error) *dlock.Lock {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Release(context.Background()) })
		return l
	}
	he, err := holder.Election("adv2-mw-el")
	if err != nil {
		t.Fatal(err)
	}
	ld, err := he.Campaign(ctx, "h")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ld.Resign(context.Background()) })
	hs, _ := holder.Semaphore("adv2-mw-sem", 1)
	hold(hs.Acquire(ctx))
	hrw, _ := holder.RWMutex("adv2-mw-rw")
	hold(hrw.Reader().Acquire(ctx))
	hold(holder.Acquire(ctx, "adv2-mw-b"))
	hold(asOwner(t, rholder, "o1").Acquire(ctx, "adv2-mw-re"))

	e, _ := c.Election("adv2-mw-el")
	s, _ := c.Semaphore("adv2-mw-sem", 1)
	rw, _ := c.RWMutex("adv2-mw-rw")
	owner := asOwner(t, rc, "o2")
	cases := map[string]func() error{
		"Campaign":          func() error { _, err := e.Campaign(ctx, "c"); return err },
		"Semaphore.Acquire": func() error { _, err := s.Acquire(ctx); return err },
		"Writer.Acquire":    func() error { _, err := rw.Writer().Acquire(ctx); return err },
		"DoAll": func() error {
			return c.DoAll(ctx, []string{"adv2-mw-a", "adv2-mw-b"}, func(context.Context, *dlock.MultiLock) error { return nil })
		},
		"Owner.Acquire": func() error { _, err := owner.Acquire(ctx, "adv2-mw-re"); return err },
	}
	for name, f := range cases {
		start := time.Now()
		err := f()
		took := time.Since(start)
		if !errors.Is(err, dlock.ErrNotAcquired) || took < bound-20*time.Millisecond || took > bound+1500*time.Millisecond {
			t.Errorf("%s under a Client MaxWait(%v) = %v after %v; want ErrNotAcquired after about %v", name, bound, err, took.Round(time.Millisecond), bound)
		}
	}
	start := time.Now()
	if _, err := c.TryAcquire(ctx, "adv2-mw-b"); !errors.Is(err, dlock.ErrNotAcquired) || time.Since(start) > bound/2 {
		t.Errorf("TryAcquire under a Client MaxWait = %v after %v; want ErrNotAcquired at once", err, time.Since(start))
	}
	// A per-call MaxWait(0) overrides the default: one attempt.
	start = time.Now()
	if _, err := c.Acquire(ctx, "adv2-mw-b", dlock.MaxWait(0)); !errors.Is(err, dlock.ErrNotAcquired) || time.Since(start) > bound/2 {
		t.Errorf("Acquire(MaxWait(0)) under a Client MaxWait(%v) = %v after %v; want ErrNotAcquired at once", bound, err, time.Since(start))
	}
}
