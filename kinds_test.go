package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
)

// Tests that run across every kind of lock on a name (Lock, reentrant
// Lock, Semaphore, RWMutex, Election): what they share (leases, events,
// waits, errors) and how kinds of one name refuse each other.

// kindEvents records the observers' events by lock name.
type kindEvents struct {
	mu sync.Mutex
	ev map[string][]dlock.Event
}

func (r *kindEvents) observer() dlock.Observer {
	rec := func(_ context.Context, e *dlock.Event) {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.ev == nil {
			r.ev = map[string][]dlock.Event{}
		}
		r.ev[e.Name] = append(r.ev[e.Name], *e)
	}
	return dlock.Observer{End: rec, Lost: rec}
}

func (r *kindEvents) of(name string) []dlock.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]dlock.Event(nil), r.ev[name]...)
}

// kindCase is one kind's way to take a lease and its Event.Mode.
type kindCase struct {
	name, mode string
	take       func(ctx context.Context, c *dlock.Client, name string, try bool, opts ...dlock.LeaseOption) (*dlock.Lock, error)
}

func everyKind() []kindCase {
	return []kindCase{
		{"semaphore", "semaphore", func(ctx context.Context, c *dlock.Client, name string, try bool, opts ...dlock.LeaseOption) (*dlock.Lock, error) {
			s, err := c.Semaphore(name, 1)
			if err != nil {
				return nil, err
			}
			if try {
				return s.TryAcquire(ctx, lo(opts)...)
			}
			return s.Acquire(ctx, lo(opts)...)
		}},
		{"read", "read", func(ctx context.Context, c *dlock.Client, name string, try bool, opts ...dlock.LeaseOption) (*dlock.Lock, error) {
			rw, err := c.RWMutex(name)
			if err != nil {
				return nil, err
			}
			if try {
				return rw.Reader().TryAcquire(ctx, lo(opts)...)
			}
			return rw.Reader().Acquire(ctx, lo(opts)...)
		}},
		{"write", "write", func(ctx context.Context, c *dlock.Client, name string, try bool, opts ...dlock.LeaseOption) (*dlock.Lock, error) {
			rw, err := c.RWMutex(name)
			if err != nil {
				return nil, err
			}
			if try {
				return rw.Writer().TryAcquire(ctx, lo(opts)...)
			}
			return rw.Writer().Acquire(ctx, lo(opts)...)
		}},
		{"election", "election", func(ctx context.Context, c *dlock.Client, name string, try bool, opts ...dlock.LeaseOption) (*dlock.Lock, error) {
			e, err := c.Election(name)
			if err != nil {
				return nil, err
			}
			o := lo(opts)
			if try {
				o = append(o, dlock.MaxWait(0))
			}
			ld, err := e.Campaign(ctx, "v", o...)
			if err != nil {
				return nil, err
			}
			return ld.Lock(), nil
		}},
		{"own", "", func(ctx context.Context, c *dlock.Client, name string, try bool, opts ...dlock.LeaseOption) (*dlock.Lock, error) {
			if try {
				return c.TryAcquire(ctx, name, lo(opts)...)
			}
			return c.Acquire(ctx, name, lo(opts)...)
		}},
	}
}

func lo(opts []dlock.LeaseOption) []dlock.LockOption {
	var o []dlock.LockOption
	for _, x := range opts {
		o = append(o, x)
	}
	return o
}

// TestKindsLeaseExtendFenceAndRelease: each kind made on an unfair and on a fair Client
// takes a lease that its watchdog keeps past the TTL, that Extend, Fence
// and TTL serve, and whose Release frees it for the next one; every event
// names the kind's mode.
func TestKindsLeaseExtendFenceAndRelease(t *testing.T) {
	t.Parallel()
	long(t)
	_, rdb := setup(t)
	for _, fair := range []bool{false, true} {
		var rec kindEvents
		c := newClient(t, rdb, waiting(fair), dlock.WithObserver(rec.observer()))
		own := "unfair"
		if fair {
			own = "fair"
		}
		for _, k := range everyKind() {
			t.Run(fmt.Sprintf("fair=%v/%s", fair, k.name), func(t *testing.T) {
				t.Parallel()
				mode := k.mode
				if mode == "" {
					mode = own
				}
				kindRoundTrip(t, c, &rec, k, fmt.Sprintf("rt-%v-%s", fair, k.name), mode)
			})
		}
	}
}

