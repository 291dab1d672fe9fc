package dlock_test

// Adversarial tests (adv7) of Resume, the semaphore size kept in Redis,
// Leadership.Proclaim, RWMutex.Downgrade, Lock.Extend's retries and
// Client.Close. Each test says whether it shows a DEFECT (it fails on the
// code it was written against) or probes an attack that HELD.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/redistest"
)

// DEFECT: a leadership's token resumed through Client.TryAcquire (a plain
// lock's call) is taken over as a plain Lock, although docs/resume.md says
// "A token of another kind's hold is refused with ErrNotHeld". The plain
// Lock's extensions then no longer keep the term's fence counter and value
// key alive (extend.lua gets no KEYS[3]/KEYS[4] for a plain lock), so the
// election's term is silently broken.
func TestAdv7ResumeLeadershipAsPlainLockRefused(t *testing.T) {
	_, rdb := setup(t)
	ctx := t.Context()
	old := newClient(t, rdb, dlock.LeaseTTL(5*time.Second), dlock.WithAutoExtend(false))
	next := newClient(t, rdb, dlock.LeaseTTL(5*time.Second), dlock.WithAutoExtend(false))
	e, _ := old.Election("adv7-elect")
	ld, err := e.Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	defer ld.Resign(ctx)
	l, err := next.TryAcquire(ctx, "adv7-elect", dlock.Resume(ld.Lock().Token()))
	if err == nil {
		defer l.Release(ctx)
		t.Fatalf("a leadership's token resumed as a plain lock was taken over (Lock %q); want ErrNotHeld", l.Token())
	}
	if !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("resume of a leadership's token as a plain lock = %v, want ErrNotHeld", err)
	}
}

// DEFECT: the converse: a plain lock's token resumed through
// Election.Campaign becomes a Leadership, a term that no campaign won.
func TestAdv7ResumePlainLockAsLeadershipRefused(t *testing.T) {
	_, rdb := setup(t)
	ctx := t.Context()
	old := newClient(t, rdb, dlock.LeaseTTL(5*time.Second), dlock.WithAutoExtend(false), dlock.HolderMeta("a"))
	next := newClient(t, rdb, dlock.LeaseTTL(5*time.Second), dlock.WithAutoExtend(false))
	l, err := old.TryAcquire(ctx, "adv7-plain")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	e, _ := next.Election("adv7-plain")
	ld, err := e.Campaign(ctx, "a", dlock.Resume(l.Token()))
	if err == nil {
		defer ld.Resign(ctx)
		t.Fatalf("a plain lock's token resumed as a campaign became a leadership (fence %d); want ErrNotHeld", ld.Fence())
	}
	if !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("resume of a plain lock's token as a campaign = %v, want ErrNotHeld", err)
	}
}

