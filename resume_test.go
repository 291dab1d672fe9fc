package dlock_test

import (
	"errors"
	"regexp"
	"strconv"
	"strings"
	"sync"
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
	t.Parallel()
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
	lag := redistest.TimerLag()
	defer lag()
	time.Sleep(1500 * time.Millisecond) // past both TTLs: the resumed Lock's watchdog keeps it
	if err := b.Err(); err != nil {
		if !lostToLag(t, err, lag(), 600*time.Millisecond) {
			t.Fatalf("the resumed lease lapsed under its watchdog: %v", err)
		}
		return
	}
	other := newClient(t, rdb)
	if o, err := other.TryAcquire(ctx, "handoff"); !errors.Is(err, dlock.ErrNotAcquired) {
		if err == nil {
			defer o.Release(ctx)
		}
		// Taken: the lease lapsed after b.Err was read (an extension late),
		// which the Lock then tells at its validity's end.
		if err == nil && closedWithin(b.Done(), 2*time.Second) && lostToLag(t, b.Err(), lag(), 600*time.Millisecond) {
			return
		}
		t.Fatalf("TryAcquire of the resumed lock = %v, want ErrNotAcquired (the resumed Lock's Err: %v)", err, b.Err())
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
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.LeaseTTL(10*time.Second), dlock.WithAutoExtend(false), dlock.HolderMeta("m"))

	released, err := c.Acquire(ctx, "gone")
	if err != nil {
		t.Fatal(err)
	}
	released.Release(ctx)
	expired, err := c.Acquire(ctx, "lapsed", dlock.LeaseTTL(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(400 * time.Millisecond) // past its lease
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
	t.Parallel()
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
	t.Parallel()
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
	t.Parallel()
	_, rdb := setup(t)
	old := newClient(t, rdb, dlock.LeaseTTL(5*time.Second), dlock.WithAutoExtend(false))
	next := newClient(t, rdb, dlock.LeaseTTL(5*time.Second))

	resumeEveryKindPermits(t, old, next)
	resumeEveryKindReadWrite(t, old, next)
	resumeEveryKindLeadership(t, old, next)
}

// resumeEveryKindPermits: next resumes old's permit and old's 3 permits;
// a permit nobody holds is refused.
func resumeEveryKindPermits(t *testing.T, old, next *dlock.Client) {
	t.Helper()
	ctx := t.Context()
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
}

// resumeEveryKindReadWrite: next resumes old's read and old's write; a read
// is not resumed as a write, nor a write as a plain lock.
func resumeEveryKindReadWrite(t *testing.T, old, next *dlock.Client) {
	t.Helper()
	ctx := t.Context()
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
}

// resumeEveryKindLeadership: next resumes old's leadership, which keeps its
// term's fence and proclaimed value; a resume with another value is refused.
func resumeEveryKindLeadership(t *testing.T, old, next *dlock.Client) {
	t.Helper()
	ctx := t.Context()
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
	if ld2.Fence() <= ld.Fence() || ld2.Value() != "a2" {
		t.Errorf("resumed leadership: fence %d value %q; want one above the term's %d, and a2", ld2.Fence(), ld2.Value(), ld.Fence())
	}
	if got, err := e2.Leader(ctx); err != nil || got.Fence != ld2.Fence() || got.Value != "a2" {
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
	t.Parallel()
	ctx := t.Context()
	var nodes []redis.UniversalClient
	for range 3 {
		nodes = append(nodes, redistest.Start(t).Client(t))
	}
	// A node timeout well above a round trip: a resume is one attempt, and
	// a loaded machine's round trips can outlast 100ms on two nodes.
	old := newRedlock(t, nodes, time.Second, dlock.WithAutoExtend(false))
	a, err := old.Acquire(ctx, "q")
	if err != nil {
		t.Fatal(err)
	}
	next := newRedlock(t, nodes, time.Second)
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

// Was a defect, fixed: a leadership's token resumed through Client.TryAcquire (a plain
// lock's call) is taken over as a plain Lock, although docs/resume.md says
// "A token of another kind's hold is refused with ErrNotHeld". The plain
// Lock's extensions then no longer keep the term's fence counter and value
// key alive (a plain Lock extends with extend.lua, not campaign_extend.lua), so the
// election's term is silently broken.
func TestResumeLeadershipAsPlainLockRefused(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	old := newClient(t, rdb, dlock.LeaseTTL(5*time.Second), dlock.WithAutoExtend(false))
	next := newClient(t, rdb, dlock.LeaseTTL(5*time.Second), dlock.WithAutoExtend(false))
	e, _ := old.Election("resume-elect")
	ld, err := e.Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	defer ld.Resign(ctx)
	l, err := next.TryAcquire(ctx, "resume-elect", dlock.Resume(ld.Lock().Token()))
	if err == nil {
		defer l.Release(ctx)
		t.Fatalf("a leadership's token resumed as a plain lock was taken over (Lock %q); want ErrNotHeld", l.Token())
	}
	if !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("resume of a leadership's token as a plain lock = %v, want ErrNotHeld", err)
	}
}

// Was a defect, fixed: the converse: a plain lock's token resumed through
// Election.Campaign becomes a Leadership, a term that no campaign won.
func TestResumePlainLockAsLeadershipRefused(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	old := newClient(t, rdb, dlock.LeaseTTL(5*time.Second), dlock.WithAutoExtend(false), dlock.HolderMeta("a"))
	next := newClient(t, rdb, dlock.LeaseTTL(5*time.Second), dlock.WithAutoExtend(false))
	l, err := old.TryAcquire(ctx, "resume-plain")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	e, _ := next.Election("resume-plain")
	ld, err := e.Campaign(ctx, "a", dlock.Resume(l.Token()))
	if err == nil {
		defer ld.Resign(ctx)
		t.Fatalf("a plain lock's token resumed as a campaign became a leadership (fence %d); want ErrNotHeld", ld.Fence())
	}
	if !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("resume of a plain lock's token as a campaign = %v, want ErrNotHeld", err)
	}
}

// Was a defect, fixed: a hold of 3 permits (AcquireN(3)) resumed through Acquire (one
// permit) is taken over as a one-permit Lock; docs/resume.md says a hold of
// k permits is resumed by AcquireN with the same k. The resumed Lock
// extends and releases only the first of the three members, so the other
// two stay held by nobody until the old deadline: after the resumed Lock's
// Release, the semaphore still has 2 permits taken.
func TestResumeNPermitsAsOnePermitRefused(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	old := newClient(t, rdb, dlock.LeaseTTL(5*time.Second), dlock.WithAutoExtend(false))
	next := newClient(t, rdb, dlock.LeaseTTL(5*time.Second), dlock.WithAutoExtend(false))
	s, _ := old.Semaphore("resume-sem", 3)
	s2, _ := next.Semaphore("resume-sem", 3)
	three, err := s.AcquireN(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	one, err := s2.Acquire(ctx, dlock.Resume(three.Token()))
	if err == nil {
		if err := one.Release(ctx); err != nil {
			t.Fatal(err)
		}
		avail, _ := s2.Available(ctx)
		t.Fatalf("a 3-permit hold resumed as one permit was taken over; after its Release %d of 3 permits are available (the rest held by nobody until the old deadline); want ErrNotHeld", avail)
	}
	if !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("resume of a 3-permit hold as one permit = %v, want ErrNotHeld", err)
	}
	three.Release(ctx)
}

// A semaphore permit's token resumed as a plain lock of the same name
// is refused (ErrWrongType: the name is held as a semaphore), and a plain
// lock's token resumed as a permit or a read is refused too.
func TestResumeAcrossKindsRefused(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.LeaseTTL(5*time.Second), dlock.WithAutoExtend(false))
	s, _ := c.Semaphore("resume-k", 2)
	p, err := s.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Release(ctx)
	if _, err := c.TryAcquire(ctx, "resume-k", dlock.Resume(p.Token())); !errors.Is(err, dlock.ErrWrongType) && !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("resume a permit as a plain lock = %v, want ErrWrongType or ErrNotHeld", err)
	}
	rw, _ := c.RWMutex("resume-k")
	if _, err := rw.Reader().TryAcquire(ctx, dlock.Resume(p.Token())); !errors.Is(err, dlock.ErrWrongType) && !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("resume a permit as a read = %v, want ErrWrongType or ErrNotHeld", err)
	}
	l, err := c.TryAcquire(ctx, "resume-k2")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	s2, _ := c.Semaphore("resume-k2", 2)
	if _, err := s2.TryAcquire(ctx, dlock.Resume(l.Token())); !errors.Is(err, dlock.ErrWrongType) && !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("resume a plain lock as a permit = %v, want ErrWrongType or ErrNotHeld", err)
	}
	// A token of another name.
	if _, err := c.TryAcquire(ctx, "resume-k3", dlock.Resume(l.Token())); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("resume a token on another name = %v, want ErrNotHeld", err)
	}
	// Malformed tokens: ErrInvalid, nothing sent.
	for _, tok := range []string{"", "short", "AAAAAAAAAAAAAAAAAAAAA!", "AAAAAAAAAAAAAAAAAAAAAA.a b", "AAAAAAAAAAAAAAAAAAAAAA.{x}", "AAAAAAAAAAAAAAAAAAAAAAA"} {
		if _, err := c.TryAcquire(ctx, "resume-k2", dlock.Resume(tok)); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("Resume(%q) = %v, want ErrInvalid", tok, err)
		}
	}
}

