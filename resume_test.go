package dlock_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/redistest"
)

// A lease resumed by another Client (as a restarted process would) is the
// same lease: nobody else can take the lock, its fence is above the old
// holder's, its watchdog keeps it past the TTL, it releases the lock, and
// the old Lock finds it gone.
func TestResumeTakesOverTheLease(t *testing.T) {
	_, rdb := setup(t)
	ctx := t.Context()
	old := newClient(t, rdb, dlock.LeaseTTL(time.Second), dlock.WithAutoExtend(false), dlock.HolderMeta("job-7"))
	a, err := old.Acquire(ctx, "handoff")
	if err != nil {
		t.Fatal(err)
	}
	oldFence := fenceOf(t, a)

	next := newClient(t, rdb, dlock.LeaseTTL(600*time.Millisecond))
	b, err := next.Acquire(ctx, "handoff", dlock.Resume(a.Token()))
	if err != nil {
		t.Fatalf("Resume of a live lease: %v", err)
	}
	if b.Token() != a.Token() || b.Meta() != "job-7" {
		t.Errorf("resumed token %q meta %q; want %q job-7", b.Token(), b.Meta(), a.Token())
	}
	if f := fenceOf(t, b); f <= oldFence {
		t.Errorf("resumed fence %d, not above the old holder's %d", f, oldFence)
	}
	time.Sleep(1500 * time.Millisecond) // past both TTLs: the resumed Lock's watchdog keeps it
	if err := b.Err(); err != nil {
		t.Fatalf("the resumed lease lapsed under its watchdog: %v", err)
	}
	other := newClient(t, rdb)
	if _, err := other.TryAcquire(ctx, "handoff"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire of the resumed lock = %v, want ErrNotAcquired", err)
	}
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Extend(ctx, time.Second); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("the old Lock's Extend after the resumed one released = %v, want ErrNotHeld", err)
	}
	l, err := other.TryAcquire(ctx, "handoff")
	if err != nil {
		t.Fatalf("the lock after the resumed lease's release: %v", err)
	}
	l.Release(ctx)
}

// Resume refuses a lease that has ended (released, expired, never
// existed), what is not a token, metadata other than the token's, a
// reentrant Client and a multi-lock; none of them leaves anything behind.
func TestResumeRefusals(t *testing.T) {
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.LeaseTTL(300*time.Millisecond), dlock.WithAutoExtend(false), dlock.HolderMeta("m"))

	released, err := c.Acquire(ctx, "gone")
	if err != nil {
		t.Fatal(err)
	}
	released.Release(ctx)
	expired, err := c.Acquire(ctx, "lapsed")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(400 * time.Millisecond)
	held, err := c.Acquire(ctx, "held")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(ctx)

	for _, tc := range []struct {
		what, name, token string
		opts              []dlock.LockOption
		want              error
	}{
		{"a released lease", "gone", released.Token(), nil, dlock.ErrNotHeld},
		{"an expired lease", "lapsed", expired.Token(), nil, dlock.ErrNotHeld},
		{"another lease of the name", "held", "AAAAAAAAAAAAAAAAAAAAAA.m", nil, dlock.ErrNotHeld},
		{"the token on another name", "other", held.Token(), nil, dlock.ErrNotHeld},
		{"too short a token", "held", "abc", nil, dlock.ErrInvalid},
		{"a token with a space", "held", "AAAAAAAAAAAAAAAAAAAAAA.a b", nil, dlock.ErrInvalid},
		{"a random part that is not base64url", "held", strings.Repeat("*", 22), nil, dlock.ErrInvalid},
		{"other metadata", "held", held.Token(), []dlock.LockOption{dlock.HolderMeta("not-m")}, dlock.ErrInvalid},
	} {
		t.Run(tc.what, func(t *testing.T) {
			opts := append([]dlock.LockOption{dlock.Resume(tc.token)}, tc.opts...)
			if _, err := c.TryAcquire(ctx, tc.name, opts...); !errors.Is(err, tc.want) {
				t.Errorf("TryAcquire with Resume = %v, want %v", err, tc.want)
			}
			if _, err := c.Acquire(ctx, tc.name, opts...); !errors.Is(err, tc.want) {
				t.Errorf("Acquire with Resume = %v, want %v", err, tc.want)
			}
		})
	}
	if l, err := c.TryAcquire(ctx, "held", dlock.Resume(held.Token()), dlock.HolderMeta("m")); err != nil {
		t.Errorf("Resume with the token's own metadata = %v", err)
	} else if l.Token() != held.Token() {
		t.Errorf("resumed %q, want %q", l.Token(), held.Token())
	}

	re := newClient(t, rdb, dlock.WithReentrant(true))
	if _, err := re.TryAcquire(ctx, "held", dlock.Resume(held.Token())); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("Resume on a reentrant Client = %v, want ErrInvalid", err)
	}
	if _, err := c.AcquireAll(ctx, []string{"held", "x"}, dlock.Resume(held.Token())); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("AcquireAll with Resume = %v, want ErrInvalid", err)
	}
	for _, name := range []string{"gone", "lapsed", "other", "x"} {
		if n := liveKeys(ctx, rdb, "dlock:{"+name+"}"); n != 0 {
			t.Errorf("a refused Resume left the lock %q held", name)
		}
	}
}

