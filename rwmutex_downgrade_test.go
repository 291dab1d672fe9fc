package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlockio/dlock"
)

// RWMutex.Downgrade: a write hold becomes a read in one step, keeping its
// token, fence and lease; the readers first in line join it, a writer
// never comes in between, and the downgraded hold extends and releases as
// a read.
func TestRWMutexDowngrade(t *testing.T) {
	_, rdb := setup(t)
	ctx := t.Context()
	const name = "rw-down"
	c := newClient(t, rdb)
	rw := newRW(t, c, name)
	w, err := rw.Writer().TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fence := fenceOf(t, w)
	wait := func(l *dlock.RWLocker) <-chan *dlock.Lock {
		ch := make(chan *dlock.Lock, 1)
		go func() {
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			h, err := l.Acquire(wctx)
			if err != nil && ctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Acquire: %v", err)
			}
			ch <- h
		}()
		return ch
	}
	queued := func(n int64) {
		t.Helper()
		if !waitFor(3*time.Second, func() bool { return rdb.LLen(ctx, semKey(name)+":q").Val() == n }) {
			t.Fatalf("%d waiters never queued", n)
		}
	}
	reader := wait(rw.Reader())
	queued(1)
	writer := wait(rw.Writer())
	queued(2)

	if err := rw.Downgrade(ctx, w); err != nil {
		t.Fatal(err)
	}
	var r *dlock.Lock
	select {
	case r = <-reader:
	case <-time.After(3 * time.Second):
		t.Fatal("the reader first in line was not let in by the downgrade")
	}
	if m := rwMembers(ctx, rdb, name); len(m) != 2 || m[0][0] != 'r' || m[1][0] != 'r' {
		t.Fatalf("holds after the downgrade: %v, want two reads", m)
	}
	if f := fenceOf(t, w); f != fence {
		t.Errorf("fence after the downgrade = %d, want the write's %d", f, fence)
	}
	if err := w.Extend(ctx, 5*time.Second); err != nil {
		t.Errorf("Extend of the downgraded hold: %v", err)
	}
	if err := rw.Downgrade(ctx, w); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("a second Downgrade = %v, want ErrInvalid", err)
	}
	if err := rw.Downgrade(ctx, r); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("Downgrade of a read = %v, want ErrInvalid", err)
	}
	select {
	case <-writer:
		t.Fatal("a writer got in while reads are held")
	case <-time.After(200 * time.Millisecond):
	}
	if err := w.Release(ctx); err != nil {
		t.Fatalf("Release of the downgraded hold: %v", err)
	}
	if err := r.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case w2 := <-writer:
		if w2 == nil {
			t.Fatal("the writer was not let in once the reads were released")
		}
		w2.Release(ctx)
	case <-time.After(3 * time.Second):
		t.Fatal("the writer was not let in once the reads were released")
	}

	// A writer first in line: the downgrade lets in nobody behind it.
	w, err = rw.Writer().TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	writer = wait(rw.Writer())
	queued(1)
	reader = wait(rw.Reader())
	queued(2)
	if err := rw.Downgrade(ctx, w); err != nil {
		t.Fatal(err)
	}
	select {
	case <-reader:
		t.Fatal("a reader passed the writer first in line")
	case <-writer:
		t.Fatal("a writer got in beside a read")
	case <-time.After(300 * time.Millisecond):
	}
	w.Release(ctx)
	if w2 := <-writer; w2 != nil {
		w2.Release(ctx)
	} else {
		t.Fatal("the writer first in line never got the lock")
	}
	if r := <-reader; r != nil {
		r.Release(ctx)
	}
	if err := rw.Downgrade(ctx, w); !errors.Is(err, dlock.ErrInvalid) && !errors.Is(err, dlock.ErrReleased) {
		t.Errorf("Downgrade after Release = %v", err)
	}
}
