package dlock_test

import (
	"context"
	"errors"
	"io"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/driver"
	"github.com/dlockio/dlock/internal/goredisdriver"
	"github.com/dlockio/dlock/internal/script"
)

// holdConn is go-redis's driver whose next call of one script, once armed,
// is held "in the network" (its caller gets io.EOF at once, and asks
// again) until land is closed; landed is closed once it ran.
type holdConn struct {
	driver.Conn
	script string
	mu     sync.Mutex
	armed  *lateCopy
}

func (c *holdConn) arm() lateCopy {
	lc := lateCopy{make(chan struct{}), make(chan struct{})}
	c.mu.Lock()
	c.armed = &lc
	c.mu.Unlock()
	return lc
}

func (c *holdConn) Do(ctx context.Context, args ...any) (any, error) {
	if len(args) < 2 || args[1] != script.Named(c.script).Hash() {
		return c.Conn.Do(ctx, args...)
	}
	c.mu.Lock()
	lc := c.armed
	c.armed = nil
	c.mu.Unlock()
	if lc == nil {
		return c.Conn.Do(ctx, args...)
	}
	go func() {
		<-lc.land
		c.Conn.Do(context.Background(), args...)
		close(lc.landed)
	}()
	return nil, io.EOF
}

// A nested hold whose first acquire copy is held in the network, then
// shortened by Extend and left to lapse (its Lock reports it lost), must
// not be brought back by that copy landing later: once the outer hold is
// released, no Lock holds the lock, and another owner takes it.
func TestLateCopyOfALapsedNestedHoldDoesNotReviveIt(t *testing.T) {
	t.Parallel()
	for _, shorten := range []bool{false, true} {
		name := "as-acquired"
		if shorten {
			name = "shortened"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, rdb := setup(t)
			ctx := t.Context()
			conn := &holdConn{Conn: goredisdriver.Conn(rdb), script: "acquire_reentrant"}
			c := astrayClient(t, conn, dlock.WithReentrant(true))
			owner, err := c.Owner("o")
			if err != nil {
				t.Fatal(err)
			}
			lock := "late-lapsed-" + name
			outer, err := owner.TryAcquire(ctx, lock, dlock.LeaseTTL(20*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			lc := conn.arm()
			innerTTL := time.Second
			if shorten {
				innerTTL = 15 * time.Second
			}
			inner, err := owner.TryAcquire(ctx, lock, dlock.LeaseTTL(innerTTL))
			if err != nil {
				t.Fatal(err)
			}
			if shorten {
				if err := inner.Extend(ctx, time.Second); err != nil {
					t.Fatal(err)
				}
			}
			if !closedWithin(inner.Done(), 5*time.Second) {
				t.Fatal("the inner hold never lapsed")
			}
			time.Sleep(100 * time.Millisecond) // past its deadline in Redis too
			close(lc.land)
			<-lc.landed
			if err := outer.Release(ctx); err != nil {
				t.Fatal(err)
			}
			other, err := asOwner(t, newClient(t, rdb, dlock.WithReentrant(true)), "other").TryAcquire(ctx, lock)
			if err != nil {
				all, _ := rdb.HGetAll(ctx, outer.Key()).Result()
				t.Fatalf("after the outer hold's release (the inner lapsed, its Lock lost) another owner's TryAcquire = %v; the lock holds %v for %v more: held by nobody", err, all, rdb.PTTL(ctx, outer.Key()).Val())
			}
			other.Release(ctx)
		})
	}
}

// A reentrant waiter (it polls) whose refused attempt had a copy held in
// the network, which lands on the free lock while the waiter sleeps, and
// whose wait then ends (MaxWait): the lock is left free, not held by
// that copy.
func TestPollingWaiterGivingUpAfterItsCopyLandedLeavesTheLockFree(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	other := newClient(t, rdb, dlock.WithReentrant(true), dlock.WithAutoExtend(false))
	held, err := other.TryAcquire(ctx, "poll-giveup", dlock.LeaseTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	conn := &holdConn{Conn: goredisdriver.Conn(rdb), script: "acquire_reentrant"}
	c := astrayClient(t, conn, dlock.WithReentrant(true), dlock.WithUnfair(func(int) time.Duration { return 5 * time.Second }))
	lc := conn.arm()
	done := make(chan error, 1)
	go func() {
		l, err := c.Acquire(ctx, "poll-giveup", dlock.LeaseTTL(10*time.Second), dlock.MaxWait(1500*time.Millisecond))
		if l != nil {
			l.Release(ctx)
			err = errors.New("took the lock")
		}
		done <- err
	}()
	time.Sleep(300 * time.Millisecond)
	rdb.Del(ctx, held.Key()) // the holder's lease ends unannounced
	close(lc.land)
	<-lc.landed
	if err := <-done; !errors.Is(err, dlock.ErrNotAcquired) {
		t.Logf("the wait: %v", err)
	}
	if !waitFor(3*time.Second, func() bool { return rdb.Exists(ctx, held.Key()).Val() == 0 }) {
		all, _ := rdb.HGetAll(ctx, held.Key()).Result()
		t.Errorf("after the waiter gave up the lock holds %v for %v more: held by nobody", all, rdb.PTTL(ctx, held.Key()).Val())
	}
}

// A waiter that polls (reentrant, unfair) whose refused attempt had a
// copy held in the network, and whose Client is closed by its Waiting
// hook (the wait is then gone and sends nothing more), leaves that copy
// nothing: landing after the holder's release, it does not take the lock
// for nobody.
func TestPollingWaiterClosedInItsHookLeavesItsLateCopyNothing(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, script string
		opts         []dlock.Option
	}{
		{"reentrant", "acquire_reentrant", []dlock.Option{dlock.WithReentrant(true)}},
		{"unfair", "acquire", []dlock.Option{dlock.WithUnfair(nil)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, rdb := setup(t)
			ctx := t.Context()
			holder := newClient(t, rdb, append(tc.opts, dlock.WithAutoExtend(false))...)
			held, err := holder.TryAcquire(ctx, "poll-closed", dlock.LeaseTTL(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			conn := &holdConn{Conn: goredisdriver.Conn(rdb), script: tc.script}
			closed := make(chan error, 1)
			var c *dlock.Client
			c, err = dlock.NewFrom(conn, append(tc.opts, dlock.WithAutoExtend(false), dlock.WithObserver(dlock.Observer{
				Waiting: func(_ context.Context, _ string, d int) {
					if d > 0 {
						closed <- closeNow(c)
					}
				},
			}))...)
			if err != nil {
				t.Fatal(err)
			}
			lc := conn.arm()
			if l, err := c.Acquire(ctx, "poll-closed", dlock.LeaseTTL(10*time.Second)); l != nil || err == nil {
				t.Fatalf("Acquire whose Client its hook closed = %v, %v; want an error", l, err)
			}
			if err := <-closed; err != nil {
				t.Fatalf("Close in the Waiting hook = %v", err)
			}
			if err := held.Release(ctx); err != nil {
				t.Fatal(err)
			}
			close(lc.land)
			<-lc.landed
			if n := rdb.Exists(ctx, held.Key()).Val(); n != 0 {
				t.Errorf("after the holder's release the lock (%s) is held %v more by the late copy of a wait its Client closed: by nobody", rdb.Type(ctx, held.Key()).Val(), rdb.PTTL(ctx, held.Key()).Val())
			}
		})
	}
}

// A nested hold whose first acquire copy is held in the network and which
// Extend then shortens keeps that deadline when the copy lands while it is
// valid: the hold's field in Redis ends no later than a margin past its
// Lock's validity, and no earlier than it.
func TestLateCopyOfAShortenedNestedHoldKeepsItsDeadline(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	conn := &holdConn{Conn: goredisdriver.Conn(rdb), script: "acquire_reentrant"}
	owner, err := astrayClient(t, conn, dlock.WithReentrant(true)).Owner("o")
	if err != nil {
		t.Fatal(err)
	}
	outer, err := owner.TryAcquire(ctx, "late-nested-short", dlock.LeaseTTL(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer outer.Release(ctx)
	lc := conn.arm()
	inner, err := owner.TryAcquire(ctx, "late-nested-short", dlock.LeaseTTL(15*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer inner.Release(ctx)
	if err := inner.Extend(ctx, 3*time.Second); err != nil {
		t.Fatal(err)
	}
	close(lc.land)
	<-lc.landed
	tm, _ := rdb.Time(ctx).Result()
	all, err := rdb.HGetAll(ctx, inner.Key()).Result()
	if err != nil {
		t.Fatal(err)
	}
	var d int64 // the inner hold's deadline: the sooner of the two
	for f, v := range all {
		if n, _ := strconv.ParseInt(v, 10, 64); strings.HasPrefix(f, "h:") && (d == 0 || n < d) {
			d = n
		}
	}
	left := time.Duration(d-tm.UnixMilli()) * time.Millisecond
	valid := time.Until(inner.ValidUntil())
	if left > valid+500*time.Millisecond || left < valid {
		t.Errorf("after Extend(3s) and the late copy the hold's field ends in %v; its Lock is valid %v more", left, valid)
	}
}

// A reentrant waiter (it polls) whose delayed copy took the free lock for
// it, and who sleeps past that hold's deadline while another hold of its
// owner keeps the lock, finds at its next poll a hold that lapsed: it must
// not be granted a hold that Redis does not keep for as long as its Lock
// is valid.
func TestPollingWaiterFindingItsLapsedHoldIsValidNoLongerThanIt(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	held, err := newClient(t, rdb, dlock.WithReentrant(true), dlock.WithAutoExtend(false)).TryAcquire(ctx, "poll-lapsed", dlock.LeaseTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	conn := &holdConn{Conn: goredisdriver.Conn(rdb), script: "acquire_reentrant"}
	owner, err := astrayClient(t, conn, dlock.WithReentrant(true), dlock.WithUnfair(func(int) time.Duration { return 2500 * time.Millisecond })).Owner("o")
	if err != nil {
		t.Fatal(err)
	}
	lc := conn.arm()
	done := make(chan *dlock.Lock, 1)
	go func() {
		l, err := owner.Acquire(ctx, "poll-lapsed", dlock.LeaseTTL(time.Second), dlock.MaxWait(10*time.Second))
		if err != nil {
			t.Error(err)
		}
		done <- l
	}()
	time.Sleep(300 * time.Millisecond)
	rdb.Del(ctx, held.Key()) // the holder's lease ends unannounced
	close(lc.land)
	<-lc.landed
	other, err := owner.TryAcquire(ctx, "poll-lapsed", dlock.LeaseTTL(20*time.Second)) // the owner's other hold
	if err != nil {
		t.Fatal(err)
	}
	defer other.Release(ctx)
	l := <-done
	if l == nil {
		return
	}
	defer l.Release(ctx)
	tm, _ := rdb.Time(ctx).Result()
	all, _ := rdb.HGetAll(ctx, l.Key()).Result()
	var d int64 // the waiter's hold's deadline: the sooner of the two
	for f, v := range all {
		if n, _ := strconv.ParseInt(v, 10, 64); strings.HasPrefix(f, "h:") && (d == 0 || n < d) {
			d = n
		}
	}
	if left, valid := time.Duration(d-tm.UnixMilli())*time.Millisecond, time.Until(l.ValidUntil()); len(all) != 4 || left < valid {
		t.Errorf("the waiter's hold is valid %v more; Redis keeps %v (%d holds)", valid, left, len(all)-2)
	}
}
