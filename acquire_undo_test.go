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

// heldAndWaiting returns a lease of name that a Client on rdb holds for a
// minute, and a fair Client on conn, without auto-extension, to wait for it.
func heldAndWaiting(t *testing.T, rdb *redis.Client, conn driver.Conn, name string) (*dlock.Lock, *dlock.Client) {
	t.Helper()
	holder := newClient(t, rdb)
	t.Cleanup(func() { holder.Close(context.Background()) })
	held, err := holder.TryAcquire(t.Context(), name, dlock.LeaseTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	c, err := dlock.NewFrom(conn, dlock.WithAutoExtend(false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return held, c
}

// losingConn is go-redis's driver that loses the reply of its second fair
// acquire call (the script runs; the call fails with io.EOF) and refuses
// unsent those after the third, as a driver may.
type losingConn struct {
	driver.Conn
	fairCalls
}

// fairCalls counts a driver's fair acquire calls.
type fairCalls struct {
	mu sync.Mutex
	n  int
}

// count returns the number of the call of args if it is a fair acquire,
// and 0 if not.
func (f *fairCalls) count(args []any) int {
	if len(args) < 2 || args[1] != script.Named("acquire_fair").Hash() {
		return 0
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	return f.n
}

func (c *losingConn) Do(ctx context.Context, args ...any) (any, error) {
	switch n := c.count(args); {
	case n == 2:
		c.Conn.Do(ctx, args...)
		return nil, io.EOF
	case n > 3:
		return nil, fmt.Errorf("%w: refused", driver.ErrNotSent)
	}
	return c.Conn.Do(ctx, args...)
}

// A fair wait whose attempt's reply was lost, asked again under its token
// and queued by Redis, leaves the queue when its next attempt is refused
// unsent and the wait ends: the holder's release then frees the
// lock rather than hand it to the ended wait's token, which nobody would
// release before its TTL.
func TestFairWaitAskedAgainLeavesTheQueueWhenItEnds(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	held, c := heldAndWaiting(t, rdb, &losingConn{Conn: goredisdriver.Conn(rdb)}, "asked-again")
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

// handingConn is go-redis's driver that loses the reply of its second fair
// acquire call (the script runs; the call fails with io.EOF) and, after
// its third has run, calls handOver and holds that call's reply until its
// pub/sub connection has handled a message since.
type handingConn struct {
	driver.Conn
	fairCalls
	handOver func()
	handled  chan struct{} // closed once a message was handled
	once     sync.Once
}

func (c *handingConn) Do(ctx context.Context, args ...any) (any, error) {
	n := c.count(args)
	v, err := c.Conn.Do(ctx, args...)
	switch n {
	case 2:
		return nil, io.EOF
	case 3:
		c.handOver()
		select {
		case <-c.handled:
		case <-time.After(5 * time.Second):
		}
	}
	return v, err
}

func (c *handingConn) PubSub(ctx context.Context, channel string) (driver.PubSub, error) {
	ps, err := c.Conn.PubSub(ctx, channel)
	return &handledPubSub{PubSub: ps, c: c}, err
}

// handledPubSub closes its handingConn's handled when it is asked to
// receive after a message: the message was handled.
type handledPubSub struct {
	driver.PubSub
	c       *handingConn
	message bool
}

func (p *handledPubSub) Receive(ctx context.Context) (driver.Message, error) {
	if p.message {
		p.c.once.Do(func() { close(p.c.handled) })
	}
	m, err := p.PubSub.Receive(ctx)
	p.message = p.message || (err == nil && m.Kind == "message")
	return m, err
}

// A fair wait whose attempt's reply was lost and asked again under its
// token hears a handover to that token that comes before the request's
// reply: it takes the lock at once, not when it next wakes to
// try again (after the holder's lease would have run out), while the lock
// stays handed to it and taken for nobody.
func TestFairWaitAskedAgainHearsAHandoverBeforeItsReply(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	conn := &handingConn{Conn: goredisdriver.Conn(rdb), handled: make(chan struct{})}
	held, c := heldAndWaiting(t, rdb, conn, "handed-early")
	var released time.Time
	conn.handOver = func() { // (the request asked again is in the queue)
		released = time.Now()
		if err := held.Release(ctx); err != nil {
			t.Error(err)
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	l, err := c.Acquire(wctx, "handed-early", dlock.LeaseTTL(30*time.Second))
	if err != nil {
		t.Fatalf("Acquire whose handover came before its reply = %v, want the lock", err)
	}
	defer l.Release(ctx)
	if took := time.Since(released); took > 2*time.Second {
		t.Errorf("Acquire took the lock %v after the handover to it: it did not hear it", took)
	}
}
