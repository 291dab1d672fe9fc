package dlock_test

import (
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/redistest"
)

// A resumed Lock whose resume missed node 2 (which still records the
// first Lock's numbered extension, without a resumer id) is held when its
// TTL hears node 2 among the first majority (node 1 answers slowly): the
// TTL reports the lease's time left, and the Lock neither reports nor ends
// itself as lost, then releases. The first Lock's marker does not tell it
// that another Lock resumed the lease, as it tells no script (lib.lua's
// drives).
func TestRedlockResumedTTLWithTheNodeItsResumeMissedIsHeld(t *testing.T) {
	t.Parallel()
	srvs, direct := startQuorum(t, 3)
	ctx := t.Context()
	slow, p1 := proxiedNode(t, srvs[1], 0)
	_, r := resumedMissingNode2(t, srvs, direct, slow, "ttl-laggard")
	p1.Delay(0, 100*time.Millisecond) // (within the node timeout: the TTL's reads of nodes 0 and 2 come first)
	left, err := r.TTL(ctx)
	p1.Delay(0, 0)
	if err != nil || left <= 0 {
		t.Errorf("TTL of the resumed Lock (node 2 missed the resume) = %v, %v; want the time left", left, err)
	}
	if err := r.Err(); err != nil {
		t.Errorf("Err of the resumed Lock after its TTL = %v", err)
	}
	if err := r.Release(ctx); err != nil {
		t.Errorf("Release of the resumed Lock = %v", err)
	}
}

// A resumed unfair lock (release.lua, where a fair lock's release is
// release_fair.lua) whose resume missed node 2 (which records the first
// Lock's numbered extension, no resumer id) is released on node 2 too:
// with node 0 down, another Client takes the lock at once.
func TestRedlockResumedUnfairReleaseFreesTheNodeItsResumeMissed(t *testing.T) {
	t.Parallel()
	srvs, direct := startQuorum(t, 3)
	ctx := t.Context()
	_, r := resumedMissingNode2(t, srvs, direct, direct[1], "unfair-left", waiting(false))
	if err := r.Release(ctx); err != nil {
		t.Fatalf("Release of the resumed Lock = %v", err)
	}
	srvs[0].Kill()
	if err := takenWithin(t, direct, "unfair-left", 0); err != nil {
		t.Errorf("TryAcquire after the release, node 0 down = %v; node 2 still holds the released lease's token for %v", err, direct[2].PTTL(ctx, r.Key()).Val())
	}
}

// afterMarkerRead is a go-redis hook that sets read once a GET of a
// lease's marker ("…:r:<token>") came back, and runs before ahead of each
// call (an error fails the call unsent).
type afterMarkerRead struct {
	read   *atomic.Bool
	before func(cmds []redis.Cmder) error
}

func (h afterMarkerRead) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h afterMarkerRead) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		return h.ProcessPipelineHook(func(ctx context.Context, cmds []redis.Cmder) error { return next(ctx, cmd) })(ctx, []redis.Cmder{cmd})
	}
}
func (h afterMarkerRead) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if err := h.before(cmds); err != nil {
			for _, cmd := range cmds {
				cmd.SetErr(err)
			}
			return err
		}
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			if a := cmd.Args(); cmd.Name() == "get" && len(a) == 2 && strings.Contains(a[1].(string), ":r:") {
				h.read.Store(true)
			}
		}
		return err
	}
}

// evalIn reports whether cmds hold a script call.
func evalIn(cmds []redis.Cmder) bool {
	return slices.ContainsFunc(cmds, func(cmd redis.Cmder) bool { return strings.HasPrefix(cmd.Name(), "eval") })
}