// Was a defect, fixed (with the old holder still running, which docs/resume.md says
// both may then extend): after a resume, an Extend of the old Lock whose
// extensions were ordered is "superseded" in Redis (its number is below the
// resumed Lock's), does nothing, and yet returns nil and moves the old
// Lock's ValidUntil to its own new TTL. The old Lock then believes it holds
// the lock for 5s while Redis expires it after 300ms: a third client takes
// the lock while the old Lock says held, no loss told.
func TestOldHolderExtendAfterResumeClaimsNoValidity(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	old := newClient(t, rdb, dlock.LeaseTTL(3*time.Second), dlock.WithAutoExtend(false))
	a, err := old.TryAcquire(ctx, "resume-old")
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Extend(ctx, 2*time.Second); err != nil { // shortens: a's extensions are ordered from now on
		t.Fatal(err)
	}
	next := newClient(t, rdb, dlock.LeaseTTL(300*time.Millisecond), dlock.WithAutoExtend(false))
	if _, err := next.TryAcquire(ctx, "resume-old", dlock.Resume(a.Token())); err != nil {
		t.Fatal(err)
	}
	// The resumed process stops (crashes) without releasing; the old one,
	// still running, extends.
	extErr := a.Extend(ctx, 5*time.Second)
	pttl := rdb.PTTL(ctx, "dlock:{resume-old}").Val()
	time.Sleep(400 * time.Millisecond)
	third := newClient(t, rdb, dlock.WithAutoExtend(false))
	l, err := third.TryAcquire(ctx, "resume-old")
	if err != nil {
		t.Fatalf("the third client could not take the lock: %v", err)
	}
	defer l.Release(ctx)
	if extErr == nil && a.Err() == nil && time.Now().Before(a.ValidUntil()) {
		t.Fatalf("two holders: the old Lock's Extend(5s) returned nil (Redis left the key at %v), its Err is nil and ValidUntil %v ahead, while another client holds the lock",
			pttl, time.Until(a.ValidUntil()).Round(time.Millisecond))
	}
}

