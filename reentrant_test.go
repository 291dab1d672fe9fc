package dlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlockio/dlock"
)

func TestReentrantHoldsCount(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	c := asOwner(t, newClient(t, rdb, dlock.WithReentrant(true)), "job-7")
	ctx := t.Context()
	var holds []*dlock.Lock
	for i := range 3 {
		l, err := c.TryAcquire(ctx, "re")
		if err != nil {
			t.Fatalf("hold %d: TryAcquire = %v, want re-entry", i+1, err)
		}
		holds = append(holds, l)
	}
	if fenceOf(t, holds[1]) != fenceOf(t, holds[0]) || fenceOf(t, holds[2]) != fenceOf(t, holds[0]) {
		t.Errorf("fences of nested holds = %d, %d, %d, want the first hold's", fenceOf(t, holds[0]), fenceOf(t, holds[1]), fenceOf(t, holds[2]))
	}
	info, err := c.Inspect(ctx, "re")
	if err != nil || len(info.Owners) != 1 || info.Owners[0].Holds != 3 || info.Type != "hash" {
		t.Fatalf("Inspect = %+v, %v, want one owner with 3 holds", info, err)
	}
	for i, l := range holds { // nested holds share the owner's token, as they share the fence
		if l.Token() != holds[0].Token() || l.Token() != info.Owners[0].ID {
			t.Errorf("hold %d: Token() = %q, want the owner's id %q", i+1, l.Token(), info.Owners[0].ID)
		}
	}
	other := newClient(t, rdb, dlock.WithReentrant(true))
	for i, l := range holds {
		if _, err := asOwner(t, other, "job-7").TryAcquire(t.Context(), "re"); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Errorf("another Client with the same owner string, %d holds left: %v, want ErrNotAcquired", 3-i, err)
		}
		if err := l.Release(ctx); err != nil {
			t.Errorf("release %d = %v", i+1, err)
		}
		want := int64(1)
		if i == 2 {
			want = 0
		}
		if n := liveKeys(ctx, rdb, "dlock:{re}"); n != want {
			t.Errorf("after %d of 3 releases: EXISTS = %d, want %d", i+1, n, want)
		}
	}
	if l, err := other.TryAcquire(ctx, "re"); err != nil {
		t.Errorf("TryAcquire after the last release = %v, want the lock", err)
	} else {
		l.Release(ctx)
	}
}

func TestReentrantNonOwnerReleaseRefused(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.WithReentrant(true), dlock.WithAutoExtend(false))
	b, err := asOwner(t, c, "b").TryAcquire(ctx, "re")
	if err != nil {
		t.Fatal(err)
	}
	rdb.Del(ctx, "dlock:{re}") // b's lease is gone
	a, err := asOwner(t, c, "a").TryAcquire(ctx, "re")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release(ctx)
	if err := b.Release(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("non-owner Release = %v, want ErrNotHeld", err)
	}
	if info, _ := c.Inspect(ctx, "re"); len(info.Owners) != 1 || info.Owners[0].Holds != 1 || info.Owners[0].ID != a.Token() {
		t.Errorf("owner's hold after a non-owner's release: %+v, want it unchanged", info.Owners)
	}
}

func TestReentrantHoldLostBehindItsBack(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	c := asOwner(t, newClient(t, rdb, dlock.WithReentrant(true)), "x")
	ctx := t.Context()
	h1, _ := c.TryAcquire(ctx, "re")
	h2, err := c.TryAcquire(ctx, "re")
	if err != nil {
		t.Fatal(err)
	}
	// One hold lost behind our back: the first hold field in the hash.
	fields, _ := rdb.HKeys(ctx, "dlock:{re}").Result()
	for _, f := range fields {
		if strings.HasPrefix(f, "h:") {
			rdb.HDel(ctx, "dlock:{re}", f)
			break
		}
	}
	// Whichever hold it was, its Release reports the loss, the other's does
	// not, and the key stays until the last live hold is released.
	e1 := h1.Release(ctx)
	if n := liveKeys(ctx, rdb, "dlock:{re}"); errors.Is(e1, dlock.ErrNotHeld) == (n == 0) {
		t.Errorf("after the first Release (%v): EXISTS = %d", e1, n)
	}
	e2 := h2.Release(ctx)
	if errors.Is(e1, dlock.ErrNotHeld) == errors.Is(e2, dlock.ErrNotHeld) || (e1 != nil && e2 != nil) {
		t.Errorf("Releases = %v, %v: want exactly one ErrNotHeld (the lost hold) and one nil", e1, e2)
	}
	if n := liveKeys(ctx, rdb, "dlock:{re}"); n != 0 {
		t.Errorf("after the last hold's Release: EXISTS = %d, want 0", n)
	}
}