// DEFECT: a hold of 3 permits (AcquireN(3)) resumed through Acquire (one
// permit) is taken over as a one-permit Lock; docs/resume.md says a hold of
// k permits is resumed by AcquireN with the same k. The resumed Lock
// extends and releases only the first of the three members, so the other
// two stay held by nobody until the old deadline: after the resumed Lock's
// Release, the semaphore still has 2 permits taken.
func TestAdv7ResumeNPermitsAsOneRefused(t *testing.T) {
	_, rdb := setup(t)
	ctx := t.Context()
	old := newClient(t, rdb, dlock.LeaseTTL(5*time.Second), dlock.WithAutoExtend(false))
	next := newClient(t, rdb, dlock.LeaseTTL(5*time.Second), dlock.WithAutoExtend(false))
	s, _ := old.Semaphore("adv7-sem", 3)
	s2, _ := next.Semaphore("adv7-sem", 3)
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

// HELD: a semaphore permit's token resumed as a plain lock of the same name
// is refused (ErrWrongType: the name is held as a semaphore), and a plain
// lock's token resumed as a permit or a read is refused too.
func TestAdv7ResumeAcrossKindsRefused(t *testing.T) {
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.LeaseTTL(5*time.Second), dlock.WithAutoExtend(false))
	s, _ := c.Semaphore("adv7-k", 2)
	p, err := s.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Release(ctx)
	if _, err := c.TryAcquire(ctx, "adv7-k", dlock.Resume(p.Token())); !errors.Is(err, dlock.ErrWrongType) && !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("resume a permit as a plain lock = %v, want ErrWrongType or ErrNotHeld", err)
	}
	rw, _ := c.RWMutex("adv7-k")
	if _, err := rw.Reader().TryAcquire(ctx, dlock.Resume(p.Token())); !errors.Is(err, dlock.ErrWrongType) && !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("resume a permit as a read = %v, want ErrWrongType or ErrNotHeld", err)
	}
	l, err := c.TryAcquire(ctx, "adv7-k2")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	s2, _ := c.Semaphore("adv7-k2", 2)
	if _, err := s2.TryAcquire(ctx, dlock.Resume(l.Token())); !errors.Is(err, dlock.ErrWrongType) && !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("resume a plain lock as a permit = %v, want ErrWrongType or ErrNotHeld", err)
	}
	// A token of another name.
	if _, err := c.TryAcquire(ctx, "adv7-k3", dlock.Resume(l.Token())); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("resume a token on another name = %v, want ErrNotHeld", err)
	}
	// Malformed tokens: ErrInvalid, nothing sent.
	for _, tok := range []string{"", "short", "AAAAAAAAAAAAAAAAAAAAA!", "AAAAAAAAAAAAAAAAAAAAAA.a b", "AAAAAAAAAAAAAAAAAAAAAA.{x}", "AAAAAAAAAAAAAAAAAAAAAAA"} {
		if _, err := c.TryAcquire(ctx, "adv7-k2", dlock.Resume(tok)); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("Resume(%q) = %v, want ErrInvalid", tok, err)
		}
	}
}

// DEFECT (with the old holder still running, which docs/resume.md says
// both may then extend): after a resume, an Extend of the old Lock whose
// extensions were ordered is "superseded" in Redis (its number is below the
// resumed Lock's), does nothing, and yet returns nil and moves the old
// Lock's ValidUntil to its own new TTL. The old Lock then believes it holds
// the lock for 5s while Redis expires it after 300ms: a third client takes
// the lock while the old Lock says held, no loss told.
func TestAdv7OldHolderExtendAfterResumeClaimsValidity(t *testing.T) {
	_, rdb := setup(t)
	ctx := t.Context()
	old := newClient(t, rdb, dlock.LeaseTTL(3*time.Second), dlock.WithAutoExtend(false))
	a, err := old.TryAcquire(ctx, "adv7-old")
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Extend(ctx, 2*time.Second); err != nil { // shortens: a's extensions are ordered from now on
		t.Fatal(err)
	}
	next := newClient(t, rdb, dlock.LeaseTTL(300*time.Millisecond), dlock.WithAutoExtend(false))
	if _, err := next.TryAcquire(ctx, "adv7-old", dlock.Resume(a.Token())); err != nil {
		t.Fatal(err)
	}
	// The resumed process stops (crashes) without releasing; the old one,
	// still running, extends.
	extErr := a.Extend(ctx, 5*time.Second)
	pttl := rdb.PTTL(ctx, "dlock:{adv7-old}").Val()
	time.Sleep(400 * time.Millisecond)
	third := newClient(t, rdb, dlock.WithAutoExtend(false))
	l, err := third.TryAcquire(ctx, "adv7-old")
	if err != nil {
		t.Fatalf("the third client could not take the lock: %v", err)
	}
	defer l.Release(ctx)
	if extErr == nil && a.Err() == nil && time.Now().Before(a.ValidUntil()) {
		t.Fatalf("two holders: the old Lock's Extend(5s) returned nil (Redis left the key at %v), its Err is nil and ValidUntil %v ahead, while another client holds the lock",
			pttl, time.Until(a.ValidUntil()).Round(time.Millisecond))
	}
}

