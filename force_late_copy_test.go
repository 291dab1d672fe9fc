package dlock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/goredisdriver"
)

// A lease ended by ForceRelease, whose first acquire request was delayed
// in the network (its reply lost, the request asked again and granted), is
// told lost at its next extension, as documented, though that copy lands
// after another holder came and went: the force set its token's marker
// ended, as a release does, so the copy takes nothing. Were it to give the
// forced hold back to its token, its holder (a lock's, or a read-write
// lock's writer) would never learn that another held the lock meanwhile.
func TestForcedLeaseIsToldLostDespiteALateCopyOfItsRequest(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, script string
		opts         []dlock.Option
		write        bool // a read-write lock's write, else a lock's hold
	}{
		{"unfair", "acquire", []dlock.Option{dlock.WithUnfair(nil)}, false},
		{"fair", "acquire_fair", nil, false},
		{"reentrant", "acquire_reentrant", []dlock.Option{dlock.WithReentrant(true)}, false},
		{"rwmutex write", "hold_acquire", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, rdb := setup(t)
			ctx := t.Context()
			name := "forced-late-" + tc.name
			acquire := func(c *dlock.Client, try bool, opts ...dlock.LockOption) (*dlock.Lock, error) {
				switch {
				case tc.write && try:
					return newRW(t, c, name).Writer().TryAcquire(ctx, opts...)
				case tc.write:
					return newRW(t, c, name).Writer().Acquire(ctx, opts...)
				case try:
					return c.TryAcquire(ctx, name, opts...)
				}
				return c.Acquire(ctx, name, opts...)
			}
			lc := lateCopy{make(chan struct{}), make(chan struct{})}
			conn := &astrayConn{Conn: goredisdriver.Conn(rdb), script: tc.script, first: lc.first}
			l, err := acquire(astrayClient(t, conn, tc.opts...), false, dlock.LeaseTTL(time.Minute), dlock.MaxWait(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			defer l.Release(ctx)
			other := newClient(t, rdb, tc.opts...)
			if ok, err := other.ForceRelease(ctx, name); err != nil || !ok {
				t.Fatalf("ForceRelease = %v, %v", ok, err)
			}
			next, err := acquire(other, true)
			if err != nil {
				t.Fatalf("an acquisition after the ForceRelease: %v", err)
			}
			if err := next.Release(ctx); err != nil {
				t.Fatal(err)
			}
			close(lc.land)
			select {
			case <-lc.landed:
			case <-time.After(5 * time.Second):
				t.Fatal("the delayed copy never landed")
			}
			if err := l.Extend(ctx, time.Minute); !errors.Is(err, dlock.ErrNotHeld) {
				info, _ := other.Inspect(ctx, name)
				t.Fatalf("Extend of the forced lease after another holder came and went = %v, want ErrNotHeld (the lock now: %+v)", err, info)
			}
			if info, err := other.Inspect(ctx, name); err != nil || info.Held {
				t.Errorf("the lock after the late copy landed: %+v, %v; want it free", info, err)
			}
		})
	}
}

// A script-free ForceRelease sets the forced lease's marker ended, as the
// scripted one does: a copy of its acquire still in flight is refused.
func TestWithoutScriptsForceSetsTheLeasesMarkerEnded(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.WithoutScripts())
	l, err := c.TryAcquire(ctx, "forced-marker", dlock.LeaseTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := c.ForceRelease(ctx, "forced-marker"); err != nil || !ok {
		t.Fatalf("ForceRelease = %v, %v", ok, err)
	}
	marker := l.Key() + ":r:" + l.Token()
	if v, err := rdb.Get(ctx, marker).Result(); err != nil || v != "0" {
		t.Fatalf("the forced lease's marker %s = %q, %v; want \"0\"", marker, v, err)
	}
	if pttl := rdb.PTTL(ctx, marker).Val(); pttl < time.Minute+50*time.Second || pttl > 2*time.Minute {
		t.Errorf("the marker lives %v more, want the lease's minute and a minute beyond, as force_release.lua sets it", pttl)
	}
	if err := l.Extend(ctx, time.Minute); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Extend of the forced lease = %v, want ErrNotHeld", err)
	}
}
