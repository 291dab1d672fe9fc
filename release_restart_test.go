package dlock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/redistest"
)

// The acquire's reply is delayed 3 s; meanwhile the server is restarted
// empty and another client takes the name there. The delayed grant arrives
// within the lease's validity: two holders, as the docs allow after an
// empty restart. The first one's Release, its reply lost, finds the lease
// gone; the server's uptime is shorter than the lease's age counted from
// when its acquire was sent (not from when the reply came), so Release
// reports ErrNotHeld, as it does when its reply arrives.
func TestReleaseOfALeaseGrantedBeforeAnEmptyRestartReportsTheLoss(t *testing.T) {
	t.Parallel()
	for _, cs := range []struct{ fair, lose bool }{{false, true}, {true, true}, {false, false}} {
		fair, lose := cs.fair, cs.lose
		t.Run(map[bool]string{false: "plain", true: "fair"}[fair]+map[bool]string{true: "/reply-lost", false: "/reply-arrives"}[lose], func(t *testing.T) {
			s := redistest.Start(t, redistest.TCP())
			p := redistest.NewProxy(t, s.Addr())
			rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: 3, ReadTimeout: 10 * time.Second})
			t.Cleanup(func() { rdb.Close() })
			direct := s.Client(t)
			ctx := t.Context()
			c := newClient(t, rdb, waiting(fair), pipelined(false), dlock.LeaseTTL(15*time.Second), dlock.WithAutoExtend(false))
			if w, err := c.TryAcquire(ctx, "warm"); err == nil {
				w.Release(ctx)
			}
			name := "began"
			key := "dlock:{" + name + "}"
			p.Delay(0, 3*time.Second)
			type res struct {
				l   *dlock.Lock
				err error
			}
			got := make(chan res, 1)
			go func() {
				l, err := c.TryAcquire(ctx, name)
				got <- res{l, err}
			}()
			if !waitFor(2*time.Second, func() bool { return direct.Exists(ctx, key).Val() == 1 }) {
				t.Fatal("the acquire never reached the server")
			}
			takenAfterRestart(t, s, newClient(t, direct, waiting(fair)), name)
			r := <-got
			if r.err != nil {
				t.Skipf("the delayed acquire failed: %v (no two holders)", r.err)
			}
			p.Delay(0, 0)
			var err error
			if lose {
				err = stallThenCut(t, p, func() error { return r.l.Release(ctx) }, func() bool {
					time.Sleep(300 * time.Millisecond) // (the lease is gone: nothing in Redis to wait for)
					return true
				})
			} else {
				err = r.l.Release(ctx)
			}
			if !errors.Is(err, dlock.ErrNotHeld) {
				t.Errorf("Release of a lease whose name another holder took on the restarted server = %v, want ErrNotHeld", err)
			}
		})
	}
}

// The same for a lease handed over to a fair waiter, whose message is
// delayed 3 s: the lease's age counts from when the waiter queued.
func TestReleaseOfALeaseHandedOverBeforeAnEmptyRestartReportsTheLoss(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t, redistest.TCP())
	p := redistest.NewProxy(t, s.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: 3, ReadTimeout: 10 * time.Second})
	t.Cleanup(func() { rdb.Close() })
	direct := s.Client(t)
	ctx := t.Context()
	holder := newClient(t, direct, dlock.LeaseTTL(15*time.Second))
	w := newClient(t, rdb, pipelined(false), dlock.LeaseTTL(15*time.Second), dlock.WithAutoExtend(false))
	name := "began-ho"
	key := "dlock:{" + name + "}"
	h, err := holder.Acquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	type res struct {
		l   *dlock.Lock
		err error
	}
	got := make(chan res, 1)
	go func() {
		l, err := w.Acquire(ctx, name, dlock.MaxWait(20*time.Second))
		got <- res{l, err}
	}()
	if !waitFor(3*time.Second, func() bool { return direct.LLen(ctx, key+":q").Val() == 1 }) {
		t.Fatal("never queued")
	}
	if !waitFor(3*time.Second, listeningOnAll(t, name, direct)) {
		t.Fatal("never subscribed")
	}
	p.Delay(0, 3*time.Second)
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // (the handover is in the proxy)
	takenAfterRestart(t, s, newClient(t, direct), name)
	r := <-got
	if r.err != nil {
		t.Skipf("the waiter failed: %v", r.err)
	}
	p.Delay(0, 0)
	err = stallThenCut(t, p, func() error { return r.l.Release(ctx) }, func() bool {
		time.Sleep(300 * time.Millisecond) // (the lease is gone: nothing in Redis to wait for)
		return true
	})
	if !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Release of a handed-over lease whose name another holder took on the restarted server = %v, want ErrNotHeld", err)
	}
}

// takenAfterRestart restarts s empty and has c take name there.
func takenAfterRestart(t *testing.T, s *redistest.Server, c *dlock.Client, name string) {
	t.Helper()
	s.Restart()
	if !waitFor(5*time.Second, func() bool {
		_, err := c.TryAcquire(t.Context(), name)
		return err == nil
	}) {
		t.Fatal("another client never took the name on the restarted server")
	}
}
