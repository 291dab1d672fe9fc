package dlock_test

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/driver"
	"github.com/dlockio/dlock/internal/goredisdriver"
	"github.com/dlockio/dlock/internal/script"
)

// An acquire whose reply is lost is asked again under the same token. These
// tests pin what that must not cost: a validity past the lease, or a lock
// or permit left to a copy of a request nobody holds.

// astrayConn is go-redis's driver whose calls of one acquire script go
// wrong as first says for the first call, and as rest says for the later
// ones (nil: sent as they are).
type astrayConn struct {
	driver.Conn
	script      string
	first, rest func(c *astrayConn, ctx context.Context, args []any) (any, error)
	mu          sync.Mutex
	n           int
}

func (c *astrayConn) Do(ctx context.Context, args ...any) (any, error) {
	if len(args) < 2 || args[1] != script.Named(c.script).Hash() {
		return c.Conn.Do(ctx, args...)
	}
	c.mu.Lock()
	c.n++
	n := c.n
	c.mu.Unlock()
	switch {
	case n == 1 && c.first != nil:
		return c.first(c, ctx, args)
	case n > 1 && c.rest != nil:
		return c.rest(c, ctx, args)
	}
	return c.Conn.Do(ctx, args...)
}

// ranThenLost runs the call, waits pause, and loses its reply.
func ranThenLost(pause time.Duration) func(*astrayConn, context.Context, []any) (any, error) {
	return func(c *astrayConn, ctx context.Context, args []any) (any, error) {
		c.Conn.Do(ctx, args...)
		time.Sleep(pause)
		return nil, io.EOF
	}
}

// refusedUnsent fails the call as a dial that found the server gone.
func refusedUnsent(*astrayConn, context.Context, []any) (any, error) {
	return nil, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
}

