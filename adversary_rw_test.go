package dlock_test

// Adversary tests of the read-write lock: each one found a way to break
// what RWMutex's documentation promises, and checks the promise.

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/dlockio/dlock"
)

// A writer waits behind a reader; Redis becomes unreachable from the
// writer's process for a moment, and the writer's Acquire ends with that
// error. Acquire's documentation says that the end of a wait leaves no
// queue entry behind, and RWMutex's that a line is held only by those who
// wait in it; but the attempt that failed never reached Redis (or, if it
// did, its undo found the connection refused and took that as a server
// that is gone with its data), so the entry of the attempt before it was
// left: a write that nobody waits for any more held back every reader
// behind it for max(TTL, 1s), and the reader's release then granted the
// write to nobody, for another TTL.
func TestRWAttackWriterFailedByTheNetworkLeavesItsPlace(t *testing.T) {
	if testing.Short() {
		t.Skip("a long fault/timing scenario; run without -short")
	}
	s, direct := setup(t)
	rdb, d := refusable(t, s)
	ctx := t.Context()
	const name = "rw-failed-writer"
	const ttl = 20 * time.Second // longer than the test: what is left is not gone by expiry
	w := newRW(t, newClient(t, rdb, dlock.LeaseTTL(ttl)), name).Writer()
	rw := newRW(t, newClient(t, direct, dlock.LeaseTTL(ttl)), name)
	// The read's short lease (kept by its watchdog) wakes the writer often:
	// it sleeps until the earliest hold's deadline at most.
	r, err := rw.Reader().TryAcquire(ctx, dlock.LeaseTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release(ctx)
	errc := make(chan error, 1)
	go func() {
		l, err := w.Acquire(ctx)
		if l != nil {
			l.Release(ctx)
		}
		errc <- err
	}()
	if !waitFor(10*time.Second, func() bool { return rwQueued(ctx, direct, name) == 1 }) {
		t.Fatal("the writer never queued")
	}
	d.cutAndRefuse()
	var werr error
	select {
	case werr = <-errc: // at its next attempt, when the read's lease would end
	case <-time.After(30 * time.Second):
		t.Fatal("the writer's Acquire did not end 30s after Redis became unreachable")
	}
	d.allow() // Redis is reachable again: a clean-up still under way gets through
	if werr == nil {
		t.Fatal("the writer's Acquire succeeded with Redis unreachable")
	}
	if !waitFor(5*time.Second, func() bool { return rwQueued(ctx, direct, name) == 0 }) {
		t.Errorf("the writer's Acquire returned %q and left its place in the line: %v", werr,
			direct.HGetAll(ctx, semKey(name)+":qw").Val())
	}
	if l, err := rw.Reader().TryAcquire(ctx); err != nil {
		t.Errorf("a second read while one is held and the writer gave up = %v, want held", err)
	} else {
		l.Release(ctx)
	}
	if err := r.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if m := rwMembers(ctx, direct, name); len(m) > 0 {
		t.Errorf("after the reader released: holds %v, want none (the write granted to a writer that gave up)", m)
	}
}

// Errors read once, "dlock: <op> "<name>": <cause>" (errors.go): the
// refusal of a hold asked for inside a hold of the name, and Holders on a
// name of another kind, said "dlock: " twice ("dlock: acquire "x": dlock:
// invalid argument: …").
func TestRWAttackErrorsSayDlockOnce(t *testing.T) {
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb)
	const name = "rw-errors-once"
	rw := newRW(t, c, name)
	var nested error
	if err := rw.Reader().Do(ctx, func(ctx context.Context, _ *dlock.Lock) error {
		_, nested = rw.Writer().TryAcquire(ctx)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	l, err := c.TryAcquire(ctx, "rw-errors-once-lock")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	_, wrong := newRW(t, c, "rw-errors-once-lock").Holders(ctx)
	for what, err := range map[string]error{"a write inside a read": nested, "Holders of a lock's name": wrong} {
		if err == nil {
			t.Errorf("%s: nil error", what)
		} else if n := strings.Count(err.Error(), "dlock: "); n != 1 {
			t.Errorf("%s: %q says \"dlock: \" %d times, want once", what, err, n)
		}
	}
}