// Two Clients resume one lease at once, both reading the same last
// extension: B's extension lands first on nodes 0 and 1 (node 2 misses
// it), C's then on node 2 alone, nodes 0 and 1 refusing it (B's came
// first). C's resume fails, and leaves nothing of its own: once B
// releases, another Client takes the lock with node 0 down, not once C's
// longer lease time has run out on node 2.
func TestRedlockResumeThatLostTheRaceLeavesNoLeaseOnTheNodeItLanded(t *testing.T) {
	t.Parallel()
	srvs, direct := startQuorum(t, 3)
	ctx := t.Context()
	name := "resume-race"
	opts := []dlock.Option{dlock.LeaseTTL(10 * time.Second), dlock.WithAutoExtend(false)}
	first := firstLease(t, newRedlock(t, direct, 200*time.Millisecond, opts...), name)
	numberedEverywhere(t, direct, first)

	open := make(chan struct{})
	var read atomic.Bool
	var held atomic.Int32
	var cNodes []redis.UniversalClient
	hold := func(cmds []redis.Cmder) error { // (each script call after the resume's read of the lease, until open)
		if read.Load() && evalIn(cmds) {
			held.Add(1)
			select {
			case <-open:
			case <-time.After(10 * time.Second):
			}
		}
		return nil
	}
	for _, s := range srvs {
		c := s.Client(t)
		c.AddHook(afterMarkerRead{&read, hold})
		cNodes = append(cNodes, c)
	}
	cClient := newRedlock(t, cNodes, 5*time.Second, dlock.LeaseTTL(time.Minute), dlock.WithAutoExtend(false))
	type result struct {
		l   *dlock.Lock
		err error
	}
	cDone := make(chan result, 1)
	go func() {
		l, err := cClient.TryAcquire(ctx, name, dlock.Resume(first.Token()))
		cDone <- result{l, err}
	}()
	if !waitFor(5*time.Second, func() bool { return held.Load() == 3 }) {
		close(open)
		t.Fatalf("C's extension was held on %d nodes, want 3", held.Load())
	}

	missed, node2 := evalsFailing(t, srvs[2])
	var b *dlock.Lock
	var err error
	node2.during(t, func() {
		b, err = newRedlock(t, []redis.UniversalClient{direct[0], direct[1], missed}, 200*time.Millisecond, opts...).TryAcquire(ctx, name, dlock.Resume(first.Token()))
	})
	close(open)
	if err != nil {
		t.Fatalf("B's resume on nodes 0 and 1 = %v", err)
	}
	if r := <-cDone; r.err == nil {
		r.l.Release(ctx)
		t.Fatal("C's resume, refused by nodes 0 and 1, succeeded")
	} else {
		t.Logf("C's resume: %v", r.err)
	}
	if err := cClient.Close(ctx); err != nil { // (its clean-up, if any, is over)
		t.Fatal(err)
	}
	if err := b.Release(ctx); err != nil {
		t.Fatalf("B's Release = %v", err)
	}
	srvs[0].Kill()
	if err := takenWithin(t, direct, name, 0); err != nil {
		t.Errorf("TryAcquire after B's release, node 0 down = %v; node 2 holds the lease for C's lease time, %v more, driven by no Lock", err, direct[2].PTTL(ctx, first.Key()).Val())
	}
}

// A resume whose extension never left the client (it could not dial
// Redis after the lease was read) cannot have landed: it leaves the first
// Lock's lease as it was, and the first Lock goes on extending it.
func TestResumeNeverSentLeavesTheFirstLease(t *testing.T) {
	t.Parallel()
	s, rdb := setup(t)
	ctx := t.Context()
	opts := []dlock.Option{dlock.LeaseTTL(10 * time.Second), dlock.WithAutoExtend(false)}
	first, err := newClient(t, rdb, opts...).TryAcquire(ctx, "never-sent")
	if err != nil {
		t.Fatal(err)
	}
	hooked := s.Client(t)
	var read, spent atomic.Bool
	hooked.AddHook(afterMarkerRead{&read, func(cmds []redis.Cmder) error {
		if read.Load() && evalIn(cmds) && !spent.Swap(true) { // (once: the script call fails as a failed dial does)
			return &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
		}
		return nil
	}})
	resumer := newClient(t, hooked, opts...)
	if r, err := resumer.TryAcquire(ctx, "never-sent", dlock.Resume(first.Token())); err == nil {
		r.Release(ctx)
		t.Fatal("the resume succeeded though its extension was never sent")
	} else {
		t.Logf("resume: %v", err)
	}
	if err := resumer.Close(ctx); err != nil { // (its clean-up, if any, is over)
		t.Fatal(err)
	}
	if h := rdb.Get(ctx, first.Key()).Val(); h != first.Token() {
		t.Errorf("the lock after a resume that was never sent holds %q; want the first Lock's lease", h)
	}
	if err := first.Extend(ctx, 10*time.Second); err != nil {
		t.Errorf("the first Lock's Extend after a resume that was never sent = %v", err)
	}
}