// Four resumes of one token at once: one drives the lease, each other is
// refused with ErrNotHeld (two Locks driving one lease was a defect: see
// TestConcurrentResumesReadingOneMarkerOneWins); a TryAcquire by someone else is
// refused while the winner holds, and after it releases the lock is free.
func TestConcurrentResumesOfOneTokenOneWins(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	old := newClient(t, rdb, dlock.LeaseTTL(2*time.Second), dlock.WithAutoExtend(false))
	a, err := old.TryAcquire(ctx, "resume-twice")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	locks := make([]*dlock.Lock, 4)
	errs := make([]error, 4)
	for i := range locks {
		c := newClient(t, rdb, dlock.LeaseTTL(time.Second))
		wg.Go(func() { locks[i], errs[i] = c.TryAcquire(ctx, "resume-twice", dlock.Resume(a.Token())) })
	}
	wg.Wait()
	won := 0
	for i, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, dlock.ErrNotHeld):
			t.Fatalf("resume %d: %v, want the lease or ErrNotHeld", i, err)
		}
	}
	if won == 0 {
		t.Fatal("no resume got the lease")
	}
	other := newClient(t, rdb)
	if _, err := other.TryAcquire(ctx, "resume-twice"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire while resumed = %v", err)
	}
	for _, l := range locks {
		if l != nil {
			l.Release(ctx)
		}
	}
	l, err := other.TryAcquire(ctx, "resume-twice")
	if err != nil {
		t.Fatalf("after the resumed Locks released: %v", err)
	}
	l.Release(ctx)
}

