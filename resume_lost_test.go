package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/leakcheck"
	"github.com/dlockio/dlock/internal/redistest"
)

// stallAfterMarkerGet is a go-redis hook that stalls the proxy's replies
// once Resume's first read (its marker GET) has returned: the resuming
// extension runs in Redis and its reply is lost.
type stallAfterMarkerGet struct{ p *redistest.Proxy }

func (h stallAfterMarkerGet) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h stallAfterMarkerGet) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h stallAfterMarkerGet) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if isMarkerGet(cmd.Args()) {
			h.p.StallReplies()
		}
		return err
	}
}

// A Resume whose extension ran in Redis but whose reply was lost fails
// without claiming the lease; the lease is then driven by neither Lock
// (the old one is told it was superseded), and resuming the token again
// takes it over, so that its Release frees the name at once.
func TestResumeWhoseReplyIsLostCanBeResumedAgain(t *testing.T) {
	t.Parallel()
	leakcheck.Check(t)
	p, rdb, direct := proxied(t, -1, 0)
	ctx := t.Context()
	old := newClient(t, direct, dlock.LeaseTTL(20*time.Second), dlock.WithAutoExtend(false))
	a, err := old.Acquire(ctx, "resume-lost")
	if err != nil {
		t.Fatal(err)
	}
	lossy := newClient(t, rdb, pipelined(false))
	warm(t, ctx, lossy, "lock", "resume-lost-warm")
	rdb.AddHook(stallAfterMarkerGet{p})
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	_, err = lossy.TryAcquire(rctx, "resume-lost", dlock.Resume(a.Token()))
	cancel()
	p.Cut()
	if err == nil || errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("a Resume whose reply was lost = %v, want an error of unknown outcome", err)
	}
	if err := a.Extend(ctx, 20*time.Second); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("the old Lock's Extend after the lost Resume = %v, want ErrNotHeld (superseded)", err)
	}
	next := newClient(t, direct, dlock.LeaseTTL(20*time.Second))
	b, err := next.TryAcquire(ctx, "resume-lost", dlock.Resume(a.Token()))
	if err != nil {
		t.Fatalf("resuming again after the lost Resume: %v", err)
	}
	if err := b.Release(ctx); err != nil {
		t.Fatalf("Release of the lease resumed again: %v", err)
	}
	l, err := newClient(t, direct).TryAcquire(ctx, "resume-lost")
	if err != nil {
		t.Fatalf("the name after the resumed lease's release: %v", err)
	}
	l.Release(ctx)
}