// astrayClient returns a Client without auto-extension on conn.
func astrayClient(t *testing.T, conn driver.Conn, opts ...dlock.Option) *dlock.Client {
	t.Helper()
	c, err := dlock.NewFrom(conn, append(opts, dlock.WithAutoExtend(false))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// A reentrant hold asked again after its first request ran and its reply
// was lost late finds its hold, which it does not lengthen: its validity
// counts from the first request, and ends before the key does, so no
// other owner takes the lock while it is valid.
func TestAcquireAskedAgainAfterALateLostReplyIsValidNoLongerThanItsLease(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	conn := &astrayConn{Conn: goredisdriver.Conn(rdb), script: "acquire_reentrant", first: ranThenLost(time.Second)}
	l, err := astrayClient(t, conn, dlock.WithReentrant(true)).TryAcquire(ctx, "astray-valid", dlock.LeaseTTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	pttl, err := rdb.PTTL(ctx, l.Key()).Result()
	if err != nil {
		t.Fatal(err)
	}
	if expiry := time.Now().Add(pttl); l.ValidUntil().After(expiry) {
		t.Errorf("the hold is valid %v past its key's expiry", l.ValidUntil().Sub(expiry))
	}
}

// An acquire whose reply was lost, asked again and never sent again (the
// server unreachable), leaves nothing of its first copy: a TryAcquire
// leaves the lock free, and a waiter's failed wait leaves no queue entry
// for the holder's release to hand the lock to.
func TestAcquireAskedAgainUnsentUndoesItsFirstCopy(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, script string
		opts         []dlock.Option
	}{
		{"unfair", "acquire", []dlock.Option{dlock.WithUnfair(nil)}},
		{"fair", "acquire_fair", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, rdb := setup(t)
			ctx := t.Context()
			conn := &astrayConn{Conn: goredisdriver.Conn(rdb), script: tc.script, first: ranThenLost(0), rest: refusedUnsent}
			if _, err := astrayClient(t, conn, tc.opts...).TryAcquire(ctx, "astray-unsent", dlock.LeaseTTL(time.Minute)); err == nil {
				t.Fatal("TryAcquire whose requests were lost and refused took the lock")
			}
			if !waitFor(5*time.Second, func() bool { return rdb.Exists(ctx, "dlock:{astray-unsent}").Val() == 0 }) {
				t.Errorf("after the failed TryAcquire the lock is held by %q: by nobody", rdb.Get(ctx, "dlock:{astray-unsent}").Val())
			}
		})
	}
	t.Run("fair waiter", func(t *testing.T) {
		t.Parallel()
		_, rdb := setup(t)
		ctx := t.Context()
		conn := &astrayConn{Conn: goredisdriver.Conn(rdb), script: "acquire_fair", first: ranThenLost(0), rest: refusedUnsent}
		held, c := heldAndWaiting(t, rdb, conn, "astray-queued")
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if _, err := c.Acquire(wctx, "astray-queued", dlock.LeaseTTL(time.Minute)); err == nil {
			t.Fatal("Acquire whose requests were lost and refused took the lock")
		}
		if err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if v, err := rdb.Get(ctx, held.Key()).Result(); !errors.Is(err, redis.Nil) {
			t.Errorf("the lock after its holder's release = %q (%v): handed to the failed wait's token", v, err)
		}
	})
}

// lateCopy holds a call "in the network" (the caller gets io.EOF at once)
// and runs it when land is closed, closing landed after.
type lateCopy struct{ land, landed chan struct{} }

func (lc lateCopy) first(c *astrayConn, _ context.Context, args []any) (any, error) {
	go func() {
		<-lc.land
		c.Conn.Do(context.Background(), args...)
		close(lc.landed)
	}()
	return nil, io.EOF
}

// A TryAcquire whose first request is delayed (its reply lost) and whose
// request asked again is refused undoes its token: the delayed copy,
// landing after the holder's release, takes nothing, and the lock or
// permit is free. For a lock of each kind and a semaphore.
func TestRefusedTryAcquireAfterALostReplyLeavesItsLateCopyNothing(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, script string
		opts         []dlock.Option
		sem          bool
	}{
		{"unfair", "acquire", []dlock.Option{dlock.WithUnfair(nil)}, false},
		{"fair", "acquire_fair", nil, false},
		{"reentrant", "acquire_reentrant", []dlock.Option{dlock.WithReentrant(true)}, false},
		{"semaphore", "hold_acquire", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, rdb := setup(t)
			ctx := t.Context()
			take := func(c *dlock.Client) (*dlock.Lock, error) {
				if !tc.sem {
					return c.TryAcquire(ctx, "astray-late", dlock.LeaseTTL(time.Minute))
				}
				s, err := c.Semaphore("astray-late", 1)
				if err != nil {
					t.Fatal(err)
				}
				return s.TryAcquire(ctx, dlock.LeaseTTL(time.Minute))
			}
			held, err := take(newClient(t, rdb, tc.opts...))
			if err != nil {
				t.Fatal(err)
			}
			lc := lateCopy{make(chan struct{}), make(chan struct{})}
			conn := &astrayConn{Conn: goredisdriver.Conn(rdb), script: tc.script, first: lc.first}
			if l, err := take(astrayClient(t, conn, tc.opts...)); !errors.Is(err, dlock.ErrNotAcquired) {
				t.Fatalf("TryAcquire of the held lock = %v, %v, want ErrNotAcquired", l, err)
			}
			if err := held.Release(ctx); err != nil {
				t.Fatal(err)
			}
			close(lc.land)
			select {
			case <-lc.landed:
			case <-time.After(5 * time.Second):
				t.Fatal("the delayed copy never landed")
			}
			if n := rdb.Exists(ctx, held.Key()).Val(); n != 0 {
				t.Errorf("after the release the lock's key (%s) is held by the late copy of a refused TryAcquire: by nobody", rdb.Type(ctx, held.Key()).Val())
			}
		})
	}
}

