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
// once, with an error matching ErrNotAcquired and ctx's. A script-free
// Client's acquisition runs as a WATCH/MULTI/EXEC transaction on a go-redis
// connection of its own: against a frozen server, or with replica ack
// while a stalled replica holds WAIT, it must leave at its context's end
// too, and leave nothing held once the server answers.
func TestWithoutScriptsTryAcquireLeavesAtItsContext(t *testing.T) {
	t.Parallel()
	leakcheck.Check(t)
	ctx := t.Context()
	master := redistest.Start(t, redistest.TCP())
	replica := redistest.Start(t, redistest.TCP(), redistest.Args("--replicaof", "127.0.0.1", strconv.Itoa(master.Port())))
	if !replicaAcks(ctx, master, replica) {
		t.Fatal("the replica never synced")
	}
	rdb := master.Client(t)
	for _, tc := range []struct {
		name   string
		opts   []dlock.Option
		frozen *redistest.Server
	}{
		{"a frozen server", nil, master},
		{"replica ack, a stalled replica", []dlock.Option{dlock.WithReplicaAck(1, 2*time.Second)}, replica},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClient(t, rdb, append([]dlock.Option{dlock.WithoutScripts(), dlock.LeaseTTL(time.Minute), dlock.WithAutoExtend(false)}, tc.opts...)...)
			name := "ns-ctx-" + strconv.Itoa(len(tc.opts))
			l, err := c.TryAcquire(ctx, name) // (a connection in the pool)
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