// HELD: two resumes of one token at once each extend the same lease; a
// later TryAcquire by someone else is refused while either says held, and
// after both release the lock is free.
func TestAdv7ConcurrentResumes(t *testing.T) {
	_, rdb := setup(t)
	ctx := t.Context()
	old := newClient(t, rdb, dlock.LeaseTTL(2*time.Second), dlock.WithAutoExtend(false))
	a, err := old.TryAcquire(ctx, "adv7-twice")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	locks := make([]*dlock.Lock, 4)
	errs := make([]error, 4)
	for i := range locks {
		c := newClient(t, rdb, dlock.LeaseTTL(time.Second))
		wg.Go(func() { locks[i], errs[i] = c.TryAcquire(ctx, "adv7-twice", dlock.Resume(a.Token())) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("resume %d: %v", i, err)
		}
	}
	other := newClient(t, rdb)
	if _, err := other.TryAcquire(ctx, "adv7-twice"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire while resumed = %v", err)
	}
	for _, l := range locks {
		l.Release(ctx)
	}
	l, err := other.TryAcquire(ctx, "adv7-twice")
	if err != nil {
		t.Fatalf("after the resumed Locks released: %v", err)
	}
	l.Release(ctx)
}

// HELD: a resumed Lock's fence is above the old holder's, and a resumed
// lease under MaxHold ends at the cap counted from the resume, with its
// key gone soon after.
func TestAdv7ResumeFenceAndMaxHold(t *testing.T) {
	_, rdb := setup(t)
	ctx := t.Context()
	old := newClient(t, rdb, dlock.LeaseTTL(5*time.Second), dlock.WithAutoExtend(false))
	a, err := old.TryAcquire(ctx, "adv7-mh")
	if err != nil {
		t.Fatal(err)
	}
	f0 := fenceOf(t, a)
	next := newClient(t, rdb, dlock.LeaseTTL(time.Second))
	b, err := next.TryAcquire(ctx, "adv7-mh", dlock.Resume(a.Token()), dlock.MaxHold(400*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if f := fenceOf(t, b); f <= f0 {
		t.Errorf("resumed fence %d not above %d", f, f0)
	}
	if !closedWithin(b.Done(), 2*time.Second) || !errors.Is(b.Err(), dlock.ErrMaxHold) {
		t.Fatalf("the resumed lease under MaxHold(400ms): Err %v", b.Err())
	}
	if !waitFor(time.Second, func() bool { return rdb.Exists(ctx, "dlock:{adv7-mh}").Val() == 0 }) {
		t.Errorf("the lock key is still there after the max hold of the resumed lease")
	}
	if err := a.Extend(ctx, time.Second); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("the old Lock after the resumed one ended = %v, want ErrNotHeld", err)
	}
}

// DEFECT: docs/election.md says the value key "lasts as long as the lease
// (each extension lengthens both)". A leader whose lease is extended
// shorter (Lock.Extend, an ordered extension) leaves the value key at its
// old, longer expiry: extend.lua sets it with PEXPIRE GT. The lease ends
// after 300ms; the value key "<token> <value>" stays for ~5s more.
func TestAdv7ProclaimValueKeyOutlivesShortenedLease(t *testing.T) {
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.LeaseTTL(5*time.Second), dlock.WithAutoExtend(false))
	e, _ := c.Election("adv7-pv")
	ld, err := e.Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if err := ld.Proclaim(ctx, "a2"); err != nil {
		t.Fatal(err)
	}
	if err := ld.Lock().Extend(ctx, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if !waitFor(2*time.Second, func() bool { return rdb.Exists(ctx, "dlock:{adv7-pv}").Val() == 0 }) {
		t.Fatal("the shortened lease did not end")
	}
	time.Sleep(50 * time.Millisecond)
	if pttl := rdb.PTTL(ctx, "dlock:{adv7-pv}:v").Val(); pttl > 0 {
		t.Errorf("the lease ended, but its value key %q lives on for %v (the old lease time)", rdb.Get(ctx, "dlock:{adv7-pv}:v").Val(), pttl)
	}
	// What Leader shows is right nonetheless (the token does not match).
	if got, err := e.Leader(ctx); err != nil || got.Token != "" {
		t.Errorf("Leader after the lease ended = %+v, %v", got, err)
	}
}

// DEFECT (a leftover): Resign ends the term, but the value key a Proclaim
// made stays until the lease time it was given (release_fair.lua does not
// get the value key), well past the lease it belongs to.
func TestAdv7ProclaimValueKeyLeftAfterResign(t *testing.T) {
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.LeaseTTL(5*time.Second))
	e, _ := c.Election("adv7-pr")
	ld, err := e.Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if err := ld.Proclaim(ctx, "a2"); err != nil {
		t.Fatal(err)
	}
	if err := ld.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if pttl := rdb.PTTL(ctx, "dlock:{adv7-pr}:v").Val(); pttl > 0 {
		t.Errorf("after Resign the value key %q lives on for %v", rdb.Get(ctx, "dlock:{adv7-pr}:v").Val(), pttl)
	}
}

// HELD: a leader that lost its lease cannot proclaim (ErrNotHeld), and the
// next leader shows its own campaign value, not the old proclaimed one.
func TestAdv7StaleLeaderProclaim(t *testing.T) {
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.LeaseTTL(200*time.Millisecond), dlock.WithAutoExtend(false))
	e, _ := c.Election("adv7-sp")
	ld, err := e.Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if err := ld.Proclaim(ctx, "a2"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	c2 := newClient(t, rdb, dlock.LeaseTTL(5*time.Second))
	e2, _ := c2.Election("adv7-sp")
	ld2, err := e2.Campaign(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	defer ld2.Resign(ctx)
	if err := ld.Proclaim(ctx, "stale"); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("a stale leader's Proclaim = %v, want ErrNotHeld", err)
	}
	if got, err := e2.Leader(ctx); err != nil || got.Value != "b" || got.Fence != ld2.Fence() {
		t.Errorf("Leader = %+v, %v; want b with fence %d", got, err, ld2.Fence())
	}
	if ld2.Fence() <= ld.Fence() {
		t.Errorf("the next term's fence %d is not above %d", ld2.Fence(), ld.Fence())
	}
}

// HELD: Close wakes every kind of waiting acquisition with ErrClosed and
// takes its queue entry out: when the holder then releases, the lock (or
// permit, or write, or leadership) is free at once, not handed to the
// closed waiter.
func TestAdv7CloseLeavesNothingQueued(t *testing.T) {
	_, rdb := setup(t)
	ctx := t.Context()
	type holdFn func(c *dlock.Client, name string) (*dlock.Lock, error)
	kinds := map[string]holdFn{
		"fair": func(c *dlock.Client, name string) (*dlock.Lock, error) { return c.Acquire(ctx, name) },
		"sem": func(c *dlock.Client, name string) (*dlock.Lock, error) {
			s, _ := c.Semaphore(name, 1)
			return s.Acquire(ctx)
		},
		"semN": func(c *dlock.Client, name string) (*dlock.Lock, error) {
			s, _ := c.Semaphore(name, 2)
			return s.AcquireN(ctx, 2)
		},
		"write": func(c *dlock.Client, name string) (*dlock.Lock, error) {
			rw, _ := c.RWMutex(name)
			return rw.Writer().Acquire(ctx)
		},
		"campaign": func(c *dlock.Client, name string) (*dlock.Lock, error) {
			e, _ := c.Election(name)
			ld, err := e.Campaign(ctx, "x")
			if err != nil {
				return nil, err
			}
			return ld.Lock(), nil
		},
	}
	for kname, take := range kinds {
		name := "adv7-close-" + kname
		holderC := newClient(t, rdb, dlock.LeaseTTL(5*time.Second))
		h, err := take(holderC, name)
		if err != nil {
			t.Fatal(err)
		}
		waiterC := newClient(t, rdb, dlock.LeaseTTL(5*time.Second))
		done := make(chan error, 1)
		go func() {
			l, err := take(waiterC, name)
			if l != nil {
				l.Release(ctx)
			}
			done <- err
		}()
		if !waitFor(2*time.Second, func() bool { return rdb.LLen(ctx, "dlock:{"+name+"}:q").Val() == 1 }) {
			t.Fatalf("%s: the waiter did not queue", kname)
		}
		if err := waiterC.Close(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			if !errors.Is(err, dlock.ErrClosed) {
				t.Errorf("%s: the waiter woken by Close = %v, want ErrClosed", kname, err)
			}
		case <-time.After(3 * time.Second):
			t.Fatalf("%s: the waiter was not woken by Close", kname)
		}
		if n := rdb.LLen(ctx, "dlock:{"+name+"}:q").Val() + rdb.HLen(ctx, "dlock:{"+name+"}:qw").Val(); n != 0 {
			t.Errorf("%s: %d queue entries left after Close", kname, n)
		}
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
		third := newClient(t, rdb, dlock.LeaseTTL(5*time.Second))
		l, err := take(third, name)
		if err != nil {
			t.Errorf("%s: after the holder released: %v", kname, err)
			continue
		}
		l.Release(ctx)
	}
}

// HELD: concurrent holders of a semaphore whose kept size is changed
// (between 2 and 3) while they acquire, through handles made with N = 1,
// 5 and 0, never number more than 3 at once; once all released, Available
// is the kept size.
func TestAdv7SemaphoreSizeRaceExclusion(t *testing.T) {
	_, rdb := setup(t)
	ctx := t.Context()
	setter := newClient(t, rdb, dlock.LeaseTTL(2*time.Second))
	s0, _ := setter.Semaphore("adv7-size", 0)
	if ok, err := s0.TrySetPermits(ctx, 2); !ok || err != nil {
		t.Fatal(ok, err)
	}
	var inside, most atomic.Int32
	var wg sync.WaitGroup
	stop := time.Now().Add(2500 * time.Millisecond)
	for i := range 6 {
		c := newClient(t, rdb, dlock.LeaseTTL(2*time.Second))
		s, err := c.Semaphore("adv7-size", []int{1, 5, 0}[i%3])
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			for j := 0; j < 200 && time.Now().Before(stop); j++ {
				actx, cancel := context.WithTimeout(ctx, time.Second)
				l, err := s.Acquire(actx)
				cancel()
				if err != nil {
					continue
				}
				n := inside.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				time.Sleep(time.Millisecond)
				inside.Add(-1)
				if err := l.Release(ctx); err != nil {
					t.Errorf("release: %v", err)
				}
			}
		})
	}
	wg.Go(func() {
		for j := 0; j < 100 && time.Now().Before(stop); j++ {
			if _, err := s0.AddPermits(ctx, 1); err != nil {
				t.Errorf("AddPermits(+1): %v", err)
			}
			time.Sleep(3 * time.Millisecond)
			if _, err := s0.AddPermits(ctx, -1); err != nil {
				t.Errorf("AddPermits(-1): %v", err)
			}
			time.Sleep(3 * time.Millisecond)
		}
	})
	wg.Wait()
	if m := most.Load(); m > 3 {
		t.Errorf("%d permits held at once; the kept size was never above 3", m)
	}
	if a, err := s0.Available(ctx); err != nil || a != 2 {
		t.Errorf("Available after all released = %d, %v; want 2", a, err)
	}
	if _, err := s0.AddPermits(ctx, -2); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("AddPermits(-2) of 2 = %v, want ErrInvalid", err)
	}
	if _, err := s0.AddPermits(ctx, math.MaxInt32); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("AddPermits(MaxInt32) of 2 = %v, want ErrInvalid", err)
	}
	if v := rdb.Get(ctx, "dlock:{adv7-size}:n").Val(); v != "2" {
		t.Errorf("the kept size after refused adds is %q, want 2", v)
	}
}