// kindRoundTrip takes name as kind k on c under a watchdog past its TTL,
// extends it, reads its fence and TTL, sees another of the kind refused,
// releases it and takes it again; then checks that rec saw every event of
// name with mode and at least one watchdog extension.
func kindRoundTrip(t *testing.T, c *dlock.Client, rec *kindEvents, k kindCase, name, mode string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	l, err := k.take(ctx, c, name, false, dlock.LeaseTTL(1500*time.Millisecond))
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	time.Sleep(2200 * time.Millisecond) // past the TTL; the watchdog extends every 500ms
	if err := l.Err(); err != nil {
		t.Fatalf("lease lost under its watchdog: %v", err)
	}
	if err := l.Extend(ctx, 2*time.Second); err != nil {
		t.Fatalf("Extend: %v", err)
	}
	if f, err := l.Fence(ctx); err != nil || f <= 0 {
		t.Fatalf("Fence = %d, %v", f, err)
	}
	if d, err := l.TTL(ctx); err != nil || d <= 0 {
		t.Fatalf("TTL = %v, %v", d, err)
	}
	// Held: another of the same kind (a write for a read) is refused.
	other := k
	if k.name == "read" {
		other = everyKind()[2]
	}
	if l2, err := other.take(ctx, c, name, true); err == nil {
		l2.Release(ctx)
		t.Fatalf("a second %s was granted while the first is held", other.name)
	} else if !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("second %s: %v; want ErrNotAcquired", other.name, err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	l2, err := k.take(ctx, c, name, true)
	if err != nil {
		t.Fatalf("after Release: %v", err)
	}
	if err := l2.Release(ctx); err != nil {
		t.Fatalf("second Release: %v", err)
	}
	var auto bool
	for _, e := range rec.of(name) {
		if other.name != k.name && errors.Is(e.Err, dlock.ErrNotAcquired) {
			if e.Mode != "write" {
				t.Errorf("the refused write's event has Mode %q", e.Mode)
			}
			continue
		}
		if e.Mode != mode {
			t.Errorf("event %s (auto %v) has Mode %q; want %q", e.Op, e.Auto, e.Mode, mode)
		}
		if e.Op == dlock.OpExtend && e.Auto {
			auto = true
			if e.Err != nil {
				t.Errorf("watchdog extension failed: %v", e.Err)
			}
		}
	}
	if !auto {
		t.Errorf("no watchdog extension observed")
	}
}

// TestKindsAfterScriptFlushAndLoss: with the script cache flushed under a
// held lease of each kind, Extend, Fence and Release still run that kind's
// scripts; a lease left to expire is reported Lost with its kind's Mode; a
// name held as one kind refuses another with ErrWrongType, named by the
// refusing kind's verb.
func TestKindsAfterScriptFlushAndLoss(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	var rec kindEvents
	c := newClient(t, rdb, dlock.WithUnfair(nil), dlock.WithObserver(rec.observer()))
	noext := newClient(t, rdb, dlock.WithAutoExtend(false), dlock.WithObserver(rec.observer()))
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	kinds := everyKind()
	for _, k := range kinds {
		mode := k.mode
		if mode == "" {
			mode = "unfair"
		}
		name := "flush-" + k.name
		l, err := k.take(ctx, c, name, false)
		if err != nil {
			t.Fatalf("%s: %v", k.name, err)
		}
		if err := rdb.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if err := l.Extend(ctx, 5*time.Second); err != nil {
			t.Errorf("%s: Extend after SCRIPT FLUSH: %v", k.name, err)
		}
		if err := rdb.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := l.Fence(ctx); err != nil {
			t.Errorf("%s: Fence after SCRIPT FLUSH: %v", k.name, err)
		}
		if err := rdb.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Errorf("%s: Release after SCRIPT FLUSH: %v", k.name, err)
		}
		if n, _ := rdb.Exists(ctx, "{"+name+"}").Result(); n != 0 {
			t.Errorf("%s: the lock key is left after Release", k.name)
		}
		wrongKindsRefused(ctx, t, c, kinds, k, name)
		lostWithMode(ctx, t, noext, &rec, k, mode)
	}
}