// The resumed Lock numbers its extensions above the old holder's: one
// that shortens the lease takes effect even after the old holder's
// shortening ones, and a late copy of an old holder's extension (here:
// the old Lock, still running, extending again) cannot undo it.
func TestResumeOrdersExtensionsAboveTheOldHolders(t *testing.T) {
	_, rdb := setup(t)
	ctx := t.Context()
	old := newClient(t, rdb, dlock.LeaseTTL(10*time.Second), dlock.WithAutoExtend(false))
	a, err := old.Acquire(ctx, "seq")
	if err != nil {
		t.Fatal(err)
	}
	for _, ttl := range []time.Duration{8 * time.Second, 7 * time.Second, 6 * time.Second} { // ordered: each shortens
		if err := a.Extend(ctx, ttl); err != nil {
			t.Fatal(err)
		}
	}
	next := newClient(t, rdb, dlock.LeaseTTL(5*time.Second), dlock.WithAutoExtend(false))
	b, err := next.Acquire(ctx, "seq", dlock.Resume(a.Token()))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Extend(ctx, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	if pttl := rdb.PTTL(ctx, "dlock:{seq}").Val(); pttl > 2*time.Second || pttl <= 0 {
		t.Fatalf("after the resumed Lock's Extend(2s) the key lives %v, want ≤ 2s", pttl)
	}
	a.Extend(ctx, 9*time.Second) // the old holder's next number, below the resumed Lock's
	if pttl := rdb.PTTL(ctx, "dlock:{seq}").Val(); pttl > 2*time.Second {
		t.Errorf("an older holder's extension undid the resumed Lock's: the key lives %v", pttl)
	}
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A resumed Lock tells its loss as any Lock does: when the lock is deleted
// under it, its watchdog finds out and Done closes.
func TestResumedLeaseToldOfLoss(t *testing.T) {
	_, rdb := setup(t)
	ctx := t.Context()
	old := newClient(t, rdb, dlock.WithAutoExtend(false))
	a, err := old.Acquire(ctx, "lossy")
	if err != nil {
		t.Fatal(err)
	}
	next := newClient(t, rdb, dlock.LeaseTTL(300*time.Millisecond))
	b, err := next.Acquire(ctx, "lossy", dlock.Resume(a.Token()))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := next.ForceRelease(ctx, "lossy"); err != nil {
		t.Fatal(err)
	}
	if !closedWithin(b.Done(), 2*time.Second) {
		t.Fatal("the resumed Lock was not told that the lock was deleted")
	}
	if !errors.Is(b.Err(), dlock.ErrNotHeld) {
		t.Errorf("Err = %v, want ErrNotHeld", b.Err())
	}
}

// Every kind resumes its own holds: a permit, n permits, a read, a write,
// a leadership (which keeps its term's fence and proclaimed value); a hold
// of one kind cannot be resumed as another.
func TestResumeEveryKind(t *testing.T) {
	_, rdb := setup(t)
	ctx := t.Context()
	old := newClient(t, rdb, dlock.LeaseTTL(5*time.Second), dlock.WithAutoExtend(false))
	next := newClient(t, rdb, dlock.LeaseTTL(5*time.Second))

	s, _ := old.Semaphore("sem", 4)
	s2, _ := next.Semaphore("sem", 4)
	one, err := s.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	three, err := s.AcquireN(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	if l, err := s2.Acquire(ctx, dlock.Resume(one.Token())); err != nil {
		t.Errorf("resume a permit: %v", err)
	} else {
		defer l.Release(ctx)
	}
	l3, err := s2.AcquireN(ctx, 3, dlock.Resume(three.Token()))
	if err != nil {
		t.Fatalf("resume 3 permits: %v", err)
	}
	if _, err := s2.Acquire(ctx, dlock.Resume("AAAAAAAAAAAAAAAAAAAAAA")); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("resume a permit nobody holds = %v, want ErrNotHeld", err)
	}
	if err := l3.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if ps, err := s2.Holders(ctx); err != nil || len(ps) != 1 || ps[0].Count != 1 {
		t.Errorf("after releasing the resumed 3 permits: %+v, %v; want the one permit", ps, err)
	}

	rw, _ := old.RWMutex("rw")
	rw2, _ := next.RWMutex("rw")
	r, err := rw.Reader().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rw2.Writer().Acquire(ctx, dlock.Resume(r.Token())); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("resume a read as a write = %v, want ErrNotHeld", err)
	}
	r2, err := rw2.Reader().Acquire(ctx, dlock.Resume(r.Token()))
	if err != nil {
		t.Fatalf("resume a read: %v", err)
	}
	r2.Release(ctx)
	w, err := rw.Writer().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w2, err := rw2.Writer().Acquire(ctx, dlock.Resume(w.Token()))
	if err != nil {
		t.Fatalf("resume a write: %v", err)
	}
	if _, err := next.TryAcquire(ctx, "rw", dlock.Resume(w.Token())); !errors.Is(err, dlock.ErrNotHeld) && !errors.Is(err, dlock.ErrWrongType) {
		t.Errorf("resume a write as a plain lock = %v, want ErrNotHeld or ErrWrongType", err)
	}
	w2.Release(ctx)

	e, _ := old.Election("elect")
	e2, _ := next.Election("elect")
	ld, err := e.Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if err := ld.Proclaim(ctx, "a2"); err != nil {
		t.Fatal(err)
	}
	if _, err := e2.Campaign(ctx, "b", dlock.Resume(ld.Lock().Token())); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("resume a campaign with another value = %v, want ErrInvalid", err)
	}
	ld2, err := e2.Campaign(ctx, "a", dlock.Resume(ld.Lock().Token()))
	if err != nil {
		t.Fatalf("resume a leadership: %v", err)
	}
	if ld2.Fence() != ld.Fence() || ld2.Value() != "a2" {
		t.Errorf("resumed leadership: fence %d value %q; want the term's %d a2", ld2.Fence(), ld2.Value(), ld.Fence())
	}
	if got, err := e2.Leader(ctx); err != nil || got.Fence != ld.Fence() || got.Value != "a2" {
		t.Errorf("Leader after the resume = %+v, %v", got, err)
	}
	if err := ld2.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := e2.Leader(ctx); err != nil || got.Token != "" {
		t.Errorf("Leader after the resumed leadership resigned = %+v, %v; want nobody", got, err)
	}
}