// resumedAgainMissingNode0 resumes, as in resumedMissingNode2, the lease
// of name on the quorum of srvs, then resumes it again with a third Client
// over nodes 0 (whose script calls fail unsent meanwhile), 1 (node1: a
// client to it) and 2: node 0 misses the second resume and still records
// the first resumer's extension. It returns the second resumed Lock.
func resumedAgainMissingNode0(t *testing.T, srvs []*redistest.Server, direct []redis.UniversalClient, node1 redis.UniversalClient, name string) *dlock.Lock {
	t.Helper()
	ctx := t.Context()
	first, _ := resumedMissingNode2(t, srvs, direct, direct[1], name)
	missed, node0 := evalsFailing(t, srvs[0])
	opts := []dlock.Option{dlock.LeaseTTL(10 * time.Second), dlock.WithAutoExtend(false)}
	var last *dlock.Lock
	var err error
	node0.during(t, func() {
		last, err = newRedlock(t, []redis.UniversalClient{missed, node1, direct[2]}, 200*time.Millisecond, opts...).TryAcquire(ctx, name, dlock.Resume(first.Token()))
	})
	if err != nil {
		t.Fatalf("second resume on nodes 1 and 2 = %v", err)
	}
	m0 := direct[0].Get(ctx, first.Key()+":r:"+first.Token()).Val()
	m1 := direct[1].Get(ctx, first.Key()+":r:"+first.Token()).Val()
	if !strings.Contains(m0, ".") || m0 == m1 {
		t.Fatalf("markers after the second resume: node 0 %q, node 1 %q; want node 0 to keep the first resumer's", m0, m1)
	}
	return last
}

// The last of two resumed Locks (A → B → C), whose resume missed node 0
// (which records B's extension), releases the lock on nodes 1 and 2,
// node 1's reply coming after the node timeout: no Lock resumed the lease
// after it, so Release reports no error.
func TestRedlockTwiceResumedReleaseWithALaggardAndASlowReplyIsReleased(t *testing.T) {
	t.Parallel()
	srvs, direct := startQuorum(t, 3)
	ctx := t.Context()
	slow, p1 := proxiedNode(t, srvs[1], 0)
	r := resumedAgainMissingNode0(t, srvs, direct, slow, "chain-slow")

	p1.Delay(0, time.Second)
	err := r.Release(ctx)
	if !waitFor(5*time.Second, func() bool { return direct[1].Exists(ctx, r.Key()).Val() == 0 }) {
		t.Fatal("node 1 never ran the release")
	}
	if direct[2].Exists(ctx, r.Key()).Val() != 0 {
		t.Fatal("node 2 still holds the lock after the release")
	}
	if err != nil {
		t.Errorf("Release of the twice resumed Lock, carried out on nodes 1 and 2 (node 0 missed the resume, node 1 answered late) = %v; want nil: no Lock resumed the lease after it", err)
	}
}

// The last of two resumed Locks releases the lock also on node 0, which
// missed its resume and still holds the lease's token, recording the
// first resumer's extension: with node 2 down, another Client takes the
// lock at once.
func TestRedlockTwiceResumedReleaseFreesTheNodeItsResumeMissed(t *testing.T) {
	t.Parallel()
	srvs, direct := startQuorum(t, 3)
	r := resumedAgainMissingNode0(t, srvs, direct, direct[1], "chain-left")
	freedWithNodeDown(t, srvs, direct, r, 0, 2)
}

