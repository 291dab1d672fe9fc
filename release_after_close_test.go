package dlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/leakcheck"
	"github.com/dlockio/dlock/internal/redistest"
)

// background counts the goroutines of t that carry on a clean-up or a
// quorum node's call after the call that started them returned. (A
// pipeline whose callers all left still awaits its reply, up to the Redis
// client's read timeout, as before Close: it sends nothing more.)
func background(t *testing.T) int {
	return countGoroutines(t, "backend.Retry") + countGoroutines(t, "backend.fanOut")
}

// A Release after Close, its reply lost (one node's, over a quorum), is
// sent on the caller's goroutine: it returns within its ctx and leaves no
// call or retry running, and what answered is released.
func TestReleaseAfterCloseLeavesNothingRunning(t *testing.T) {
	t.Parallel()
	for _, quorum := range []bool{false, true} {
		t.Run(map[bool]string{false: "node", true: "quorum"}[quorum], func(t *testing.T) {
			leakcheck.Check(t) // (first: its check runs once the servers are gone)
			var c *dlock.Client
			var p *redistest.Proxy
			var answering []*redis.Client // the servers whose replies come back
			if quorum {
				ps, via, direct := proxiedQuorum(t, 3)
				c, p, answering = newRedlock(t, via, 100*time.Millisecond), ps[0], direct[1:]
			} else {
				var rdb *redis.Client
				p, rdb, _ = proxied(t, -1, 5*time.Second)
				c = newClient(t, rdb)
			}
			l, err := c.TryAcquire(t.Context(), "after-close", dlock.LeaseTTL(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Close(t.Context()); err != nil {
				t.Fatalf("Close = %v", err)
			}
			p.StallReplies() // the release runs there; its reply never comes
			ctx, cancel := context.WithTimeout(t.Context(), time.Second)
			defer cancel()
			start := time.Now()
			err = l.Release(ctx)
			took := time.Since(start)
			t.Logf("Release after Close, a reply lost = %v (after %v)", err, took.Round(time.Millisecond))
			if took > 5*time.Second {
				t.Errorf("Release after Close took %v with a 1s ctx", took)
			}
			if n := background(t); n != 0 {
				t.Errorf("%d goroutines of the Release still running after it returned, after Close", n)
			}
			if n, vals := keyOnNodes(t.Context(), answering, "dlock:{after-close}"); n != 0 {
				t.Errorf("the lock still held on %d of the nodes that answered: %q", n, vals)
			}
			p.Cut()
		})
	}
}

// A Do whose fn is still running when another goroutine closes the Client
// releases its lock after Close; with the release's reply lost, Do returns
// and leaves nothing running (no undo retried in the background), and the
// lock is released (the command ran) or left to expire.
func TestDoWhoseFnOutlivesCloseLeavesNothingRunning(t *testing.T) {
	t.Parallel()
	leakcheck.Check(t)
	p, rdb, direct := proxied(t, -1, 300*time.Millisecond)
	c := newClient(t, rdb)
	const ttl = 5 * time.Second
	inFn, closed, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		done <- c.Do(t.Context(), "outlives", func(context.Context, *dlock.Lock) error {
			close(inFn)
			<-closed
			p.StallReplies() // the release runs; its reply, and any undo's, never comes
			return nil
		}, dlock.LeaseTTL(ttl))
	}()
	if !closedWithin(inFn, 10*time.Second) {
		t.Fatal("Do's fn never ran")
	}
	if err := c.Close(t.Context()); err != nil {
		t.Fatalf("Close = %v", err)
	}
	close(closed)
	select {
	case err := <-done:
		t.Logf("Do = %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("Do did not return 10s after its fn did")
	}
	if n := background(t); n != 0 {
		t.Errorf("%d clean-up goroutines still running after Do returned, after Close", n)
	}
	p.Cut()
	if !waitFor(ttl+2*time.Second, func() bool { return liveKeys(t.Context(), direct, "dlock:{outlives}") == 0 }) {
		t.Error("the lock outlived its lease")
	}
}
