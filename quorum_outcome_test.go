package dlock_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/redistest"
)

// A quorum's Extend and Fence of a held lease succeed while a majority of
// nodes still hold it; with too few yes answers they fail without losing
// the lease while the nodes that did not answer could still make a
// majority hold it (a QuorumError, not ErrNotAcquired: only an
// acquisition's matches it); and they report the lease lost (ErrNotHeld)
// once so many nodes answered "not ours" that no majority holds it.
// (Serial: it freezes a server with SIGSTOP.)
func TestRedlockExtendAndFenceOutcomeFollowsTheNodesAnswers(t *testing.T) {
	srvs, nodes := startQuorum(t, 3)
	ctx := t.Context()
	c := newRedlock(t, nodes, 300*time.Millisecond, dlock.LeaseTTL(5*time.Second), dlock.WithAutoExtend(false))
	ops := map[string]func(context.Context, *dlock.Lock) error{
		"extend": func(ctx context.Context, l *dlock.Lock) error { return l.Extend(ctx, 5*time.Second) },
		"fence":  func(ctx context.Context, l *dlock.Lock) error { _, err := l.Fence(ctx); return err },
	}
	tests := []struct {
		name    string
		deleted []int // the nodes the lease is deleted from
		paused  int   // a node frozen during the call; -1: none
		want    string
	}{
		{"all hold it", nil, -1, "ok"},
		{"one lost it", []int{0}, -1, "ok"},
		{"one lost it, one silent", []int{0}, 1, "unknown"},
		{"two lost it", []int{0, 1}, -1, "lost"},
		{"two lost it, one silent", []int{0, 1}, 2, "lost"},
	}
	for op, call := range ops {
		for _, tt := range tests {
			name := "outcome-" + op + "-" + tt.name
			l := onEveryNode(t, c, nodes, name)
			for _, i := range tt.deleted {
				if _, err := srvs[i].Do(ctx, "DEL", lockKeys(name)[0]); err != nil {
					t.Fatal(err)
				}
			}
			if tt.paused >= 0 {
				srvs[tt.paused].Pause()
			}
			err := call(ctx, l)
			if tt.paused >= 0 {
				srvs[tt.paused].Resume()
			}
			_, quorum := errors.AsType[*dlock.QuorumError](err)
			switch tt.want {
			case "ok":
				if err != nil || l.Err() != nil {
					t.Errorf("%s: = %v (Err %v); want nil, the lease held", name, err, l.Err())
				}
			case "unknown":
				if !quorum || errors.Is(err, dlock.ErrNotAcquired) || errors.Is(err, dlock.ErrNotHeld) || l.Err() != nil {
					t.Errorf("%s: = %v (Err %v); want a QuorumError (not ErrNotAcquired: the lease was taken), the lease kept", name, err, l.Err())
				}
			case "lost":
				if quorum || !errors.Is(err, dlock.ErrNotHeld) || !errors.Is(l.Err(), dlock.ErrNotHeld) {
					t.Errorf("%s: = %v (Err %v); want ErrNotHeld, the lease lost", name, err, l.Err())
				}
			}
			l.Release(ctx)
		}
	}
}

// onEveryNode takes name with the quorum c, again while the lease is held
// by a bare majority of nodes (on a loaded machine a node can answer after
// the node timeout: the lease is taken without it), so that it is held on
// every node, and fails the test if it is not within 10 tries.
func onEveryNode(t *testing.T, c *dlock.Client, nodes []redis.UniversalClient, name string) *dlock.Lock {
	t.Helper()
	for range 10 {
		l, err := c.TryAcquire(t.Context(), name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		held := 0
		for _, n := range nodes {
			held += int(n.Exists(t.Context(), l.Key()).Val())
		}
		if held == len(nodes) {
			return l
		}
		t.Logf("%s: held on %d of %d nodes; again", name, held, len(nodes))
		l.Release(t.Context())
	}
	t.Fatalf("%s: not held on every node in 10 tries", name)
	return nil
}

// failEvals fails every script call of a go-redis client while on is set,
// unsent, as a node that cannot be reached; it counts them in refused, if
// set.
type failEvals struct {
	on      *atomic.Bool
	refused *atomic.Int64
}

func (h failEvals) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h failEvals) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		return h.fail(cmd, func() error { return next(ctx, cmd) })
	}
}
func (h failEvals) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if err := h.fail(cmd, func() error { return nil }); err != nil {
				return err
			}
		}
		return next(ctx, cmds)
	}
}
func (h failEvals) fail(cmd redis.Cmder, next func() error) error {
	if h.on.Load() && strings.HasPrefix(cmd.Name(), "eval") {
		if h.refused != nil {
			h.refused.Add(1)
		}
		err := errors.New("node unreachable")
		cmd.SetErr(err)
		return err
	}
	return next()
}

// A Resume over a quorum whose extension reaches no majority fails as a
// TryAcquire does: its QuorumError is the resume's, and matches
// ErrNotAcquired.
func TestARedlockResumeWithoutAMajorityIsNotAcquired(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	var on atomic.Bool
	var nodes []redis.UniversalClient
	for i := range 3 {
		c := redistest.Start(t).Client(t)
		if i > 0 {
			c.AddHook(failEvals{on: &on})
		}
		nodes = append(nodes, c)
	}
	held, err := newRedlock(t, nodes, time.Second, dlock.WithAutoExtend(false)).Acquire(ctx, "resume-q")
	if err != nil {
		t.Fatal(err)
	}
	on.Store(true)
	_, err = newRedlock(t, nodes, time.Second).TryAcquire(ctx, "resume-q", dlock.Resume(held.Token()))
	on.Store(false)
	if qe, ok := errors.AsType[*dlock.QuorumError](err); !ok || qe.Op != "resume" || !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("Resume that no majority extended = %v, want a resume's QuorumError matching ErrNotAcquired", err)
	}
}