func TestReentrantExpiryDuringNestedHoldSignalsOuter(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	c := asOwner(t, newClient(t, rdb, dlock.WithReentrant(true), dlock.LeaseTTL(300*time.Millisecond)), "x")
	ctx := t.Context()
	outer, err := c.TryAcquire(ctx, "re")
	if err != nil {
		t.Fatal(err)
	}
	inner, err := c.TryAcquire(ctx, "re")
	if err != nil {
		t.Fatal(err)
	}
	rdb.Del(ctx, "dlock:{re}") // the lease is lost while nested
	for name, l := range map[string]*dlock.Lock{"outer": outer, "inner": inner} {
		if !closedWithin(l.Done(), 2*time.Second) {
			t.Errorf("%s hold: Done() still open 2s after the lease was lost", name)
		}
		if err := l.Err(); !errors.Is(err, dlock.ErrNotHeld) {
			t.Errorf("%s hold: Err() = %v, want ErrNotHeld", name, err)
		}
		l.Release(ctx)
	}
}

func TestReentrantDoInsideDo(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	rc := newClient(t, rdb, dlock.WithReentrant(true))
	c := asOwner(t, rc, "request-1")
	ctx := t.Context()
	err := c.Do(ctx, "re", func(ctx context.Context, outer *dlock.Lock) error {
		// Another flow (another owner, or none) must wait, not re-enter.
		for _, other := range []*dlock.Client{rc, asOwner(t, rc, "request-2")} {
			if _, err := other.TryAcquire(t.Context(), "re"); !errors.Is(err, dlock.ErrNotAcquired) {
				t.Errorf("TryAcquire by another flow = %v, want ErrNotAcquired", err)
			}
		}
		return c.Do(ctx, "re", func(ctx context.Context, inner *dlock.Lock) error {
			if fenceOf(t, inner) != fenceOf(t, outer) || inner.Token() != outer.Token() {
				t.Errorf("nested Do's Lock: fence %d, token %q; want the outer hold's, %d and %q",
					fenceOf(t, inner), inner.Token(), fenceOf(t, outer), outer.Token())
			}
			info, _ := c.Inspect(ctx, "re")
			if len(info.Owners) != 1 || info.Owners[0].Holds != 2 {
				t.Errorf("inside nested Do: owners = %+v, want one with 2 holds", info.Owners)
			}
			return nil
		})
	})
	if err != nil {
		t.Errorf("nested Do = %v", err)
	}
	if n := liveKeys(ctx, rdb, "dlock:{re}"); n != 0 {
		t.Error("lock still held after the outer Do returned")
	}
	// A plain lock and a reentrant lock cannot share a name.
	rdb.Set(ctx, "dlock:{mixed}", "plain-token", time.Minute)
	if _, err := c.TryAcquire(ctx, "mixed"); !errors.Is(err, dlock.ErrWrongType) {
		t.Errorf("reentrant TryAcquire on a plain lock's key = %v, want ErrWrongType", err)
	}
}

// An owner is given only to a reentrant Client, and is not empty.
func TestOwnerRefusedWhereItDoesNotApply(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	if _, err := newClient(t, rdb).Owner("job-7"); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("Owner on a plain Client = %v, want ErrInvalid", err)
	}
	if _, err := newClient(t, rdb, dlock.WithReentrant(true)).Owner(""); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("Owner(\"\") = %v, want ErrInvalid", err)
	}
}

