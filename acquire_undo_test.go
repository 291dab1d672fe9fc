package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/driver"
	"github.com/dlockio/dlock/internal/goredisdriver"
	"github.com/dlockio/dlock/internal/leakcheck"
	"github.com/dlockio/dlock/internal/redistest"
	"github.com/dlockio/dlock/internal/script"
)

// An acquisition whose grant comes back after its validity ran out is not
// returned (ErrNotAcquired, saying so) and is undone at once: its lease,
// kept in Redis for a lock-delay past its validity, does not block the
// next holder, in either waiting mode and without scripts.
func TestAcquireWhoseGrantComesTooLateIsUndoneDespiteLockDelay(t *testing.T) {
	t.Parallel()
	leakcheck.Check(t)
	p, rdb, direct := proxied(t, -1, 0)
	ctx := t.Context()
	for _, mode := range []struct {
		name string
		opt  dlock.Option
	}{{"fair", waiting(true)}, {"unfair", waiting(false)}, {"script-free", dlock.WithoutScripts()}} {
		name := "late-" + mode.name
		c := newClient(t, rdb, mode.opt, dlock.WithAutoExtend(false))
		other := newClient(t, direct, mode.opt)
		warm(t, ctx, c, "lock", name+"-warm") // (the scripts are loaded: the attempt is one round trip)
		p.Delay(0, 400*time.Millisecond)      // each reply comes after a 100ms lease's validity
		_, err := c.TryAcquire(ctx, name, dlock.LeaseTTL(100*time.Millisecond), dlock.LockDelay(time.Minute))
		p.Delay(0, 0)
		if !errors.Is(err, dlock.ErrNotAcquired) || !strings.Contains(err.Error(), tooLate) {
			t.Errorf("%s: TryAcquire whose grant came too late = %v, want ErrNotAcquired saying the reply came too late", mode.name, err)
		}
		var l *dlock.Lock
		if !waitFor(5*time.Second, func() bool { l, err = other.TryAcquire(ctx, name); return err == nil }) {
			t.Fatalf("%s: the late grant's lease still blocks the lock (%v): it was not undone", mode.name, err)
		}
		l.Release(ctx)
	}
}

// An acquisition whose ctx ends while its request is unanswered undoes it:
// the caller, its ctx done, waits for the undo's first try only briefly,
// not for the undo's whole bound, and the undo, left to the background,
// frees the lock once Redis answers again.
func TestAcquireWhoseCtxEndsUnansweredUndoesWithoutWaitingOut(t *testing.T) { // (not parallel: it measures how long the caller waits)
	leakcheck.Check(t)
	p, rdb, direct := proxied(t, -1, 10*time.Second)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.WithAutoExtend(false))
	other := newClient(t, direct)
	const name = "unanswered"
	warm(t, ctx, c, "lock", name+"-warm")
	p.StallReplies() // requests run; no reply comes back, the undo's included
	tctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.TryAcquire(tctx, name, dlock.LeaseTTL(time.Minute))
	took := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("TryAcquire whose ctx ended unanswered = %v, want context.DeadlineExceeded", err)
	}
	if took > 1900*time.Millisecond { // (300ms, then 100ms for the undo's first try; the bound without a done ctx is 2s more)
		t.Errorf("TryAcquire whose ctx ended unanswered returned after %v: it waited out the undo", took)
	}
	p.Cut() // (the held replies are dropped: the undo tries again, answered)
	var l *dlock.Lock
	if !waitFor(5*time.Second, func() bool { l, err = other.TryAcquire(ctx, name); return err == nil }) {
		t.Fatalf("the unanswered grant's lease (1m) still blocks the lock (%v): it was not undone", err)
	}
	l.Release(ctx)
}

// A quorum attempt that a minority granted and a majority refused (a split
// vote, answered without error) is refused and undone on the node that
// granted it: its lease does not linger there for its TTL. The refusals
// come late (a proxy delays them), so the grant is in when they settle it.
func TestRedlockSplitVoteUndoesTheMinoritysGrant(t *testing.T) {
	t.Parallel()
	leakcheck.Check(t)
	ctx := t.Context()
	var nodes []redis.UniversalClient
	var key string
	for i := range 3 {
		s := redistest.Start(t, redistest.TCP())
		addr := s.Addr()
		if i > 0 { // the majority: held by another, one Client per node, and slow to answer
			l, err := newClient(t, s.Client(t), dlock.WithUnfair(nil), dlock.LeaseTTL(time.Minute), dlock.WithAutoExtend(false)).TryAcquire(ctx, "split")
			if err != nil {
				t.Fatal(err)
			}
			defer l.Release(context.WithoutCancel(ctx))
			key = l.Key()
			p := redistest.NewProxy(t, addr)
			p.Delay(0, 200*time.Millisecond)
			addr = p.Addr()
		}
		rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
		t.Cleanup(func() { rdb.Close() })
		nodes = append(nodes, rdb)
	}
	q := newRedlock(t, nodes, 2*time.Second, dlock.LeaseTTL(time.Minute), dlock.WithAutoExtend(false))
	if _, err := q.TryAcquire(ctx, "split"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("quorum TryAcquire against a majority held by another = %v, want ErrNotAcquired", err)
	}
	if !waitFor(5*time.Second, func() bool { return nodes[0].Exists(ctx, key).Val() == 0 }) {
		t.Errorf("the minority's grant of a refused quorum attempt still holds %s on its node: it was not undone", key)
	}
}

// losingConn is go-redis's driver that loses the reply of its second fair
// acquire call (the script runs; the call fails with io.EOF) and refuses
// unsent those after the third, as a driver may.
type losingConn struct {
	driver.Conn
	mu    sync.Mutex
	calls int
}

func (c *losingConn) Do(ctx context.Context, args ...any) (any, error) {
	if len(args) < 2 || args[1] != script.Named("acquire_fair").Hash() {
		return c.Conn.Do(ctx, args...)
	}
	c.mu.Lock()
	c.calls++
	n := c.calls
	c.mu.Unlock()
	switch {
	case n == 2:
		c.Conn.Do(ctx, args...)
		return nil, io.EOF
	case n > 3:
		return nil, fmt.Errorf("%w: refused", driver.ErrNotSent)
	}
	return c.Conn.Do(ctx, args...)
}

// A fair wait whose attempt's reply was lost, undone and asked again with
// a new token that Redis queued, leaves the queue when its next attempt is
// refused unsent and the wait ends: the holder's release then frees the
// lock rather than hand it to the ended wait's token, which nobody would
// release before its TTL.
func TestFairWaitAskedAgainLeavesTheQueueWhenItEnds(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	holder := newClient(t, rdb)
	t.Cleanup(func() { holder.Close(context.Background()) })
	held, err := holder.TryAcquire(ctx, "asked-again", dlock.LeaseTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	c, err := dlock.NewFrom(&losingConn{Conn: goredisdriver.Conn(rdb)}, dlock.WithAutoExtend(false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	// Its queue entry lives 1.5s, renewed every 500ms: the refused attempt
	// comes before the context ends.
	if _, err := c.Acquire(wctx, "asked-again", dlock.LeaseTTL(1500*time.Millisecond)); !errors.Is(err, driver.ErrNotSent) {
		t.Fatalf("Acquire whose attempt was refused = %v, want driver.ErrNotSent", err)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if v, err := rdb.Get(ctx, held.Key()).Result(); !errors.Is(err, redis.Nil) {
		t.Errorf("the lock after its holder's release = %q (%v): handed to the ended wait's token", v, err)
	}
}
