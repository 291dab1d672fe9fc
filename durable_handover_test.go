package dlock_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
)

// A fair waiter handed the lock confirms the handover with an attempt that
// waits for the append-only file to have it. WAITAOF covers the writes of
// its own connection only, and the release that handed the lock over ran on
// another: the attempt must write, also when it does not lengthen the lease
// (sent within the millisecond of the handover, as a waiter of the
// releasing Client often is). One the file does not have in time fails the
// wait as not durable and frees the lock.
func TestDurableHandoverNotMadeDurableFailsTheWait(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	s, rdb := durableServer(t, "everysec")
	opts := []dlock.Option{dlock.WithAutoExtend(false), dlock.LeaseTTL(time.Minute)}
	c := newClient(t, rdb, append(opts, dlock.WithDurableGrants(300*time.Millisecond))...)
	other := newClient(t, s.Client(t), opts...)
	for round := range 10 {
		name := "handed-" + strconv.Itoa(round)
		if _, err := s.Do(ctx, "CONFIG", "SET", "appendfsync", "everysec"); err != nil {
			t.Fatal(err)
		}
		a, err := durableTryAcquire(ctx, c, name) // (the holder's grant waits for the file too)
		if err != nil {
			t.Fatalf("round %d: durable TryAcquire = %v", round, err)
		}
		type result struct {
			l   *dlock.Lock
			err error
		}
		done := make(chan result, 1)
		go func() {
			l, err := c.Acquire(ctx, name)
			done <- result{l, err}
		}()
		if !waitFor(10*time.Second, func() bool { n, _ := rdb.LLen(ctx, "dlock:{"+name+"}:q").Result(); return n > 0 }) {
			t.Fatalf("round %d: the waiter never queued", round)
		}
		// The waiter's writes so far (its queue entry) are fsynced: a write
		// after them on one connection, and WAITAOF on it.
		if _, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.Set(ctx, "synced", "1", 0)
			p.Do(ctx, "WAITAOF", 1, 0, 10000)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Do(ctx, "CONFIG", "SET", "appendfsync", "no"); err != nil {
			t.Fatal(err)
		}
		if err := a.Release(ctx); err != nil {
			t.Fatalf("round %d: Release = %v", round, err)
		}
		var r result
		select {
		case r = <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("round %d: the waiter's Acquire still waiting 30s after the handover", round)
		}
		if r.err == nil {
			r.l.Release(ctx)
			t.Fatalf("round %d: the waiter's Acquire succeeded with the handover never fsynced", round)
		}
		if !errors.Is(r.err, dlock.ErrNotDurable) {
			t.Errorf("round %d: the waiter's Acquire = %v, want ErrNotDurable", round, r.err)
		}
		var l *dlock.Lock
		if !waitFor(5*time.Second, func() bool { l, err = other.TryAcquire(ctx, name); return err == nil }) {
			t.Fatalf("round %d: TryAcquire after a handover not made durable = %v, want the lock free", round, err)
		}
		l.Release(ctx)
	}
}