// Was a bug: Lock.TTL on a reentrant hold reports the KEY's remaining time, and
// counts a hold whose own deadline has passed (its h:<token> field lingers
// until the next write runs live_holds) as still held: TTL returns a
// positive lease and nil for a hold that Err() already reports lost, and
// for a live nested hold it overstates the hold's lease by the outer's.
// Inspect's Owner.Holds counts expired holds too.
//
// The fix: Inspect reads the server's clock and counts only live holds;
// Lock.TTL returns the hold's own deadline minus now.
func TestReentrantTTLIsTheHoldsOwn(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	c := asOwner(t, newClient(t, rdb, dlock.WithReentrant(true), dlock.LeaseTTL(10*time.Second), dlock.WithAutoExtend(false)), "a")
	ctx := t.Context()
	outer, err := c.TryAcquire(ctx, "rettl")
	if err != nil {
		t.Fatal(err)
	}
	defer outer.Release(ctx)
	inner, err := c.TryAcquire(ctx, "rettl")
	if err != nil {
		t.Fatal(err)
	}
	if err := inner.Extend(ctx, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	if ttl, err := inner.TTL(ctx); err != nil || ttl > 2*time.Second {
		t.Errorf("live nested hold extended to 2s: TTL() = %v, %v; want at most 2s (the hold's own lease)", ttl, err)
	}
	if err := inner.Extend(ctx, 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	time.Sleep(400 * time.Millisecond)
	if err := inner.Err(); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("inner.Err() = %v after its 100ms lease ran out, want ErrNotHeld", err)
	}
	if ttl, err := inner.TTL(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("expired nested hold: TTL() = %v, %v; want ErrNotHeld (Err() already says lost)", ttl, err)
	}
	if info, _ := c.Inspect(ctx, "rettl"); len(info.Owners) != 1 || info.Owners[0].Holds != 1 {
		t.Errorf("Inspect after the nested hold expired: owners %+v, want 1 live hold", info.Owners)
	}
}

// A reentrant owner's stale handle (its lease was lost, the owner took the
// lock again) must not release the newer hold.
func TestReentrantStaleHandleCannotReleaseNewerHold(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	rc := newClient(t, rdb, dlock.WithReentrant(true), dlock.WithAutoExtend(false))
	c := asOwner(t, rc, "a")
	ctx := t.Context()
	stale, err := c.TryAcquire(ctx, "re")
	if err != nil {
		t.Fatal(err)
	}
	rdb.Del(ctx, "dlock:{re}") // the lease is lost
	fresh, err := c.TryAcquire(ctx, "re")
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Release(ctx)
	if err := stale.Release(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("stale handle's Release = %v, want ErrNotHeld", err)
	}
	if _, err := asOwner(t, rc, "b").TryAcquire(t.Context(), "re"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("another owner's TryAcquire after the stale Release = %v, want ErrNotAcquired (the fresh hold stands)", err)
	}
	if err := fresh.Err(); err != nil {
		t.Errorf("fresh hold Err() = %v, want nil", err)
	}
}

// A nested hold with a shorter lease must not shorten the key below what the
// outer hold was promised.
func TestReentrantNestedHoldNeverShortensTheKey(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	rc := newClient(t, rdb, dlock.WithReentrant(true), dlock.LeaseTTL(time.Second), dlock.WithAutoExtend(false))
	c := asOwner(t, rc, "a")
	ctx := t.Context()
	outer, err := c.TryAcquire(ctx, "re")
	if err != nil {
		t.Fatal(err)
	}
	defer outer.Release(ctx)
	if err := outer.Extend(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	inner, err := c.TryAcquire(ctx, "re")
	if err != nil {
		t.Fatal(err)
	}
	if err := inner.Extend(ctx, 500*time.Millisecond); err != nil { // shorter still
		t.Fatal(err)
	}
	if err := inner.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if pttl := rdb.PTTL(ctx, "dlock:{re}").Val(); pttl < 25*time.Second {
		t.Errorf("PTTL after a nested hold came and went = %v, want the outer hold's ~30s", pttl)
	}
	time.Sleep(1200 * time.Millisecond)
	if _, err := asOwner(t, rc, "b").TryAcquire(t.Context(), "re"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("another owner's TryAcquire 1.2s later = %v, want ErrNotAcquired (outer valid 28s more)", err)
	}
}

// TestReentrantOwnersShareTheEngineNotTheOwnership: Owner Clients of one reentrant Client share its engine
// but not their owner: one does not re-enter another's lock; each re-enters
// its own; Stats and observers are common, and Close of one closes all.
func TestReentrantOwnersShareTheEngineNotTheOwnership(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	var rec kindEvents
	c := newClient(t, rdb, dlock.WithReentrant(true))
	c.Observe(rec.observer())
	a := mustOwner(t, c, "a")
	b := mustOwner(t, c, "b")
	a2 := mustOwner(t, c, "a")
	ctx := t.Context()
	la, err := a.TryAcquire(ctx, "own")
	if err != nil {
		t.Fatal(err)
	}
	if l, err := b.TryAcquire(ctx, "own"); err == nil {
		l.Release(ctx)
		t.Fatal("owner b re-entered owner a's lock")
	} else if !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("owner b: %v; want ErrNotAcquired", err)
	}
	if l, err := c.TryAcquire(ctx, "own"); err == nil {
		l.Release(ctx)
		t.Fatal("the root Client re-entered owner a's lock")
	}
	la2, err := a2.TryAcquire(ctx, "own")
	if err != nil {
		t.Fatalf("a second Owner(\"a\") does not re-enter a's lock: %v", err)
	}
	// An owner made from an Owner Client is that owner, not a nested one.
	bb := mustOwner(t, a, "b")
	if l, err := bb.TryAcquire(ctx, "own"); err == nil {
		l.Release(ctx)
		t.Fatal("a.Owner(\"b\") re-entered owner a's lock")
	}
	// The same owner string on another reentrant Client is another owner.
	d := newClient(t, rdb, dlock.WithReentrant(true))
	if da, err := d.Owner("a"); err != nil {
		t.Fatal(err)
	} else if l, err := da.TryAcquire(ctx, "own"); err == nil {
		l.Release(ctx)
		t.Fatal("owner \"a\" of another Client re-entered this Client's owner a's lock")
	}
	for _, l := range []*dlock.Lock{la2, la} {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	lb, err := b.TryAcquire(ctx, "own")
	if err != nil {
		t.Fatalf("owner b after a released: %v", err)
	}
	lb.Release(ctx)
	if sa, sc := a.Stats(), c.Stats(); sa.Acquired != sc.Acquired || sc.Acquired != 3 {
		t.Errorf("Stats: owner a %+v, root %+v; want the same counts, 3 acquired", sa, sc)
	}
	for _, e := range rec.of("own") {
		if e.Mode != "reentrant" {
			t.Errorf("event %s Mode %q; want reentrant", e.Op, e.Mode)
		}
	}
	refusesOtherKinds(t, c, a, b)
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for _, x := range []*dlock.Client{c, a} {
		if _, err := x.TryAcquire(ctx, "own-2"); !errors.Is(err, dlock.ErrClosed) {
			t.Errorf("after an Owner's Close: %v; want ErrClosed", err)
		}
	}
}

// Owner views: nested Do of another owner waits, bounded by ctx; views of
// the same owner re-enter; Owner of an Owner is the new owner.
func TestReentrantOwnerViewsNestAndReenter(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.WithReentrant(true), dlock.LeaseTTL(2*time.Second))
	a, _ := c.Owner("a")
	b, _ := c.Owner("b")
	ab, _ := a.Owner("b")
	err := a.Do(ctx, "own", func(ctx context.Context, l *dlock.Lock) error {
		// same owner again, from another goroutine: re-enters
		errc := make(chan error, 1)
		go func() {
			a2, _ := c.Owner("a")
			l2, err := a2.TryAcquire(ctx, "own")
			if err == nil {
				err = l2.Release(ctx)
			}
			errc <- err
		}()
		if err := <-errc; err != nil {
			t.Errorf("same owner re-entry from another view = %v", err)
		}
		// owner b (through a's Owner) must not re-enter
		if l3, err := ab.TryAcquire(ctx, "own"); err == nil {
			l3.Release(ctx)
			t.Errorf("a.Owner(\"b\") re-entered a's hold")
		}
		start := time.Now()
		dctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		err := b.Do(dctx, "own", func(context.Context, *dlock.Lock) error {
			t.Errorf("b's nested Do ran inside a's hold")
			return nil
		})
		if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 2*time.Second {
			t.Errorf("b's nested Do = %v after %v, want the deadline promptly", err, time.Since(start))
		}
		// release order: inner released after outer ends is checked by Do
		inner, err := a.TryAcquire(ctx, "own")
		if err != nil {
			t.Fatalf("inner = %v", err)
		}
		defer func() {
			if err := inner.Release(ctx); err != nil {
				t.Errorf("inner release after the outer Do's lock... = %v", err)
			}
		}()
		return nil
	})
	if err != nil {
		t.Errorf("Do = %v", err)
	}
	// outer released by Do, the inner hold released after it (defer inside fn
	// runs before Do's release). Now check the lock is free.
	if l, err := b.TryAcquire(ctx, "own"); err != nil {
		t.Errorf("after both holds ended, b TryAcquire = %v", err)
	} else {
		l.Release(ctx)
	}
	innerHoldOutlivesOuter(t, a, b, "own2")
}

// refusesOtherKinds: a reentrant Client (each of cs) keeps no semaphore,
// read-write lock or election.
func refusesOtherKinds(t *testing.T, cs ...*dlock.Client) {
	t.Helper()
	for _, x := range cs {
		if _, err := x.Semaphore("own-s", 2); !errors.Is(err, dlock.ErrInvalid) || !strings.Contains(err.Error(), "a reentrant Client (WithReentrant) cannot keep a semaphore") {
			t.Errorf("Semaphore on a reentrant Client: %v", err)
		}
		if _, err := x.RWMutex("own-rw"); !errors.Is(err, dlock.ErrInvalid) || !strings.Contains(err.Error(), "a reentrant Client (WithReentrant) cannot keep a read-write lock") {
			t.Errorf("RWMutex on a reentrant Client: %v", err)
		}
		if _, err := x.Election("own-e"); !errors.Is(err, dlock.ErrInvalid) || !strings.Contains(err.Error(), "a reentrant Client (WithReentrant) cannot hold an election") {
			t.Errorf("Election on a reentrant Client: %v", err)
		}
	}
}

// innerHoldOutlivesOuter: owner a holds name twice and releases the outer
// hold first; owner b gets name only after the inner one is released too.
func innerHoldOutlivesOuter(t *testing.T, a, b *dlock.Client, name string) {
	t.Helper()
	ctx := t.Context()
	o1, err := a.TryAcquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	o2, err := a.TryAcquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if err := o1.Release(ctx); err != nil {
		t.Errorf("outer release = %v", err)
	}
	if _, err := b.TryAcquire(ctx, name); err == nil {
		t.Errorf("b got %s while a's inner hold is live", name)
	}
	if err := o2.Release(ctx); err != nil {
		t.Errorf("inner release = %v", err)
	}
	if l, err := b.TryAcquire(ctx, name); err != nil {
		t.Errorf("after inner release b TryAcquire = %v", err)
	} else {
		l.Release(ctx)
	}
}

// mustOwner is c.Owner(owner), failing the test on an error.
func mustOwner(t *testing.T, c *dlock.Client, owner string) *dlock.Client {
	t.Helper()
	o, err := c.Owner(owner)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// A waiting reentrant Acquire whose refusals name no owner (a hash another
// program wrote, with an empty owner) keeps none of them as its last
// attempt: its error says only that the wait ended, as for any refusal that
// names no holder.
func TestAReentrantRefusalThatNamesNoOwnerIsNotKept(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.WithReentrant(true))
	rdb.HSet(ctx, "dlock:{e}", "owner", "")
	rdb.PExpire(ctx, "dlock:{e}", time.Minute)
	_, err := asOwner(t, c, "A").Acquire(ctx, "e", dlock.MaxWait(300*time.Millisecond))
	if !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("Acquire of a hash naming no owner = %v, want ErrNotAcquired", err)
	}
	if na, ok := errors.AsType[*dlock.NotAcquiredError](err); ok {
		t.Errorf("the wait's error keeps a refusal that names no holder: %+v", *na)
	}
}