// A resumed Lock's fence is above the old holder's, and a resumed
// lease under MaxHold ends at the cap counted from the resume, with its
// key gone soon after.
func TestResumeRaisesFenceAndCountsMaxHoldFromResume(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	old := newClient(t, rdb, dlock.LeaseTTL(5*time.Second), dlock.WithAutoExtend(false))
	a, err := old.TryAcquire(ctx, "resume-mh")
	if err != nil {
		t.Fatal(err)
	}
	f0 := fenceOf(t, a)
	next := newClient(t, rdb, dlock.LeaseTTL(time.Second))
	b, err := next.TryAcquire(ctx, "resume-mh", dlock.Resume(a.Token()), dlock.MaxHold(400*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if f := fenceOf(t, b); f <= f0 {
		t.Errorf("resumed fence %d not above %d", f, f0)
	}
	if !closedWithin(b.Done(), 2*time.Second) || !errors.Is(b.Err(), dlock.ErrMaxHold) {
		t.Fatalf("the resumed lease under MaxHold(400ms): Err %v", b.Err())
	}
	if !waitFor(time.Second, func() bool { return rdb.Exists(ctx, "dlock:{resume-mh}").Val() == 0 }) {
		t.Errorf("the lock key is still there after the max hold of the resumed lease")
	}
	if err := a.Extend(ctx, time.Second); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("the old Lock after the resumed one ended = %v, want ErrNotHeld", err)
	}
}

// Was a defect, fixed: two Resumes of the same token whose Seq reads both land before
// either's extension: both read the same marker, both number their
// extension marker+resumeGap, and the second one's extension, which finds
// an equal number, is taken for "its own re-sent copy" (reply 1). Both
// resumes succeed, two Locks drive one lease, and the second claims the
// validity of its own lease time (10s) while Redis keeps the one the first
// set (2s): a Lock claiming a validity Redis does not give it. docs/resume.md
// says a token "resumed again since" is refused.
func TestConcurrentResumesReadingOneMarkerOneWins(t *testing.T) {
	t.Parallel()
	for _, mode := range []struct {
		name string
		opts []dlock.Option
	}{{"scripts", nil}, {"noscripts", []dlock.Option{dlock.WithoutScripts()}}} {
		t.Run(mode.name, func(t *testing.T) {
			s, rdb := setup(t)
			ctx := t.Context()
			name := "resume-rr-" + mode.name
			opts := append([]dlock.Option{dlock.WithAutoExtend(false)}, mode.opts...)
			l0, err := newClient(t, rdb, opts...).TryAcquire(ctx, name, dlock.LeaseTTL(10*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			tok := l0.Token()

			// A: its process pauses between reading the marker and
			// extending, until B, which reads the marker after it, is done.
			hook := &pauseAfter{match: isMarkerGet, pause: 10 * time.Second, reached: make(chan struct{}), until: make(chan struct{})}
			rdbA := s.Client(t)
			rdbA.AddHook(hook)
			cA := newClient(t, rdbA, opts...)
			cB := newClient(t, rdb, opts...)

			var (
				lA   *dlock.Lock
				errA error
				wg   sync.WaitGroup
			)
			wg.Go(func() {
				lA, errA = cA.TryAcquire(ctx, name, dlock.Resume(tok), dlock.LeaseTTL(10*time.Second))
			})
			if !closedWithin(hook.reached, 10*time.Second) {
				t.Error("A's resume never read the marker")
			}
			lB, errB := cB.TryAcquire(ctx, name, dlock.Resume(tok), dlock.LeaseTTL(2*time.Second))
			close(hook.until)
			wg.Wait()
			if errA == nil {
				defer lA.Release(ctx)
			}
			if errB == nil {
				defer lB.Release(ctx)
			}
			if errA == nil && errB == nil {
				t.Errorf("two Resumes of one token both succeeded: two Locks drive one lease")
				claimWithinRedis(t, rdb, lA, "the resume whose extension came second")
			}
			if errA != nil && errB != nil {
				t.Fatalf("both resumes refused: A %v, B %v", errA, errB)
			}
		})
	}
}

// Was a defect, fixed: a Lock that was told it lost because another Lock resumed its
// lease (its extension got reply 2: "superseded") still ends the lease on
// Release, which every caller runs on its way out (defer l.Release). The
// resumed Lock keeps claiming its validity, a third client takes the lock,
// and two Locks hold it at once. (docs/resume.md says the first process's
// Release "still ends the lease, for both"; but once the first Lock knows
// it was superseded, its release script deletes a lease that is no longer
// its to end, and the resumed Lock is not told: exclusion is broken.)
func TestSupersededLockReleaseSparesResumedLease(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	const name = "resume-sup-rel"
	old := newClient(t, rdb, dlock.LeaseTTL(5*time.Second), dlock.WithAutoExtend(false))
	next := newClient(t, rdb, dlock.LeaseTTL(5*time.Second), dlock.WithAutoExtend(false))
	third := newClient(t, rdb, dlock.LeaseTTL(5*time.Second), dlock.WithAutoExtend(false))
	l0, err := old.TryAcquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	r, err := next.TryAcquire(ctx, name, dlock.Resume(l0.Token()))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release(ctx)
	if err := l0.Extend(ctx, 5*time.Second); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("the superseded Lock's Extend = %v, want ErrNotHeld", err)
	}
	l0.Release(ctx) // its deferred Release, on its way out
	l3, err := third.TryAcquire(ctx, name)
	if err == nil {
		defer l3.Release(ctx)
		if r.Err() == nil && time.Now().Before(r.ValidUntil()) {
			t.Errorf("two holders: the resumed Lock claims validity for %v more, and another client took the lock after the superseded Lock's Release",
				time.Until(r.ValidUntil()).Round(time.Millisecond))
		}
	}
}

// A Resume while the first Lock's watchdog runs: the first Lock ends
// with ErrNotHeld at its next tick and never claims a validity beyond what
// Redis holds for the token; the resumed Lock's watchdog keeps the lease.
func TestResumeUnderTheOldLocksRunningWatchdog(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	const name = "resume-dog"
	old := newClient(t, rdb, dlock.LeaseTTL(600*time.Millisecond))
	next := newClient(t, rdb, dlock.LeaseTTL(600*time.Millisecond))
	l0, err := old.TryAcquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if err := l0.Extend(ctx, 500*time.Millisecond); err != nil { // numbered from now on
		t.Fatal(err)
	}
	r, err := next.TryAcquire(ctx, name, dlock.Resume(l0.Token()))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release(ctx)
	select {
	case <-l0.Done():
	case <-time.After(2 * time.Second):
		t.Fatal("the first Lock was not told of the resume within 2s")
	}
	if !errors.Is(l0.Err(), dlock.ErrNotHeld) {
		t.Errorf("the first Lock ended with %v, want ErrNotHeld", l0.Err())
	}
	lag := redistest.TimerLag()
	defer lag()
	time.Sleep(time.Second) // several TTLs
	if err := r.Err(); err != nil {
		if !lostToLag(t, err, lag(), 600*time.Millisecond) {
			t.Fatalf("the resumed Lock lost its lease: %v", err)
		}
		return
	}
	if v, _ := rdb.Get(ctx, r.Key()).Result(); v != r.Token() {
		t.Errorf("the lock key holds %q, want the resumed token", v)
	}
	claimWithinRedis(t, rdb, r, "the resumed Lock")
}

// A semaphore waiter granted from the queue (its marker "q" stays)
// extends unnumbered and numbered, and is then resumed by another Lock:
// the resume is granted, the waiter's own Lock is told of it (ErrNotHeld)
// at its next extension, and the resumed Lock's Release frees the permit
// and leaves no marker "q" or queue entry that keeps the permit taken.
func TestGrantedSemaphoreWaiterExtendedThenResumed(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	const name = "resume-semq"
	c := newClient(t, rdb, dlock.LeaseTTL(3*time.Second), dlock.WithAutoExtend(false))
	sem, _ := c.Semaphore(name, 1)
	first, err := sem.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var (
		w    *dlock.Lock
		werr error
		wg   sync.WaitGroup
	)
	wg.Go(func() { w, werr = sem.Acquire(ctx, dlock.MaxWait(2*time.Second)) })
	if !waitFor(5*time.Second, queuedAndListening(t, rdb, name, 1)) {
		t.Fatal("the waiter never queued")
	}
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if werr != nil {
		t.Fatal(werr)
	}
	if err := w.Extend(ctx, 5*time.Second); err != nil { // unnumbered, marker "q"
		t.Fatalf("the granted waiter's unnumbered Extend: %v", err)
	}
	if err := w.Extend(ctx, 2*time.Second); err != nil { // numbered
		t.Fatalf("the granted waiter's numbered Extend: %v", err)
	}
	sem2, _ := newClient(t, rdb, dlock.WithAutoExtend(false)).Semaphore(name, 1)
	r, err := sem2.TryAcquire(ctx, dlock.Resume(w.Token()), dlock.LeaseTTL(3*time.Second))
	if err != nil {
		t.Fatalf("resume of the granted waiter's permit: %v", err)
	}
	if err := w.Extend(ctx, 3*time.Second); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("the waiter's Extend after the resume = %v, want ErrNotHeld", err)
	}
	if err := r.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if avail, err := sem2.Available(ctx); err != nil || avail != 1 {
		t.Errorf("after the resumed permit's Release: %d available (err %v), want 1", avail, err)
	}
	p, err := sem2.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("a new permit after the release: %v", err)
	}
	p.Release(ctx)
}