// wrongKindsRefused holds name as kind k on c and checks that every kind of
// another structure is refused with ErrWrongType, named by its own verb.
func wrongKindsRefused(ctx context.Context, t *testing.T, c *dlock.Client, kinds []kindCase, k kindCase, name string) {
	t.Helper()
	l, err := k.take(ctx, c, name, false)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	for _, o := range kinds {
		if o.name == k.name || (o.name == "read" && k.name == "write") || (o.name == "write" && k.name == "read") ||
			(o.name == "election" && k.name == "own") || (o.name == "own" && k.name == "election") {
			continue // the same structure
		}
		verb := "acquire"
		if o.name == "election" {
			verb = "campaign"
		}
		l2, err := o.take(ctx, c, name, true)
		if err == nil {
			l2.Release(ctx)
			t.Errorf("%s held, %s granted", k.name, o.name)
			continue
		}
		if !errors.Is(err, dlock.ErrWrongType) || !strings.HasPrefix(err.Error(), "dlock: "+verb+" ") {
			t.Errorf("%s held, %s: %v; want ErrWrongType starting %q", k.name, o.name, err, "dlock: "+verb)
		}
	}
}

// lostWithMode lets a lease of kind k taken on noext (no watchdog) expire
// and checks that rec saw it Lost with the kind's mode.
func lostWithMode(ctx context.Context, t *testing.T, noext *dlock.Client, rec *kindEvents, k kindCase, mode string) {
	t.Helper()
	lname := "lost-" + k.name
	l, err := k.take(ctx, noext, lname, false, dlock.LeaseTTL(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if !closedWithin(l.Done(), 2*time.Second) {
		t.Fatalf("%s: Done not closed", k.name)
	}
	lostEvents := func() []dlock.Event {
		var lost []dlock.Event
		for _, e := range rec.of(lname) {
			if e.Op == dlock.OpLost {
				lost = append(lost, e)
			}
		}
		return lost
	}
	waitFor(2*time.Second, func() bool { return len(lostEvents()) > 0 })
	lost := lostEvents()
	for _, e := range lost {
		want := mode
		if k.mode == "" {
			want = "fair"
		}
		if e.Mode != want {
			t.Errorf("%s: Lost event Mode %q; want %q", k.name, e.Mode, want)
		}
	}
	if len(lost) == 0 {
		t.Errorf("%s: no Lost event", k.name)
	}
}

// TestKindsWaitErrorsNameTheVerbAndDoReportsTheMode: a wait that runs out names the kind's verb; each
// kind's Do reports its mode for the acquisition and the release.
func TestKindsWaitErrorsNameTheVerbAndDoReportsTheMode(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	var rec kindEvents
	c := newClient(t, rdb, dlock.WithUnfair(nil), dlock.WithObserver(rec.observer()))
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	for _, k := range everyKind() {
		verb := "acquire"
		if k.name == "election" {
			verb = "campaign"
		}
		name := "wait-" + k.name
		l, err := k.take(ctx, c, name, false)
		if err != nil {
			t.Fatal(err)
		}
		other := k
		if k.name == "read" {
			other = everyKind()[2]
		}
		_, err = other.take(ctx, c, name, false, dlock.MaxWait(150*time.Millisecond))
		if err == nil || !strings.HasPrefix(err.Error(), "dlock: "+verb+" ") || !errors.Is(err, dlock.ErrNotAcquired) {
			t.Errorf("%s: MaxWait ran out: %v; want ErrNotAcquired starting %q", other.name, err, "dlock: "+verb)
		}
		cctx, ccancel := context.WithTimeout(ctx, 150*time.Millisecond)
		_, err = other.take(cctx, c, name, false)
		ccancel()
		if err == nil || !strings.HasPrefix(err.Error(), "dlock: "+verb+" ") || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s: ctx ran out: %v; want DeadlineExceeded starting %q", other.name, err, "dlock: "+verb)
		}
		l.Release(ctx)
	}
	s, _ := c.Semaphore("do-s", 2)
	rw, _ := c.RWMutex("do-rw")
	e, _ := c.Election("do-e")
	fn := func(context.Context, *dlock.Lock) error { return nil }
	if err := s.Do(ctx, fn); err != nil {
		t.Fatal(err)
	}
	if err := rw.Reader().Do(ctx, fn); err != nil {
		t.Fatal(err)
	}
	if err := rw.Writer().Do(ctx, fn); err != nil {
		t.Fatal(err)
	}
	if err := e.Do(ctx, "v", func(context.Context, *dlock.Leadership) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := c.Do(ctx, "do-c", fn); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string][]string{"do-s": {"semaphore"}, "do-rw": {"read", "write"}, "do-e": {"election"}, "do-c": {"unfair"}} {
		var got []string
		for _, ev := range rec.of(name) {
			got = append(got, string(ev.Op)+":"+ev.Mode)
		}
		var exp []string
		for _, m := range want {
			exp = append(exp, "acquire:"+m, "release:"+m)
		}
		if fmt.Sprint(got) != fmt.Sprint(exp) {
			t.Errorf("%s: events %v; want %v", name, got, exp)
		}
	}
}

// TestKindsErrorsNameTheirVerbs: an election's errors say campaign and resign; a
// semaphore's, a read-write lock's and a Client's say acquire and release.
func TestKindsErrorsNameTheirVerbs(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	c := newClient(t, rdb, dlock.WithAutoExtend(false))
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for _, k := range everyKind() {
		acq, rel := "acquire", "release"
		if k.name == "election" {
			acq, rel = "campaign", "resign"
		}
		name := "verb-" + k.name
		other := k
		if k.name == "read" {
			other = everyKind()[2]
		}
		l, err := k.take(ctx, c, name, false, dlock.LeaseTTL(3*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		_, err = other.take(ctx, c, name, true)
		if err == nil || !strings.HasPrefix(err.Error(), "dlock: "+acq+" ") {
			t.Errorf("%s: refused attempt: %v; want it to start with %q", k.name, err, "dlock: "+acq)
		}
		done, stop := context.WithCancel(ctx)
		stop()
		err = l.Release(done)
		if err == nil || !strings.HasPrefix(err.Error(), "dlock: "+rel+" ") {
			t.Errorf("%s: Release with a done context: %v; want it to start with %q", k.name, err, "dlock: "+rel)
		}
		l.Release(ctx)
	}
}

// TestKindsRefusedByQuorumAndScriptFreeClients: a quorum and a script-free Client refuse the kinds with
// the texts they had.
func TestKindsRefusedByQuorumAndScriptFreeClients(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ns := newClient(t, rdb, dlock.WithoutScripts())
	q := newRedlock(t, []redis.UniversalClient{rdb, rdb, rdb}, 50*time.Millisecond)
	want := []struct {
		c    *dlock.Client
		call string
		s    string
	}{
		{ns, "sem", `Semaphore("x", 2): semaphores need scripts; a Client made WithoutScripts() cannot keep one`},
		{ns, "rw", `RWMutex("x"): read-write locks need scripts; a Client made WithoutScripts() cannot keep one`},
		{ns, "el", `Election("x"): elections need scripts; a Client made WithoutScripts() cannot hold one`},
		{q, "sem", `Semaphore("x", 2): semaphores are not available over a quorum (NewRedlock)`},
		{q, "rw", `RWMutex("x"): read-write locks are not available over a quorum (NewRedlock)`},
		{q, "el", `Election("x"): elections are not available over a quorum (NewRedlock), whose waiting is not fair`},
	}
	for _, w := range want {
		var err error
		switch w.call {
		case "sem":
			_, err = w.c.Semaphore("x", 2)
		case "rw":
			_, err = w.c.RWMutex("x")
		case "el":
			_, err = w.c.Election("x")
		}
		if !errors.Is(err, dlock.ErrInvalid) || !strings.HasSuffix(err.Error(), w.s) {
			t.Errorf("%s: %v; want ErrInvalid ending %q", w.call, err, w.s)
		}
	}
}

// TestKindsConcurrentOnOneClientWithObservers: many goroutines across every kind on one Client, with
// observers and Stats read alongside, under -race.
func TestKindsConcurrentOnOneClientWithObservers(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	var rec kindEvents
	c := newClient(t, rdb, waiting(false), dlock.WithObserver(rec.observer()))
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for i, k := range everyKind() {
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := range 10 {
					l, err := k.take(ctx, c, fmt.Sprintf("storm-%d", i), j%2 == 0, dlock.LeaseTTL(1500*time.Millisecond))
					if errors.Is(err, dlock.ErrNotAcquired) {
						continue
					}
					if err != nil {
						errs <- fmt.Errorf("%s/%d: %w", k.name, g, err)
						return
					}
					_ = c.Stats()
					time.Sleep(5 * time.Millisecond)
					if err := l.Release(ctx); err != nil {
						errs <- fmt.Errorf("%s/%d release: %w", k.name, g, err)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for i, k := range everyKind() {
		want := k.mode
		if want == "" {
			want = "unfair"
		}
		for _, e := range rec.of(fmt.Sprintf("storm-%d", i)) {
			if e.Mode != want {
				t.Errorf("%s: event %s Mode %q", k.name, e.Op, e.Mode)
				break
			}
		}
	}
}

// Kinds on one name: every pair refused with ErrWrongType, in both the fast
// path (the key alone) and the general path (a queue present).
func TestKindsOnOneNameRefuseEachOther(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	fair := newClient(t, rdb, dlock.WithAutoExtend(false))
	unfair := newClient(t, rdb, dlock.WithAutoExtend(false), dlock.WithUnfair(nil))
	type taker func(name string) (*dlock.Lock, error)
	kinds := map[string]taker{
		"fair":   func(n string) (*dlock.Lock, error) { return fair.TryAcquire(ctx, n) },
		"unfair": func(n string) (*dlock.Lock, error) { return unfair.TryAcquire(ctx, n) },
		"sem": func(n string) (*dlock.Lock, error) {
			return newSemaphore(t, fair, n, 3).TryAcquire(ctx)
		},
		"read":  func(n string) (*dlock.Lock, error) { return newRW(t, fair, n).Reader().TryAcquire(ctx) },
		"write": func(n string) (*dlock.Lock, error) { return newRW(t, fair, n).Writer().TryAcquire(ctx) },
	}
	same := func(a, b string) bool {
		return a == b || (a == "read" && b == "write") || (a == "write" && b == "read") ||
			(a == "fair" && b == "unfair") || (a == "unfair" && b == "fair")
	}
	i := 0
	for ka, ta := range kinds {
		for kb, tb := range kinds {
			if same(ka, kb) {
				continue
			}
			i++
			name := "kinds-" + ka + "-" + kb
			la, err := ta(name)
			if err != nil {
				t.Fatalf("%s: %v", ka, err)
			}
			lb, err := tb(name)
			if !errors.Is(err, dlock.ErrWrongType) {
				t.Errorf("%s then %s: %v, want ErrWrongType", ka, kb, err)
				if lb != nil {
					lb.Release(ctx)
				}
			}
			if err := la.Release(ctx); err != nil {
				t.Errorf("%s then %s: release of the first = %v", ka, kb, err)
			}
		}
	}
}

// TestClientMaxWaitBoundsEveryKindsWait: a Client-wide MaxWait bounds the
// waits of every kind (campaign, permit, write hold, DoAll, an Owner
// Client's reentrant Acquire), each failing with ErrNotAcquired near the
// bound; TryAcquire ignores it.
func TestClientMaxWaitBoundsEveryKindsWait(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	const bound = 300 * time.Millisecond
	holder := newClient(t, rdb)
	c := newClient(t, rdb, dlock.MaxWait(bound))
	rc := newClient(t, rdb, dlock.MaxWait(bound), dlock.WithReentrant(true))
	rholder := newClient(t, rdb, dlock.WithReentrant(true))
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()

	hold := func(l *dlock.Lock, err error) *dlock.Lock {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Release(context.Background()) })
		return l
	}
	he, err := holder.Election("mw-el")
	if err != nil {
		t.Fatal(err)
	}
	ld, err := he.Campaign(ctx, "h")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ld.Resign(context.Background()) })
	hs, _ := holder.Semaphore("mw-sem", 1)
	hold(hs.Acquire(ctx))
	hrw, _ := holder.RWMutex("mw-rw")
	hold(hrw.Reader().Acquire(ctx))
	hold(holder.Acquire(ctx, "mw-b"))
	hold(asOwner(t, rholder, "o1").Acquire(ctx, "mw-re"))

	e, _ := c.Election("mw-el")
	s, _ := c.Semaphore("mw-sem", 1)
	rw, _ := c.RWMutex("mw-rw")
	owner := asOwner(t, rc, "o2")
	cases := map[string]func() error{
		"Campaign":          func() error { _, err := e.Campaign(ctx, "c"); return err },
		"Semaphore.Acquire": func() error { _, err := s.Acquire(ctx); return err },
		"Writer.Acquire":    func() error { _, err := rw.Writer().Acquire(ctx); return err },
		"DoAll": func() error {
			return c.DoAll(ctx, []string{"mw-a", "mw-b"}, func(context.Context, *dlock.MultiLock) error { return nil })
		},
		"Owner.Acquire": func() error { _, err := owner.Acquire(ctx, "mw-re"); return err },
	}
	for name, f := range cases {
		start := time.Now()
		err := f()
		took := time.Since(start)
		if !errors.Is(err, dlock.ErrNotAcquired) || took < bound-20*time.Millisecond || took > bound+1500*time.Millisecond {
			t.Errorf("%s under a Client MaxWait(%v) = %v after %v; want ErrNotAcquired after about %v", name, bound, err, took.Round(time.Millisecond), bound)
		}
	}
	start := time.Now()
	if _, err := c.TryAcquire(ctx, "mw-b"); !errors.Is(err, dlock.ErrNotAcquired) || time.Since(start) > bound/2 {
		t.Errorf("TryAcquire under a Client MaxWait = %v after %v; want ErrNotAcquired at once", err, time.Since(start))
	}
	// A per-call MaxWait(0) overrides the default: one attempt.
	start = time.Now()
	if _, err := c.Acquire(ctx, "mw-b", dlock.MaxWait(0)); !errors.Is(err, dlock.ErrNotAcquired) || time.Since(start) > bound/2 {
		t.Errorf("Acquire(MaxWait(0)) under a Client MaxWait(%v) = %v after %v; want ErrNotAcquired at once", bound, err, time.Since(start))
	}
}

// A fence key that holds another program's value is named as the cause of
// the refusal of a kind that issues its fence as it takes the lock, not the
// lock key (which does not exist).
func TestKindsNameAForeignFenceKeyNotTheLockKey(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	re := asOwner(t, newClient(t, rdb, dlock.WithReentrant(true)), "owner")
	takes := map[string]func(name string) error{
		"reentrant": func(name string) error { _, err := re.TryAcquire(ctx, name); return err },
		"election": func(name string) error {
			_, err := newElection(t, newClient(t, rdb), name).Campaign(ctx, "v", dlock.MaxWait(0))
			return err
		},
	}
	for kind, take := range takes {
		name := "foreign-fence-" + kind
		if err := rdb.LPush(ctx, "dlock:{"+name+"}:fence", "x").Err(); err != nil {
			t.Fatal(err)
		}
		err := take(name)
		if !errors.Is(err, dlock.ErrWrongType) || !strings.Contains(err.Error(), "fence key") || strings.Contains(err.Error(), "none") {
			t.Errorf("%s: %v; want ErrWrongType naming the fence key", kind, err)
		}
		t.Logf("%s: %v", kind, err)
		if !waitFor(5*time.Second, func() bool { return rdb.Exists(ctx, "dlock:{"+name+"}").Val() == 0 }) {
			t.Errorf("%s: the refused attempt left the lock key: %v", kind, rdb.Type(ctx, "dlock:{"+name+"}").Val())
		}
	}
}
