package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
)

// failFenceOnce makes the first fence.lua call (EVALSHA with 3 keys, the
// second of which is the fence counter) fail before it is sent.
type failFenceOnce struct{ armed atomic.Bool }

func (h *failFenceOnce) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *failFenceOnce) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if err := h.fail(cmd); err != nil {
			return err
		}
		return next(ctx, cmd)
	}
}
func (h *failFenceOnce) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if err := h.fail(cmd); err != nil {
				return err
			}
		}
		return next(ctx, cmds)
	}
}

// fail fails cmd if it is the first fence.lua call since the hook was armed.
func (h *failFenceOnce) fail(cmd redis.Cmder) error {
	a := cmd.Args()
	if len(a) > 4 && strings.HasPrefix(strings.ToLower(fmt.Sprint(a[0])), "eval") && fmt.Sprint(a[2]) == "3" &&
		strings.HasSuffix(fmt.Sprint(a[4]), "fence") && h.armed.CompareAndSwap(true, false) {
		err := errors.New("ERR injected failure")
		cmd.SetErr(err)
		return err
	}
	return nil
}

// resumeWithFailingFence returns a leader of name (a's Client on rdb), and
// a second Client cb, with its Election eb, whose next fence call fails
// before it is sent.
func resumeWithFailingFence(t *testing.T, name string) (*redis.Client, *dlock.Leadership, *dlock.Client, *dlock.Election) {
	t.Helper()
	s, rdb := setup(t)
	ea, _ := newClient(t, rdb, dlock.LeaseTTL(20*time.Second)).Election(name)
	a, err := ea.Campaign(t.Context(), "v")
	if err != nil {
		t.Fatal(err)
	}
	hook := &failFenceOnce{}
	brdb := s.Client(t)
	brdb.AddHook(hook)
	cb := newClient(t, brdb, dlock.LeaseTTL(20*time.Second))
	eb, _ := cb.Election(name)
	hook.armed.Store(true)
	return rdb, a, cb, eb
}

// A resumed campaign whose fence call fails (a transient Redis error) fails;
// it leaves the term as it found it, for another resume of its token, and
// does not end the leadership it was asked to take over.
func TestAResumedCampaignThatFailsLeavesTheTerm(t *testing.T) {
	t.Parallel()
	rdb, a, _, eb := resumeWithFailingFence(t, "resume-fails")
	ctx, tok := t.Context(), a.Lock().Token()
	b, err := eb.Campaign(ctx, "v", dlock.Resume(tok))
	if err == nil {
		b.Resign(ctx)
		t.Fatal("a resume whose fence call failed succeeded")
	}
	if got := rdb.Get(ctx, a.Lock().Key()).Val(); got != tok {
		t.Errorf("a resume that failed (%v) ended the leadership it was to take over: the key holds %q", err, got)
	}
	b2, err2 := eb.Campaign(ctx, "v", dlock.Resume(tok))
	if err2 != nil {
		t.Errorf("resume again: %v", err2)
	} else {
		b2.Resign(ctx)
	}
}

// A resumed Election.Do whose fence call fails fails without running its
// function, and leaves the term as a resumed Campaign does: its release
// neither sends the lease's release nor has it undone.
func TestAResumedElectionDoThatFailsLeavesTheTerm(t *testing.T) {
	t.Parallel()
	rdb, a, cb, eb := resumeWithFailingFence(t, "do-resume-fails")
	ctx, tok := t.Context(), a.Lock().Token()
	ran := false
	err := eb.Do(ctx, "v", func(context.Context, *dlock.Leadership) error { ran = true; return nil }, dlock.Resume(tok))
	if err == nil || ran {
		t.Fatalf("a resumed Do whose fence call failed = %v (fn ran: %v), want an error and fn not run", err, ran)
	}
	if err := cb.Close(ctx); err != nil { // (waits for any undo it started)
		t.Fatal(err)
	}
	if got := rdb.Get(ctx, a.Lock().Key()).Val(); got != tok {
		t.Errorf("a resumed Do that failed (%v) ended the leadership it was to take over: the key holds %q", err, got)
	}
	cc := newClient(t, rdb, dlock.LeaseTTL(20*time.Second))
	ec, _ := cc.Election("do-resume-fails")
	if err := ec.Do(ctx, "v", func(context.Context, *dlock.Leadership) error { return nil }, dlock.Resume(tok)); err != nil {
		t.Errorf("resume again: %v", err)
	}
}