// A token with a mark no kind declares ("x:"), and a leader's token
// (marked "e:") given to a plain lock, a permit or a read, are refused
// before anything is sent: nothing is taken or written under the name.
func TestResumeOfForeignMarksRefusedBeforeSending(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.WithAutoExtend(false))
	l, err := c.TryAcquire(ctx, "resume-tag")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	tok := l.Token()
	sem, _ := c.Semaphore("resume-tag-sem", 2)
	rw, _ := c.RWMutex("resume-tag-rw")
	scripts := func() (n int) { // the scripts the server ran
		for _, m := range regexp.MustCompile(`cmdstat_eval(?:sha)?:calls=(\d+)`).FindAllStringSubmatch(rdb.Info(ctx, "commandstats").Val(), -1) {
			calls, _ := strconv.Atoi(m[1])
			n += calls
		}
		return n
	}
	before := scripts()
	for mark, want := range map[string]error{"x:": dlock.ErrInvalid, "e:": dlock.ErrNotHeld} { // (no token; a leader's)
		other := mark + tok
		if _, err := c.TryAcquire(ctx, "resume-tag", dlock.Resume(other)); !errors.Is(err, want) {
			t.Errorf("mark %q: resume as a lock = %v, want %v", mark, err, want)
		}
		if _, err := sem.TryAcquire(ctx, dlock.Resume(other)); err == nil {
			t.Errorf("mark %q: resume as a permit succeeded", mark)
		}
		if _, err := rw.Reader().TryAcquire(ctx, dlock.Resume(other)); err == nil {
			t.Errorf("mark %q: resume as a read succeeded", mark)
		}
	}
	if ran := scripts() - before; ran != 0 {
		t.Errorf("the refused resumes ran %d scripts", ran)
	}
	prefix := strings.TrimSuffix(l.Key(), "{resume-tag}")
	if n, _ := rdb.Exists(ctx, prefix+"{resume-tag-sem}", prefix+"{resume-tag-rw}").Result(); n != 0 {
		t.Errorf("%d keys written by refused resumes", n)
	}
	if v, _ := rdb.Get(ctx, l.Key()).Result(); v != tok {
		t.Errorf("the lock holds %q after the refused resumes, want its token", v)
	}
}

