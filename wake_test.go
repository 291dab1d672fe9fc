package dlock_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/leakcheck"
	"github.com/dlockio/dlock/internal/redistest"
)

// A marked lease (here a resumed one) taken over (its key lost and re-taken,
// as after a failover) before Release lands is reported ErrNotHeld when the
// release's reply is lost and dlock asks again: the marker the first copy
// wrote tells. (A clean lease writes none: a lease found gone after a lost
// reply counts as released, see Node.release.)
func TestReleaseReplyLostAfterTakeover(t *testing.T) {
	t.Parallel()
	t.Run("marked", func(t *testing.T) {
		s := redistest.Start(t, redistest.TCP())
		leakcheck.Check(t)
		direct := s.Client(t)
		p := redistest.NewProxy(t, s.Addr())
		rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: 3})
		t.Cleanup(func() { rdb.Close() })
		ctx := t.Context()
		c := newClient(t, rdb, dlock.WithAutoExtend(false))
		other := newClient(t, direct, dlock.WithAutoExtend(false))
		l, err := c.TryAcquire(ctx, "x", dlock.LeaseTTL(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if l, err = c.TryAcquire(ctx, "x", dlock.Resume(l.Token()), dlock.LeaseTTL(10*time.Second)); err != nil {
			t.Fatal(err)
		}
		// The key is lost (failover, eviction) and another client takes the lock.
		direct.Del(ctx, l.Key())
		o, err := other.TryAcquire(ctx, "x")
		if err != nil {
			t.Fatal(err)
		}
		defer o.Release(ctx)
		p.StallReplies()
		done := make(chan error, 1)
		go func() { done <- l.Release(ctx) }()
		time.Sleep(300 * time.Millisecond) // the release runs; its reply is held
		p.Cut()
		select {
		case err = <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("Release hung")
		}
		if !errors.Is(err, dlock.ErrNotHeld) {
			t.Fatalf("Release of a lease taken over (reply lost) = %v, want ErrNotHeld", err)
		}
	})
}

// An unfair waiter is woken by a release that comes after the holder
// extended its lease past the wake key's life: the waiter's next attempt
// set the key again, so the release announced itself (counted in the
// server's command statistics).
func TestUnfairWakeAfterExtension(t *testing.T) {
	// Serial: the release publishes only if the waiter's re-attempt set the wake key again before it expired; a busy machine delays the re-attempt past it.
	_, rdb := setup(t)
	ctx := t.Context()
	slow := func(int) time.Duration { return 5 * time.Second }
	c := newClient(t, rdb, dlock.WithUnfair(slow))
	w := newClient(t, rdb, dlock.WithUnfair(slow))
	l, err := c.TryAcquire(ctx, "ext", dlock.LeaseTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan time.Time, 1)
	go func() {
		m, err := w.Acquire(ctx, "ext", dlock.LeaseTTL(time.Second))
		got <- time.Now()
		if err == nil {
			m.Release(ctx)
		}
	}()
	time.Sleep(2400 * time.Millisecond) // several extensions; the waiter re-attempts at each pttl
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-got:
	case <-time.After(3 * time.Second):
		t.Fatal("waiter never took the lock")
	}
	stats := rdb.Info(ctx, "commandstats").Val()
	if !strings.Contains(stats, "cmdstat_publish:calls=1,") {
		t.Errorf("the release with a waiter did not publish once; commandstats:\n%s", stats)
	}
}

