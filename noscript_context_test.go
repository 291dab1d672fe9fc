package dlock_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/leakcheck"
	"github.com/dlockio/dlock/internal/redistest"
)

// The docs (guarantees): a call whose context ends mid-flight returns at
// once, with an error matching ErrNotAcquired and ctx's. A TryAcquire
// against a frozen server, or with replica ack while a stalled replica
// holds WAIT (its ack timeout 2s), must leave at its context's end, and
// leave nothing held once the server answers: a script-free Client's (a
// WATCH/MULTI/EXEC transaction on a go-redis connection of its own) and a
// scripting one's (the batcher's connection) alike.
func TestTryAcquireLeavesAtItsContextWhileTheServerStalls(t *testing.T) {
	t.Parallel()
	leakcheck.Check(t)
	ctx := t.Context()
	master := redistest.Start(t, redistest.TCP())
	replica := redistest.Start(t, redistest.TCP(), redistest.Args("--replicaof", "127.0.0.1", strconv.Itoa(master.Port())))
	if !replicaAcks(ctx, master, replica) {
		t.Fatal("the replica never synced")
	}
	rdb := master.Client(t)
	acked := dlock.WithReplicaAck(1, 2*time.Second)
	for i, tc := range []struct {
		name   string
		opts   []dlock.Option
		frozen *redistest.Server
	}{
		{"without scripts, a frozen server", []dlock.Option{dlock.WithoutScripts()}, master},
		{"without scripts, replica ack, a stalled replica", []dlock.Option{dlock.WithoutScripts(), acked}, replica},
		{"replica ack, a stalled replica", []dlock.Option{acked}, replica},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClient(t, rdb, append([]dlock.Option{dlock.LeaseTTL(time.Minute), dlock.WithAutoExtend(false)}, tc.opts...)...)
			name := "ctx-stall-" + strconv.Itoa(i)
			l, err := c.TryAcquire(ctx, name) // (a connection in the pool, the scripts loaded)
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			tc.frozen.Pause()
			resumed := false
			defer func() {
				if !resumed {
					tc.frozen.Resume()
				}
			}()
			short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			defer cancel()
			start := time.Now()
			l, err = c.TryAcquire(short, name)
			took := time.Since(start)
			tc.frozen.Resume()
			resumed = true
			if l != nil || !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("TryAcquire whose ctx ends mid-flight = %v, %v; want nil and ErrNotAcquired, context.DeadlineExceeded", l, err)
			}
			if took > 1500*time.Millisecond {
				t.Errorf("TryAcquire took %v past its 200ms ctx", took)
			}
			if !waitFor(4*time.Second, func() bool { return !exists(ctx, master, "dlock:{"+name+"}") }) {
				t.Errorf("the lock is still held 4s after the call whose caller left, by nobody")
			}
		})
	}
}

// A script-free Client's Inspect on a frozen server leaves at its
// context's end, with its context's error, as a scripting Client's does
// (the read is a MULTI on a go-redis connection of its own).
func TestWithoutScriptsInspectLeavesAtItsContext(t *testing.T) {
	t.Parallel()
	s, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.WithoutScripts(), dlock.WithAutoExtend(false))
	if _, err := c.Inspect(ctx, "ns-inspect"); err != nil { // (a connection in the pool)
		t.Fatal(err)
	}
	s.Pause()
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.Inspect(short, "ns-inspect")
	took := time.Since(start)
	s.Resume()
	if !errors.Is(err, context.DeadlineExceeded) || took > 1500*time.Millisecond {
		t.Errorf("Inspect on a frozen server with a 200ms ctx = %v after %v, want context.DeadlineExceeded at once", err, took)
	}
}