// Over a quorum too: of two Resumes of one token that read the same
// numbers on every node, one gets the lease and the other ErrNotHeld.
func TestResumeConcurrentOverAQuorum(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	var (
		plain, paused []redis.UniversalClient
		reached       []chan struct{}
		resumeA       = make(chan struct{})
	)
	for range 3 {
		s := redistest.Start(t)
		plain = append(plain, s.Client(t))
		rdbA := s.Client(t)
		h := &pauseAfter{match: isMarkerGet, pause: 10 * time.Second, reached: make(chan struct{}), until: resumeA}
		rdbA.AddHook(h)
		paused = append(paused, rdbA)
		reached = append(reached, h.reached)
	}
	opts := []dlock.Option{dlock.WithAutoExtend(false)}
	l0, err := newRedlock(t, plain, 200*time.Millisecond, opts...).TryAcquire(ctx, "quorum-rr", dlock.LeaseTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	cA := newRedlock(t, paused, 5*time.Second, opts...) // (its node timeout outlasts B's resume)
	cB := newRedlock(t, plain, 200*time.Millisecond, opts...)
	var (
		lA   *dlock.Lock
		errA error
		wg   sync.WaitGroup
	)
	wg.Go(func() {
		lA, errA = cA.TryAcquire(ctx, "quorum-rr", dlock.Resume(l0.Token()), dlock.LeaseTTL(10*time.Second))
	})
	for _, r := range reached { // A read every node's marker, and waits
		<-r
	}
	lB, errB := cB.TryAcquire(ctx, "quorum-rr", dlock.Resume(l0.Token()), dlock.LeaseTTL(2*time.Second))
	close(resumeA)
	wg.Wait()
	for _, l := range []*dlock.Lock{lA, lB} {
		if l != nil {
			defer l.Release(ctx)
		}
	}
	switch {
	case errA == nil && errB == nil:
		t.Errorf("two Resumes of one token both succeeded over a quorum")
	case errA != nil && errB != nil:
		t.Fatalf("both resumes refused: A %v, B %v", errA, errB)
	case errA != nil && !errors.Is(errA, dlock.ErrNotHeld):
		t.Errorf("the later resume = %v, want ErrNotHeld", errA)
	}
}