// freedWithNodeDown releases r, a Lock over the quorum of srvs (direct:
// clients to each), kills node down, and checks that another Client takes
// the lock at once: node left, which r's resume missed, was freed too.
func freedWithNodeDown(t *testing.T, srvs []*redistest.Server, direct []redis.UniversalClient, r *dlock.Lock, left, down int) {
	t.Helper()
	if err := r.Release(t.Context()); err != nil {
		t.Errorf("Release = %v", err)
	}
	srvs[down].Kill()
	if err := takenWithin(t, direct, r.Name(), 0); err != nil {
		t.Errorf("TryAcquire after the release, node %d down = %v; node %d still holds the released lease's token for %v", down, err, left, direct[left].PTTL(t.Context(), r.Key()).Val())
	}
}

// The last of two resumed Locks, whose resume missed node 0 (which
// records the first resumer's extension), is held when its TTL hears node
// 0 among the first majority (node 1 answers slowly): an extension older
// than its own, of a Lock it superseded, does not tell it that another
// Lock resumed the lease.
func TestRedlockTwiceResumedTTLWithTheNodeItsResumeMissedIsHeld(t *testing.T) {
	t.Parallel()
	srvs, direct := startQuorum(t, 3)
	slow, p1 := proxiedNode(t, srvs[1], 0)
	r := resumedAgainMissingNode0(t, srvs, direct, slow, "chain-ttl")
	heldWithNode1Slow(t, p1, r, "the twice resumed Lock (node 0 missed the resume)")
}

// heldWithNode1Slow checks that the TTL of r, a Lock over a quorum of
// three, reports the time left when node 1 (reached through p1) answers
// after the others, and that r then releases: who names r.
func heldWithNode1Slow(t *testing.T, p1 *redistest.Proxy, r *dlock.Lock, who string) {
	t.Helper()
	p1.Delay(0, 100*time.Millisecond) // (within the node timeout: the TTL's reads of nodes 0 and 2 come first)
	left, err := r.TTL(t.Context())
	p1.Delay(0, 0)
	if err != nil || left <= 0 {
		t.Errorf("TTL of %s = %v, %v; want the time left", who, left, err)
	}
	if err := r.Release(t.Context()); err != nil {
		t.Errorf("Release of %s = %v", who, err)
	}
}

// Of a lease resumed twice on one server (A, then B, then C), the middle
// Lock B is superseded by C, which resumed after it: B's Fence, Extend and
// Release are refused as another Lock's lease (ErrNotHeld) and change
// nothing, and C goes on holding the lock; C's Release frees it. With
// scripts and without.
func TestResumedLockIsSupersededByALaterResume(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	for _, mode := range []string{"scripts", "without scripts"} {
		t.Run(mode, func(t *testing.T) {
			ctx := t.Context()
			opts := []dlock.Option{dlock.LeaseTTL(10 * time.Second), dlock.WithAutoExtend(false)}
			if mode != "scripts" {
				opts = append(opts, dlock.WithoutScripts())
			}
			name := "chain-" + mode
			a, err := newClient(t, rdb, opts...).TryAcquire(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			var locks []*dlock.Lock
			for _, who := range []string{"B", "C"} {
				l, err := newClient(t, rdb, opts...).TryAcquire(ctx, name, dlock.Resume(a.Token()))
				if err != nil {
					t.Fatalf("%s's resume = %v", who, err)
				}
				locks = append(locks, l)
			}
			b, c := locks[0], locks[1]
			if _, err := b.Fence(ctx); !errors.Is(err, dlock.ErrNotHeld) {
				t.Errorf("B's Fence after C resumed = %v, want ErrNotHeld", err)
			}
			if err := b.Extend(ctx, 20*time.Second); !errors.Is(err, dlock.ErrNotHeld) {
				t.Errorf("B's Extend after C resumed = %v, want ErrNotHeld", err)
			}
			if err := b.Release(ctx); !errors.Is(err, dlock.ErrNotHeld) {
				t.Errorf("B's Release after C resumed = %v, want ErrNotHeld", err)
			}
			if err := c.Extend(ctx, 10*time.Second); err != nil {
				t.Errorf("C's Extend = %v", err)
			}
			if err := c.Release(ctx); err != nil {
				t.Errorf("C's Release = %v", err)
			}
			if n := rdb.Exists(ctx, a.Key()).Val(); n != 0 {
				t.Errorf("the lock after C's Release exists (%d)", n)
			}
		})
	}
}