// A Redlock waiter (unfair nodes set the wake key) is woken by the release.
func TestRedlockWaiterWokenByRelease(t *testing.T) {
	t.Parallel()
	leakcheck.Check(t)
	var nodes []redis.UniversalClient
	for range 3 {
		nodes = append(nodes, redistest.Start(t).Client(t))
	}
	c := newRedlock(t, nodes, time.Second, dlock.WithUnfair(slowBackoff))
	w := newRedlock(t, nodes, time.Second, dlock.WithUnfair(slowBackoff))
	l, err := c.TryAcquire(t.Context(), "rl", dlock.LeaseTTL(8*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// The acquire returned once a majority granted it: a grant still on its
	// way to node 0 would let the waiter win node 0 (and set no wake key
	// there) instead of being refused.
	if !waitFor(5*time.Second, func() bool { return nodes[0].Exists(t.Context(), l.Key()).Val() == 1 }) {
		t.Fatal("the lease never reached node 0")
	}
	wokenByRelease(t, w, l, func() bool { return nodes[0].Exists(t.Context(), l.Key()+":w").Val() == 1 })
}

// A script-free waiter sets the wake key as a waiter with scripts does, so
// that the release of a holder with scripts announces itself to it.
func TestScriptFreeWaiterWokenByScriptedRelease(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	c := newClient(t, rdb, dlock.WithUnfair(slowBackoff))
	w := newClient(t, rdb, dlock.WithUnfair(slowBackoff), dlock.WithoutScripts())
	l, err := c.TryAcquire(t.Context(), "mixed", dlock.LeaseTTL(8*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	wokenByRelease(t, w, l, func() bool { return rdb.Exists(t.Context(), l.Key()+":w").Val() == 1 })
}

// A fair and an unfair Client on one name: a fair waiter is woken by the
// unfair holder's release (it set the wake key as it queued). (The other
// way round, an unfair waiter, which does not queue, waits for its own
// timer: a fair release reads no wake key.)
func TestFairWaiterWokenByUnfairRelease(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	h := newClient(t, rdb, dlock.WithUnfair(slowBackoff))
	w := newClient(t, rdb, dlock.LeaseTTL(30*time.Second)) // (a fair waiter renews its entry every 10s)
	l, err := h.TryAcquire(t.Context(), "mix", dlock.LeaseTTL(8*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	wokenByRelease(t, w, l, func() bool { return rdb.LLen(t.Context(), l.Key()+":q").Val() == 1 })
}

// slowBackoff is an unfair waiter's backoff far longer than a test waits.
func slowBackoff(int) time.Duration { return 10 * time.Second }

// wokenByRelease has w wait for l's lock in the background until ready
// says it listens, releases l, and fails t unless w takes the lock within
// 2s: l's lease has longer left, and the waiters here back off for longer,
// so only the release's announcement can wake w that soon.
func wokenByRelease(t *testing.T, w *dlock.Client, l *dlock.Lock, ready func() bool) {
	t.Helper()
	ctx := t.Context()
	got := make(chan error, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 7*time.Second)
		defer cancel()
		m, err := w.Acquire(wctx, l.Name())
		if err == nil {
			m.Release(ctx)
		}
		got <- err
	}()
	if !waitFor(3*time.Second, ready) {
		t.Fatal("the waiter never began to listen")
	}
	rel := time.Now()
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("the waiter: %v", err)
	}
	if d := time.Since(rel); d > 2*time.Second {
		t.Errorf("the waiter took the lock %v after the release: not woken by it", d)
	}
}

// An unfair waiter on a Cluster, with a backoff far longer than the test
// waits, is woken only by the release's SPUBLISH on the derived channel.
func TestUnfairWakeOnCluster(t *testing.T) {
	t.Parallel()
	_, cc := startCluster(t)
	ctx := t.Context()
	slow := func(int) time.Duration { return 8 * time.Second }
	for _, resume := range []bool{false, true} {
		name := "uw" + strconv.FormatBool(resume)
		hc := newClient(t, cc, dlock.WithUnfair(slow), dlock.LeaseTTL(30*time.Second))
		h, err := hc.TryAcquire(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if resume { // a marked lease: release.lua with the marker key
			if h, err = hc.TryAcquire(ctx, name, dlock.Resume(h.Token())); err != nil {
				t.Fatal(err)
			}
		}
		wc := newClient(t, cc, dlock.WithUnfair(slow), dlock.LeaseTTL(30*time.Second))
		got := make(chan time.Time, 1)
		go func() {
			wctx, cancel := context.WithTimeout(ctx, 7*time.Second)
			defer cancel()
			l, err := wc.Acquire(wctx, name)
			if err != nil {
				t.Errorf("resume=%v: waiter = %v", resume, err)
				got <- time.Time{}
				return
			}
			got <- time.Now()
			l.Release(ctx)
		}()
		if !waitFor(3*time.Second, func() bool { return cc.Exists(ctx, h.Key()+":w").Val() == 1 }) {
			t.Fatalf("resume=%v: no wake key", resume)
		}
		time.Sleep(100 * time.Millisecond)
		start := time.Now()
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if at := <-got; !at.IsZero() && at.Sub(start) > 2*time.Second {
			t.Errorf("resume=%v: waiter woke %v after the release: the SPUBLISH did not reach it", resume, at.Sub(start))
		}
	}
}

// The wake key a waiter sets lives no longer than the marker of a lease of
// the waiter's lease time does (min(TTL, 1 min)), however long the
// holder's lease has left: behind a 1,000-hour lease it does not stay for
// 1,000 hours after the release, in any mode that sets it.
func TestWakeKeyLivesAtMostTheWindow(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	const long = 1000 * time.Hour
	const bound = time.Minute // backend.Window(long)
	for _, m := range []struct {
		name string
		opts []dlock.Option
	}{
		{"fair", nil},
		{"unfair", []dlock.Option{dlock.WithUnfair(slowBackoff)}},
		{"script-free", []dlock.Option{dlock.WithUnfair(slowBackoff), dlock.WithoutScripts()}},
	} {
		name := "wake-" + m.name
		c := newClient(t, rdb, append([]dlock.Option{dlock.LeaseTTL(long)}, m.opts...)...)
		w := newClient(t, rdb, append([]dlock.Option{dlock.LeaseTTL(long)}, m.opts...)...)
		l, err := c.TryAcquire(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		wake := l.Key() + ":w"
		got := make(chan error, 1)
		go func() {
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			m, err := w.Acquire(wctx, name)
			if err == nil {
				err = m.Release(ctx)
			}
			got <- err
		}()
		if !waitFor(5*time.Second, func() bool { return rdb.Exists(ctx, wake).Val() == 1 }) {
			t.Fatalf("%s: the waiter never set the wake key", m.name)
		}
		if pttl := rdb.PTTL(ctx, wake).Val(); pttl <= 0 || pttl > bound {
			t.Errorf("%s: behind a %v lease the wake key lives %v, want at most %v", m.name, long, pttl, bound)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatalf("%s: the waiter: %v", m.name, err)
		}
		if pttl := rdb.PTTL(ctx, wake).Val(); pttl > bound {
			t.Errorf("%s: after the release the wake key lives %v more, want at most %v", m.name, pttl, bound)
		}
	}
}

// The release of a resumed Lock (a marked lease: the release sends the
// marker's life and the resumer's id) announces itself to an unfair waiter,
// with or without scripts, as a clean lease's does: the waiter is woken by
// the release, not by its backoff.
func TestUnfairWaiterWokenByReleaseOfAResumedLock(t *testing.T) {
	t.Parallel()
	for _, scripts := range []bool{true, false} {
		t.Run(strconv.FormatBool(scripts), func(t *testing.T) {
			_, rdb := setup(t)
			opts := []dlock.Option{dlock.WithUnfair(slowBackoff)}
			if !scripts {
				opts = append(opts, dlock.WithoutScripts())
			}
			c := newClient(t, rdb, opts...)
			w := newClient(t, rdb, opts...)
			l, err := c.TryAcquire(t.Context(), "resumed", dlock.LeaseTTL(8*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			if l, err = c.TryAcquire(t.Context(), "resumed", dlock.Resume(l.Token()), dlock.LeaseTTL(8*time.Second)); err != nil {
				t.Fatal(err)
			}
			wokenByRelease(t, w, l, func() bool { return rdb.Exists(t.Context(), l.Key()+":w").Val() == 1 })
		})
	}
}