// A polling waiter (reentrant, or unfair) whose first request is delayed
// (its reply lost) and whose request asked again is refused: the delayed
// copy lands once the holder's lease ended, and the hold the waiter is
// given later (the reentrant one's undo leaves the copy nothing; the unfair
// one's poll finds the lock its copy took) ends no later than its key, so no
// other owner takes the lock while it is valid.
func TestPollingWaiterAfterALostReplyIsValidNoLongerThanItsKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, script string
		mode         dlock.Option
		asked        int // the calls of script made once the waiter sleeps till its next poll
	}{
		{"reentrant", "acquire_reentrant", dlock.WithReentrant(true), 3}, // (asked again, and once it listens)
		{"unfair", "acquire", dlock.WithUnfair(nil), 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, rdb := setup(t)
			ctx := t.Context()
			held, err := newClient(t, rdb, tc.mode, dlock.WithAutoExtend(false)).TryAcquire(ctx, "astray-poller", dlock.LeaseTTL(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			lc := lateCopy{make(chan struct{}), make(chan struct{})}
			conn := &astrayConn{Conn: goredisdriver.Conn(rdb), script: tc.script, first: lc.first}
			// Its polls come 700ms apart: a copy landing just after one is
			// found by the next, 700ms after it set the hold's deadline.
			c := astrayClient(t, conn, tc.mode, dlock.WithUnfair(func(int) time.Duration { return 700 * time.Millisecond }))
			done := make(chan *dlock.Lock, 1)
			go func() {
				l, err := c.Acquire(ctx, "astray-poller", dlock.LeaseTTL(2*time.Second), dlock.MaxWait(10*time.Second))
				if err != nil {
					t.Error(err)
				}
				done <- l
			}()
			if !waitFor(5*time.Second, func() bool { conn.mu.Lock(); defer conn.mu.Unlock(); return conn.n >= tc.asked }) {
				t.Fatal("the waiter never asked again")
			}
			rdb.Del(ctx, held.Key()) // the holder's lease ends unannounced, as at its expiry
			close(lc.land)
			<-lc.landed
			l := <-done
			if l == nil {
				return // (its error is reported)
			}
			defer l.Release(ctx)
			pttl, err := rdb.PTTL(ctx, l.Key()).Result()
			if err != nil {
				t.Fatal(err)
			}
			if expiry := time.Now().Add(pttl); l.ValidUntil().After(expiry) {
				t.Errorf("the waiter's hold is valid %v past its key's expiry", l.ValidUntil().Sub(expiry))
			}
		})
	}
}

// A Redlock TryAcquire refused by its node after the reply to its first
// request was lost (the request delayed in the network) undoes its token
// there: the delayed copy, landing after the holder's release, leaves the
// lock free. (One node: with more, the round ends before the node that
// asked again answers, and its silence alone calls for the undo.)
func TestRedlockRefusedAfterALostReplyLeavesItsLateCopyNothing(t *testing.T) {
	t.Parallel()
	srvs, nodes := startQuorum(t, 1)
	ctx := t.Context()
	held, err := newRedlock(t, nodes, 100*time.Millisecond).TryAcquire(ctx, "astray-quorum", dlock.LeaseTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	lc := lateCopy{make(chan struct{}), make(chan struct{})}
	retrying := redis.NewClient(&redis.Options{Addr: srvs[0].Addr()}) // (a node asks again only through a client that retries)
	t.Cleanup(func() { retrying.Close() })
	conn := &astrayConn{Conn: goredisdriver.Conn(retrying), script: "acquire", first: lc.first}
	c, err := dlock.NewRedlockFrom([]driver.Conn{conn}, 500*time.Millisecond, dlock.WithAutoExtend(false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	if l, err := c.TryAcquire(ctx, "astray-quorum", dlock.LeaseTTL(time.Minute)); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire of the held lock = %v, %v, want ErrNotAcquired", l, err)
	}
	if conn.mu.Lock(); conn.n < 2 {
		t.Fatalf("the node was asked %d times, want the request asked again", conn.n)
	}
	conn.mu.Unlock()
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	close(lc.land)
	select {
	case <-lc.landed:
	case <-time.After(5 * time.Second):
		t.Fatal("the delayed copy never landed")
	}
	if !waitFor(5*time.Second, func() bool { return retrying.Exists(ctx, held.Key()).Val() == 0 }) {
		t.Errorf("after the release the lock is held by the late copy of a refused TryAcquire (%v left): by nobody", retrying.PTTL(ctx, held.Key()).Val())
	}
}
