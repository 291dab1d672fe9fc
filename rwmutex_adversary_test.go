package dlock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/goredisdriver"
)

// downgradedWithALateWriteCopy takes a write hold through a connection that
// loses the reply to its first request (the request held in the network, a
// copy asked again and granted), downgrades it to a read, and then lets the
// first copy of the write's request land. It returns the downgraded hold.
func downgradedWithALateWriteCopy(t *testing.T, name string) (*dlock.Lock, *dlock.RWMutex, *dlock.Client) {
	t.Helper()
	_, rdb := setup(t)
	ctx := t.Context()
	lc := lateCopy{make(chan struct{}), make(chan struct{})}
	conn := &astrayConn{Conn: goredisdriver.Conn(rdb), script: "hold_acquire", first: lc.first}
	c := astrayClient(t, conn)
	rw, err := c.RWMutex(name)
	if err != nil {
		t.Fatal(err)
	}
	w, err := rw.Writer().Acquire(ctx, dlock.LeaseTTL(time.Minute), dlock.MaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if conn.mu.Lock(); conn.n < 2 {
		conn.mu.Unlock()
		t.Fatal("the write's request was not asked again")
	} else {
		conn.mu.Unlock()
	}
	if err := rw.Downgrade(ctx, w); err != nil {
		t.Fatal(err)
	}
	close(lc.land)
	select {
	case <-lc.landed:
	case <-time.After(5 * time.Second):
		t.Fatal("the delayed copy never landed")
	}
	other, err := newClient(t, rdb).RWMutex(name)
	if err != nil {
		t.Fatal(err)
	}
	return w, other, c
}

// A write whose first request was delayed in the network (its reply lost,
// asked again and granted) and then downgraded: the first copy, landing
// while the downgraded read is held, must take nothing. Another reader
// then gets a read at once: only reads are held, nobody waits.
func TestRWMutexLateWriteCopyAfterDowngradeBlocksNoReader(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	w, other, _ := downgradedWithALateWriteCopy(t, "adv-dg-late-read")
	defer w.Release(ctx)
	r, err := other.Reader().TryAcquire(ctx, dlock.LeaseTTL(time.Minute))
	if err != nil {
		hs, _ := other.Holders(ctx)
		t.Fatalf("a read beside the downgraded read (holds %+v, nobody waiting) = %v: the late copy of the write's request queued a phantom writer", hs, err)
	}
	r.Release(ctx)
}

// The same late copy, once the downgraded read was extended to a shorter
// lease (a numbered extension) and released: the lock must be free, not
// handed as a write to the released hold's token, held by nobody.
func TestRWMutexLateWriteCopyAfterDowngradeLeavesNoWriteAfterRelease(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	w, other, _ := downgradedWithALateWriteCopy(t, "adv-dg-late-release")
	if err := w.Extend(ctx, 30*time.Second); err != nil { // shorter than the minute: numbered
		t.Fatal(err)
	}
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l, err := other.Writer().TryAcquire(ctx, dlock.LeaseTTL(time.Minute))
	if err != nil {
		hs, _ := other.Holders(ctx)
		if errors.Is(err, dlock.ErrNotAcquired) && len(hs) == 1 && hs[0].Token == w.Token() {
			t.Fatalf("after the downgraded read's release the lock is held as a write by its token (TTL %v), by nobody: %v", hs[0].TTL, err)
		}
		t.Fatalf("a write after the release = %v (holds %+v)", err, hs)
	}
	l.Release(ctx)
}