// HELD: with a kept size of 2, a Semaphore made with N = 5 is bound by 2;
// AcquireN(3) through it is ErrInvalid; a waiter for 2 behind one holder,
// shrunk to 1, is refused with ErrInvalid and leaves the queue.
func TestAdv7SemaphoreHandleMismatch(t *testing.T) {
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.LeaseTTL(3*time.Second))
	s5, _ := c.Semaphore("adv7-mm", 5)
	if ok, err := s5.TrySetPermits(ctx, 2); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if ok, err := s5.TrySetPermits(ctx, 4); ok || err != nil {
		t.Errorf("TrySetPermits over a kept size = %v, %v; want false", ok, err)
	}
	a, err := s5.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s5.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s5.TryAcquire(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("a third permit of a kept 2 through N=5 = %v, want ErrNotAcquired", err)
	}
	if _, err := s5.AcquireN(ctx, 3, dlock.MaxWait(100*time.Millisecond)); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("AcquireN(3) of a kept 2 = %v, want ErrInvalid", err)
	}
	b.Release(ctx)
	done := make(chan error, 1)
	go func() {
		l, err := s5.AcquireN(ctx, 2, dlock.MaxWait(3*time.Second))
		if l != nil {
			l.Release(ctx)
		}
		done <- err
	}()
	if !waitFor(2*time.Second, func() bool { return rdb.LLen(ctx, "dlock:{adv7-mm}:q").Val() == 1 }) {
		t.Fatal("the waiter for 2 did not queue")
	}
	if n, err := s5.AddPermits(ctx, -1); err != nil || n != 1 {
		t.Fatalf("AddPermits(-1) = %d, %v", n, err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("the waiter for 2 after the shrink to 1 = %v, want ErrInvalid", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("the waiter for 2 was not told of the shrink")
	}
	if n := rdb.LLen(ctx, "dlock:{adv7-mm}:q").Val(); n != 0 {
		t.Errorf("%d queue entries left", n)
	}
	a.Release(ctx)
	if av, err := s5.Available(ctx); err != nil || av != 1 {
		t.Errorf("Available = %d, %v; want 1", av, err)
	}
}

// HELD: Downgrade of a write hold keeps its token and fence, lets a
// waiting reader in, not a waiting writer, and its watchdog then extends
// the read hold past several TTLs; a second Downgrade is ErrInvalid, and a
// Downgrade of a write that lapsed is ErrNotHeld.
func TestAdv7Downgrade(t *testing.T) {
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.LeaseTTL(300*time.Millisecond))
	rw, _ := c.RWMutex("adv7-dg")
	w, err := rw.Writer().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f := fenceOf(t, w)
	tok := w.Token()
	wdone := make(chan error, 1)
	c2 := newClient(t, rdb, dlock.LeaseTTL(time.Second))
	rw2, _ := c2.RWMutex("adv7-dg")
	go func() {
		l, err := rw2.Writer().Acquire(ctx, dlock.MaxWait(1500*time.Millisecond))
		if l != nil {
			l.Release(ctx)
		}
		wdone <- err
	}()
	if !waitFor(2*time.Second, func() bool { return rdb.LLen(ctx, "dlock:{adv7-dg}:q").Val() == 1 }) {
		t.Fatal("the writer did not queue")
	}
	if err := rw.Downgrade(ctx, w); err != nil {
		t.Fatal(err)
	}
	if w.Token() != tok || fenceOf(t, w) != f {
		t.Errorf("token or fence changed by Downgrade")
	}
	if err := rw.Downgrade(ctx, w); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("a second Downgrade = %v, want ErrInvalid", err)
	}
	time.Sleep(time.Second) // >3 TTLs: the watchdog extends the read
	if err := w.Err(); err != nil {
		t.Fatalf("the downgraded hold was lost: %v", err)
	}
	select {
	case err := <-wdone:
		t.Fatalf("a writer got in beside the downgraded read: %v", err)
	default:
	}
	hs, err := rw.Holders(ctx)
	if err != nil || len(hs) != 1 || hs[0].Write || hs[0].Token != tok {
		t.Errorf("Holders = %+v, %v; want the one read", hs, err)
	}
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-wdone; err != nil {
		t.Errorf("the waiting writer after the read released: %v", err)
	}

	c3 := newClient(t, rdb, dlock.LeaseTTL(100*time.Millisecond), dlock.WithAutoExtend(false))
	rw3, _ := c3.RWMutex("adv7-dg2")
	w3, err := rw3.Writer().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(150 * time.Millisecond)
	if err := rw3.Downgrade(ctx, w3); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Downgrade of a lapsed write = %v, want ErrNotHeld", err)
	}
}