// Over a quorum and in the script-free mode a lease resumes the same way.
func TestResumeQuorumAndScriptFree(t *testing.T) {
	ctx := t.Context()
	var nodes []redis.UniversalClient
	for range 3 {
		nodes = append(nodes, redistest.Start(t).Client(t))
	}
	old := newRedlock(t, nodes, 100*time.Millisecond, dlock.WithAutoExtend(false))
	a, err := old.Acquire(ctx, "q")
	if err != nil {
		t.Fatal(err)
	}
	next := newRedlock(t, nodes, 100*time.Millisecond)
	b, err := next.Acquire(ctx, "q", dlock.Resume(a.Token()))
	if err != nil {
		t.Fatalf("resume over a quorum: %v", err)
	}
	if err := b.Extend(ctx, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := next.Acquire(ctx, "q", dlock.Resume(a.Token())); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("resume of a released quorum lease = %v, want ErrNotHeld", err)
	}

	rdb := nodes[0]
	plain := newClient(t, rdb, dlock.WithAutoExtend(false))
	l, err := plain.Acquire(ctx, "ns")
	if err != nil {
		t.Fatal(err)
	}
	ns := newClient(t, rdb, dlock.WithoutScripts())
	r, err := ns.Acquire(ctx, "ns", dlock.Resume(l.Token()))
	if err != nil {
		t.Fatalf("resume without scripts: %v", err)
	}
	if err := r.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Extend(ctx, time.Second); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("the old Lock after the script-free resumed one released = %v, want ErrNotHeld", err)
	}
}
