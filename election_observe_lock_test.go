package dlock_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
)

// sent is a go-redis hook that counts the commands (and pipelines) sent.
type sent struct{ n atomic.Int64 }

func (h *sent) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *sent) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { h.n.Add(1); return next(ctx, cmd) }
}

func (h *sent) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { h.n.Add(1); return next(ctx, cmds) }
}

// Observe on a name a plain lock holds reads it no more often than on a
// name a leader holds (once, then as the lease would run out): that the
// name is another kind's is no failure to read it, to be tried again
// every 100ms for as long as the lock is held.
func TestElectionObserveOnALocksNameDoesNotPoll(t *testing.T) {
	t.Parallel()
	s, rdb := setup(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	const name = "observed-lock"
	if _, err := newClient(t, rdb, dlock.WithAutoExtend(false)).TryAcquire(ctx, name, dlock.LeaseTTL(time.Minute)); err != nil {
		t.Fatal(err)
	}
	mine := s.Client(t)
	var h sent
	mine.AddHook(&h)
	c := newClient(t, mine)
	t.Cleanup(func() { c.Close(context.WithoutCancel(ctx)) })
	obs, stop := context.WithCancel(ctx)
	defer stop()
	select { // (the first read done: what it sent to start is behind it)
	case ld := <-newElection(t, c, name).Observe(obs):
		if ld.Token != "" {
			t.Fatalf("Observe's first value on a lock's name = %+v; want nobody leading", ld)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Observe never read the name")
	}
	first := h.n.Load()
	if waitFor(time.Second, func() bool { return h.n.Load() >= first+5 }) {
		t.Errorf("Observe sent %d commands within a second of its first read of a name a lock holds; want none until the lease runs out", h.n.Load()-first)
	}
}