// HELD: a Downgrade whose reply arrives after the write hold reached its
// max hold (the cap's undo runs meanwhile, with the claim as it was before
// the reply) leaves nothing held for long: a writer gets the lock within a
// second of the cap. (Also run under -race: Downgrade rewrites the claim
// while the background undo reads it; no race was reported, the go-redis
// pool orders the two.)
func TestAdv7DowngradeAcrossMaxHold(t *testing.T) {
	s := redistest.Start(t, redistest.TCP())
	direct := s.Client(t)
	p := redistest.NewProxy(t, s.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr()})
	t.Cleanup(func() { rdb.Close() })
	ctx := t.Context()
	c := newClient(t, rdb, dlock.LeaseTTL(2*time.Second))
	other := newClient(t, direct, dlock.LeaseTTL(2*time.Second))
	for round := range 3 {
		name := fmt.Sprint("adv7-dgr-", round)
		rw, _ := c.RWMutex(name)
		w, err := rw.Writer().Acquire(ctx, dlock.MaxHold(200*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		w.Done() // arm the expiry timer
		time.Sleep(150 * time.Millisecond)
		p.Delay(0, 150*time.Millisecond) // the reply of the downgrade arrives after the cap
		err = rw.Downgrade(ctx, w)
		p.Delay(0, 0)
		t.Logf("round %d: Downgrade = %v, Err = %v", round, err, w.Err())
		orw, _ := other.RWMutex(name)
		l, err := orw.Writer().Acquire(ctx, dlock.MaxWait(time.Second))
		if err != nil {
			t.Fatalf("round %d: a writer after the downgraded hold's cap: %v", round, err)
		}
		l.Release(ctx)
		w.Release(ctx)
	}
}

// DEFECT (a lock left stuck past what was asked): an Extend that only
// lengthens is sent unnumbered (PEXPIRE GT), on the reasoning that "copies
// of it need no order". But a copy delayed in the network that lands AFTER
// a later, shortening Extend undoes it: the caller's Extend(10s) gave up
// (its ctx ended, the request still in the network), the caller then
// shortened the lease to 1s (Extend returned nil), and the late
// Extend(10s) lands and sets the key back to 10s. The Lock's validity ends
// at 1s (it declares the loss), while Redis keeps the lock from everyone
// for ~10s: Extend extended past what was last asked.
func TestAdv7LateLengtheningExtendUndoesShortening(t *testing.T) {
	srv := redistest.Start(t, redistest.TCP())
	direct := srv.Client(t)
	ctx := t.Context()
	p := redistest.NewProxy(t, srv.Addr())
	prdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { prdb.Close() })
	c := newClient(t, prdb, dlock.LeaseTTL(2*time.Second), dlock.WithAutoExtend(false), pipelined(false))
	l, err := c.TryAcquire(ctx, "adv7-late")
	if err != nil {
		t.Fatal(err)
	}
	p.Delay(300*time.Millisecond, 0)
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	lateErr := l.Extend(cctx, 10*time.Second) // gives up; the request is still in the network
	cancel()
	p.Delay(0, 0)
	if err := l.Extend(ctx, time.Second); err != nil {
		t.Fatalf("Extend(1s): %v (the late Extend(10s): %v)", err, lateErr)
	}
	time.Sleep(500 * time.Millisecond) // the late copy has landed
	pttl := direct.PTTL(ctx, "dlock:{adv7-late}").Val()
	if pttl > 1100*time.Millisecond {
		t.Errorf("after Extend(10s) gave up (%v) and Extend(1s) returned nil, the key lives %v more: the late lengthening copy undid the shortening; the Lock's validity ends in %v",
			lateErr, pttl.Round(time.Millisecond), time.Until(l.ValidUntil()).Round(time.Millisecond))
	}
	l.Release(ctx)
}
