package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/goredisdriver"
	"github.com/dlockio/dlock/internal/leakcheck"
	"github.com/dlockio/dlock/internal/redistest"
)

// newElection returns c.Election(name), failing the test if it is refused.
func newElection(tb testing.TB, c *dlock.Client, name string) *dlock.Election {
	tb.Helper()
	e, err := c.Election(name)
	if err != nil {
		tb.Fatal(err)
	}
	return e
}

// campaign runs e.Campaign in a goroutine and returns where its outcome
// comes.
type outcome struct {
	ld  *dlock.Leadership
	err error
}

func campaign(ctx context.Context, e *dlock.Election, value string) <-chan outcome {
	got := make(chan outcome, 1)
	go func() {
		ld, err := e.Campaign(ctx, value)
		got <- outcome{ld, err}
	}()
	return got
}

// queued waits until n candidates wait in the election's queue.
func queued(ctx context.Context, rdb redis.Cmdable, name string, n int64) bool {
	return waitFor(30*time.Second, func() bool { return rdb.LLen(ctx, "dlock:{"+name+"}:q").Val() == n }) // (a process started on a loaded machine)
}

// leadTerm is what a leader does while it leads, in goroutines and in
// worker processes alike: it counts itself in the shared leaders key (any
// count above 1 is a violation), checks that Leader reads it with its fence,
// and that its fence is above every fence seen before (the highest in
// fenceKey), then resigns.
func leadTerm(ctx context.Context, rdb redis.Cmdable, e *dlock.Election, value string) error {
	ld, err := e.Campaign(ctx, value)
	if err != nil {
		return fmt.Errorf("Campaign(%q) = %v", value, err)
	}
	if n, _ := rdb.Incr(ctx, "test:leaders").Result(); n > 1 {
		rdb.Incr(ctx, violationsKey)
	}
	if prev, _ := rdb.GetSet(ctx, "test:fence", ld.Fence()).Int64(); prev >= ld.Fence() {
		rdb.Incr(ctx, "test:stale")
	}
	cur, err := e.Leader(ctx)
	if err != nil || cur.Token != ld.Lock().Token() || cur.Fence != ld.Fence() || cur.Value != value {
		return fmt.Errorf("Leader while %q leads = %+v, %v; want its token, fence %d, value", value, cur, err, ld.Fence())
	}
	time.Sleep(200 * time.Microsecond)
	rdb.Decr(ctx, "test:leaders")
	rdb.Incr(ctx, "test:terms")
	if err := ld.Resign(context.WithoutCancel(ctx)); err != nil {
		return fmt.Errorf("Resign of %q = %v", value, err)
	}
	return nil
}

// campaignHelper is the body of a worker process in mode "campaign": it
// leads DLOCK_ROUNDS terms of the election DLOCK_NAME (see leadTerm).
func campaignHelper(ctx context.Context, c *dlock.Client, rdb redis.Cmdable, name string, rounds int) int {
	e, err := c.Election(name)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	for i := range rounds {
		if err := leadTerm(ctx, rdb, e, fmt.Sprintf("proc-%d-%d", os.Getpid(), i)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	return 0
}

// leadHelper is the body of a worker process in mode "lead": it wins the
// election DLOCK_NAME, prints "leading", and leads until it is killed.
func leadHelper(ctx context.Context, c *dlock.Client, name string) int {
	e, err := c.Election(name)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if _, err := e.Campaign(ctx, fmt.Sprint("worker ", os.Getpid())); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("leading")
	time.Sleep(time.Minute)
	return 0
}

// Candidates in goroutines and in worker processes campaign again and
// again: there is never more than one leader, every term is counted, and
// each term's fence is above the one before.
func TestElectionOneLeaderAtATime(t *testing.T) {
	t.Parallel()
	s, rdb := setup(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	const (
		goroutines = 6
		procs      = 2
		rounds     = 15
	)
	var helpers []*helper
	for range procs {
		helpers = append(helpers, startHelper(t, s, "campaign", "leader", 2*time.Second, rounds, "DLOCK_FAIR=1"))
	}
	e := newElection(t, newClient(t, rdb, dlock.LeaseTTL(2*time.Second)), "leader")
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Go(func() {
			for i := range rounds {
				if err := leadTerm(ctx, rdb, e, fmt.Sprintf("g%d-%d", g, i)); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for i, h := range helpers {
		if err := h.wait(90 * time.Second); err != nil {
			t.Errorf("worker %d: %v: %s", i, err, h.out.String())
		}
	}
	if v, _ := rdb.Get(ctx, violationsKey).Int(); v != 0 {
		t.Errorf("%d times a candidate led while another did, want 0", v)
	}
	if v, _ := rdb.Get(ctx, "test:stale").Int(); v != 0 {
		t.Errorf("%d terms had a fence not above the one before, want 0", v)
	}
	if n, _ := rdb.Get(ctx, "test:terms").Int(); n != (goroutines+procs)*rounds {
		t.Errorf("%d terms, want %d", n, (goroutines+procs)*rounds)
	}
	if ld, err := e.Leader(ctx); err != nil || ld != (dlock.Leader{}) {
		t.Errorf("Leader after every candidate resigned = %+v, %v; want none", ld, err)
	}
}

// succession checks, on rdb's deployment, that leadership passes to the
// candidates in the order they campaigned when each leader resigns, that
// each term's fence is above the last, and that Observe reports each
// leader in turn and closes its channel with its ctx.
func succession(t *testing.T, rdb redis.UniversalClient, name string) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	e := newElection(t, newClient(t, rdb, dlock.LeaseTTL(5*time.Second)), name)
	octx, stop := context.WithCancel(ctx)
	defer stop()
	obs := e.Observe(octx)
	if ld := <-obs; ld != (dlock.Leader{}) {
		t.Errorf("Observe's first value before any campaign = %+v, want none", ld)
	}
	first, err := e.Campaign(ctx, "first")
	if err != nil {
		t.Fatalf("Campaign(first) = %v", err)
	}
	var waiting []<-chan outcome
	for i, v := range []string{"second", "third {x} 100% ünïcode"} {
		waiting = append(waiting, campaign(ctx, e, v))
		if !queued(ctx, rdb, name, int64(i+1)) {
			t.Fatalf("candidate %q never queued", v)
		}
	}
	want := []string{"first", "second", "third {x} 100% ünïcode"}
	ld := first
	var fence int64
	for i, v := range want {
		select {
		case got := <-obs:
			if got.Value != v || got.Token != ld.Lock().Token() || got.Fence != ld.Fence() || got.TTL <= 0 {
				t.Errorf("Observe's leader %d = %+v, want %q with token %s, fence %d", i, got, v, ld.Lock().Token(), ld.Fence())
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("Observe never reported leader %q", v)
		}
		if ld.Fence() <= fence {
			t.Errorf("term %d's fence %d, want above the last (%d)", i, ld.Fence(), fence)
		}
		fence = ld.Fence()
		if err := ld.Resign(ctx); err != nil {
			t.Errorf("Resign of %q = %v", v, err)
		}
		if i < len(waiting) {
			o := <-waiting[i]
			if o.err != nil {
				t.Fatalf("Campaign(%q) = %v, want leadership when %q resigns", want[i+1], o.err, v)
			}
			ld = o.ld
		}
	}
	select {
	case got := <-obs:
		if got != (dlock.Leader{}) {
			t.Errorf("Observe after the last resigned = %+v, want none", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Observe never reported that nobody leads")
	}
	stop()
	select {
	case _, open := <-obs:
		if open {
			t.Error("Observe delivered a value after its ctx ended")
		}
	case <-time.After(5 * time.Second):
		t.Error("Observe's channel still open 5s after its ctx ended")
	}
}

func TestElectionSuccessionOnResign(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	succession(t, rdb, "resign")
}

// A leader that dies without resigning is followed by the first candidate
// in line: when its lease runs out (a holder that stopped extending, a
// killed process) or is taken away by ForceRelease. The dead leader is told
// (Done, Err), and the new term's fence is above its.
func TestElectionSuccessionOnDeath(t *testing.T) {
	t.Parallel()
	long(t)
	s, rdb := setup(t)
	t.Run("stopped", func(t *testing.T) { successionStopped(t, rdb) })
	t.Run("killed", func(t *testing.T) { successionKilled(t, s, rdb) })
	t.Run("forced", func(t *testing.T) { successionForced(t, rdb) })
}

// successionStopped: a leader that stops extending is succeeded once its
// validity ends; Observe sees the next one, and the stopped leader's
// Resign says ErrNotHeld.
func successionStopped(t *testing.T, rdb *redis.Client) {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	dead := newElection(t, newClient(t, rdb, dlock.LeaseTTL(500*time.Millisecond), dlock.WithAutoExtend(false)), "stopped")
	e := newElection(t, newClient(t, rdb), "stopped")
	old, err := dead.Campaign(ctx, "stops extending")
	if err != nil {
		t.Fatal(err)
	}
	obs := e.Observe(ctx)
	if ld := <-obs; ld.Token != old.Lock().Token() {
		t.Errorf("Observe's first value = %+v, want the stopped leader", ld)
	}
	next := campaign(ctx, e, "next")
	o := <-next
	if o.err != nil {
		t.Fatalf("Campaign behind a leader that stopped extending = %v", o.err)
	}
	defer o.ld.Resign(ctx)
	if time.Now().Before(old.ValidUntil()) {
		t.Errorf("the next term began %v before the stopped leader's validity ended", time.Until(old.ValidUntil()))
	}
	if !closedWithin(old.Done(), time.Second) || !errors.Is(old.Err(), dlock.ErrNotHeld) {
		t.Errorf("stopped leader: Err = %v, want Done closed and ErrNotHeld", old.Err())
	}
	if o.ld.Fence() <= old.Fence() {
		t.Errorf("next term's fence %d, want above the stopped leader's %d", o.ld.Fence(), old.Fence())
	}
	for ld := range obs { // the gap (nobody leads) may be seen or not
		if ld == (dlock.Leader{}) {
			continue
		}
		if ld.Token != o.ld.Lock().Token() || ld.Fence != o.ld.Fence() {
			t.Errorf("Observe after the stopped leader = %+v, want the next one", ld)
		}
		break
	}
	if err := old.Resign(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Resign of the stopped leader = %v, want ErrNotHeld", err)
	}
}

// successionKilled: a worker process that leads is killed; the queued
// candidate leads after its TTL, with a higher fence.
func successionKilled(t *testing.T, s *redistest.Server, rdb *redis.Client) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	h := startHelper(t, s, "lead", "killed", time.Second, 0)
	if !h.waitLine("leading", 30*time.Second) { // (a process started on a loaded machine)
		t.Fatalf("the worker never led: %s", h.out.String())
	}
	e := newElection(t, newClient(t, rdb), "killed")
	was, err := e.Leader(ctx)
	if err != nil || !strings.HasPrefix(was.Value, "worker ") {
		t.Fatalf("Leader while the worker leads = %+v, %v", was, err)
	}
	next := campaign(ctx, e, "next")
	if !queued(ctx, rdb, "killed", 1) {
		t.Fatal("the candidate never queued")
	}
	h.kill()
	o := <-next
	if o.err != nil {
		t.Fatalf("Campaign behind a killed leader = %v, want leadership after its TTL", o.err)
	}
	defer o.ld.Resign(ctx)
	if o.ld.Fence() <= was.Fence {
		t.Errorf("next term's fence %d, want above the killed leader's %d", o.ld.Fence(), was.Fence)
	}
}

// successionForced: a leader forced away (ForceRelease) is told so, and the
// queued candidate leads with a higher fence.
func successionForced(t *testing.T, rdb *redis.Client) {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	c := newClient(t, rdb, dlock.LeaseTTL(time.Second))
	e := newElection(t, c, "forced")
	old, err := e.Campaign(ctx, "forced away")
	if err != nil {
		t.Fatal(err)
	}
	next := campaign(ctx, e, "next")
	if !queued(ctx, rdb, "forced", 1) {
		t.Fatal("the candidate never queued")
	}
	if ok, err := c.ForceRelease(ctx, "forced"); !ok || err != nil {
		t.Fatalf("ForceRelease = %v, %v", ok, err)
	}
	o := <-next
	if o.err != nil {
		t.Fatalf("Campaign behind a leader forced away = %v", o.err)
	}
	defer o.ld.Resign(ctx)
	if !closedWithin(old.Done(), 5*time.Second) || !errors.Is(old.Err(), dlock.ErrNotHeld) {
		t.Errorf("leader forced away: Err = %v, want Done closed and ErrNotHeld", old.Err())
	}
	if o.ld.Fence() <= old.Fence() {
		t.Errorf("next term's fence %d, want above the forced leader's %d", o.ld.Fence(), old.Fence())
	}
}

// A candidate whose ctx ends stops waiting at once, with an error that says
// so, and leaves the queue: the leader's resignation then leaves nobody
// leading, rather than a leadership handed to a candidate that is gone.
func TestElectionCampaignHonoursCtx(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	e := newElection(t, newClient(t, rdb), "ctx")
	leader, err := e.Campaign(ctx, "leader")
	if err != nil {
		t.Fatal(err)
	}
	tctx, tcancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer tcancel()
	if _, err := e.Campaign(tctx, "times out"); !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Campaign with a ctx that times out = %v, want ErrNotAcquired and DeadlineExceeded", err)
	}
	cctx, ccancel := context.WithCancel(ctx)
	got := campaign(cctx, e, "cancelled")
	if !queued(ctx, rdb, "ctx", 1) {
		t.Fatal("the candidate never queued")
	}
	ccancel()
	if o := <-got; !errors.Is(o.err, dlock.ErrNotAcquired) || !errors.Is(o.err, context.Canceled) {
		t.Errorf("Campaign cancelled while queued = %v, want ErrNotAcquired and Canceled", o.err)
	}
	if _, err := e.Campaign(ctx, "bounded", dlock.MaxWait(100*time.Millisecond)); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("Campaign with MaxWait = %v, want ErrNotAcquired", err)
	}
	if !queued(ctx, rdb, "ctx", 0) {
		t.Errorf("%d candidates left in the queue, want none", rdb.LLen(ctx, "dlock:{ctx}:q").Val())
	}
	if err := leader.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if ld, err := e.Leader(ctx); err != nil || ld != (dlock.Leader{}) {
		t.Errorf("Leader after the only leader resigned = %+v, %v; want none", ld, err)
	}
	if keys := rdb.Keys(ctx, "dlock:{ctx}:q*").Val(); len(keys) != 0 {
		t.Errorf("queue keys left: %v", keys)
	}
}

// Bad input gets an error wrapping ErrInvalid before anything is sent.
func TestElectionBadInput(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb)
	if _, err := c.Election(""); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf(`Election("") = %v, want ErrInvalid`, err)
	}
	if _, err := c.Election(strings.Repeat("x", dlock.MaxNameLen+1)); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("Election(a name too long) = %v, want ErrInvalid", err)
	}
	if _, err := newClient(t, rdb, dlock.WithReentrant(true)).Election("x"); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("Election on a reentrant Client = %v, want ErrInvalid", err)
	}
	if _, err := newRedlock(t, []redis.UniversalClient{rdb}, 0).Election("x"); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("Election over a quorum = %v, want ErrInvalid", err)
	}
	e := newElection(t, c, "bad")
	for _, tc := range []struct {
		name  string
		value string
		opts  []dlock.LockOption
	}{
		{"control character", "line\nbreak", nil},
		{"invalid UTF-8", "\xff", nil},
		{"too long", strings.Repeat("v", dlock.MaxMetaLen+1), nil},
		{"HolderMeta", "v", []dlock.LockOption{dlock.HolderMeta("other")}},
		{"short TTL", "v", []dlock.LockOption{dlock.LeaseTTL(time.Millisecond)}},
		{"nil option", "v", []dlock.LockOption{nil}},
	} {
		if ld, err := e.Campaign(ctx, tc.value, tc.opts...); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("Campaign with %s = %v, %v; want ErrInvalid", tc.name, ld, err)
		}
	}
	if n := rdb.DBSize(ctx).Val(); n != 0 {
		t.Errorf("%d keys after refused campaigns, want 0", n)
	}
	// Spaces, braces, '%' and non-ASCII text ride in the token, escaped.
	for _, v := range []string{"", "a b", "{tag}", "100%", "ünïcode ✓", strings.Repeat("é", dlock.MaxMetaLen/2)} {
		ld, err := e.Campaign(ctx, v)
		if err != nil {
			t.Errorf("Campaign(%q) = %v", v, err)
			continue
		}
		if got, err := e.Leader(ctx); err != nil || got.Value != v || ld.Value() != v {
			t.Errorf("Campaign(%q): Leader().Value = %q, %v; Value() = %q", v, got.Value, err, ld.Value())
		}
		ld.Resign(ctx)
	}
}

// A name held as a semaphore is no election, and the reverse.
func TestElectionAndSemaphoreOfOneName(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb)
	s := newSemaphore(t, c, "shared", 2)
	p, err := s.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	e := newElection(t, c, "shared")
	if _, err := e.Leader(ctx); !errors.Is(err, dlock.ErrWrongType) || prefixes(err.Error()) != 1 {
		t.Errorf("Leader of a semaphore = %v, want ErrWrongType, with one dlock: prefix", err)
	}
	if _, err := e.Campaign(ctx, "v", dlock.MaxWait(0)); !errors.Is(err, dlock.ErrWrongType) {
		t.Errorf("Campaign on a semaphore = %v, want ErrWrongType", err)
	}
	p.Release(ctx)
}

// Do leads while fn runs and resigns when it returns; a leadership lost
// while fn runs cancels fn's context, and Do reports the loss.
func TestElectionDo(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	c := newClient(t, rdb, dlock.LeaseTTL(time.Second))
	e := newElection(t, c, "do")
	err := e.Do(ctx, "worker", func(ctx context.Context, ld *dlock.Leadership) error {
		if cur, err := e.Leader(ctx); err != nil || cur.Fence != ld.Fence() || cur.Value != "worker" {
			t.Errorf("Leader inside Do = %+v, %v; want the worker with fence %d", cur, err, ld.Fence())
		}
		return nil
	})
	if err != nil {
		t.Errorf("Do = %v", err)
	}
	if ld, err := e.Leader(ctx); err != nil || ld != (dlock.Leader{}) {
		t.Errorf("Leader after Do = %+v, %v; want none", ld, err)
	}
	err = e.Do(ctx, "deposed", func(ctx context.Context, ld *dlock.Leadership) error {
		if ok, err := c.ForceRelease(ctx, "do"); !ok || err != nil {
			t.Errorf("ForceRelease = %v, %v", ok, err)
		}
		<-ctx.Done()
		return context.Cause(ctx)
	})
	if !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Do whose leadership was forced away = %v, want ErrNotHeld", err)
	}
	if err := e.Do(ctx, "bad\x00", func(context.Context, *dlock.Leadership) error { return nil }); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("Do with a bad value = %v, want ErrInvalid", err)
	}
}

// A reader of Observe that does not read while the leadership changes is
// handed the leadership as it is when it takes the next value, not a term
// that ended meanwhile: after two handovers it gets the third leader;
// after that leader resigned with nobody waiting, and a leader whose lease
// then ran out unannounced, it gets nobody.
func TestObserveSlowReaderGetsTheCurrentLeader(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a long fault/timing scenario; run without -short")
	}
	_, rdb := setup(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	e := newElection(t, newClient(t, rdb, dlock.LeaseTTL(5*time.Second)), "slow")
	a, err := e.Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	octx, stop := context.WithCancel(ctx)
	defer stop()
	obs := e.Observe(octx)
	if got := <-obs; got.Token != a.Lock().Token() {
		t.Fatalf("Observe's first value = %+v, want a", got)
	}
	next := func(what string) dlock.Leader {
		t.Helper()
		time.Sleep(400 * time.Millisecond) // the reader is slow: Observe has read the change
		select {
		case got := <-obs:
			return got
		case <-time.After(10 * time.Second):
			t.Fatalf("Observe delivered nothing within 10s %s", what)
		}
		return dlock.Leader{}
	}

	b := campaign(ctx, e, "b")
	if !queued(ctx, rdb, "slow", 1) {
		t.Fatal("b never queued")
	}
	c := campaign(ctx, e, "c")
	if !queued(ctx, rdb, "slow", 2) {
		t.Fatal("c never queued")
	}
	if err := a.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	ob := <-b
	if ob.err != nil {
		t.Fatalf("Campaign(b) = %v", ob.err)
	}
	time.Sleep(400 * time.Millisecond) // b leads for a while, unread
	if err := ob.ld.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	oc := <-c
	if oc.err != nil {
		t.Fatalf("Campaign(c) = %v", oc.err)
	}
	if got := next("after two handovers"); got.Token != oc.ld.Lock().Token() || got.Fence != oc.ld.Fence() {
		t.Errorf("a slow reader after a handed over to b and b to c got %+v, want c (token %s, fence %d), who leads now",
			got, oc.ld.Lock().Token(), oc.ld.Fence())
	}

	if err := oc.ld.Resign(ctx); err != nil { // nobody waits
		t.Fatal(err)
	}
	time.Sleep(400 * time.Millisecond)
	dies := newElection(t, newClient(t, rdb, dlock.LeaseTTL(500*time.Millisecond), dlock.WithAutoExtend(false)), "slow")
	d, err := dies.Campaign(ctx, "d")
	if err != nil {
		t.Fatal(err)
	}
	if !closedWithin(d.Done(), 5*time.Second) {
		t.Fatal("d's lease did not run out")
	}
	if got := next("after c resigned and d's lease ran out"); got != (dlock.Leader{}) {
		t.Errorf("a slow reader after c resigned and d's lease ran out got %+v, want nobody", got)
	}
	d.Resign(ctx)
}

// An election's errors speak of the campaign and the leader, not of an
// acquire and a holder, and still match their sentinels: a campaign
// refused, waited out or given up, one on a name of another kind, a Resign
// that Redis did not answer; Do's error after a lost leadership is one
// line, fn's error first and the loss, its cause, last. The texts are what
// is tested here.
func TestElectionErrorsSpeakOfCampaignAndLeader(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a long fault/timing scenario; run without -short")
	}
	_, rdb := setup(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	c := newClient(t, rdb, dlock.LeaseTTL(time.Second))
	e := newElection(t, c, "words")
	ld, err := e.Campaign(ctx, "v1")
	if err != nil {
		t.Fatal(err)
	}
	checkText := func(what string, err error, want string, sentinels ...error) {
		t.Helper()
		checkErrText(t, what, err, want, sentinels...)
	}
	_, err = e.Campaign(ctx, "v2", dlock.MaxWait(0))
	checkText("Campaign refused", err, `dlock: campaign "words": not acquired: led by another candidate, "v1"`, dlock.ErrNotAcquired)
	if na, ok := errors.AsType[*dlock.NotAcquiredError](err); !ok || na.Error() != `led by another candidate, "v1"` || na.Meta != "v1" {
		t.Errorf("Campaign refused = %v: NotAcquiredError %+v, want the leader's value, speaking of a candidate", err, na)
	}
	_, err = e.Campaign(ctx, "v2", dlock.MaxWait(50*time.Millisecond))
	checkText("Campaign waited out", err,
		`dlock: campaign "words": not acquired: waited 50ms (MaxWait); last attempt: led by another candidate, "v1"`, dlock.ErrNotAcquired)
	done, stop := context.WithCancel(ctx)
	stop()
	_, err = e.Campaign(done, "v2")
	checkText("Campaign with its context done", err, `dlock: campaign "words": not acquired: context canceled`, dlock.ErrNotAcquired, context.Canceled)
	if err := ld.Resign(ctx); err != nil {
		t.Fatal(err)
	}

	s := newSemaphore(t, c, "words-sem", 2)
	p, err := s.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, err = newElection(t, c, "words-sem").Campaign(ctx, "v", dlock.MaxWait(0))
	checkText("Campaign on a semaphore's name", err, `dlock: campaign "words-sem": lock key holds a value of another type: `+
		`the key holds a semaphore (a sorted set), or another program's value, not a leader's lease`, dlock.ErrWrongType)
	p.Release(ctx)

	electionDoLossWords(ctx, t, c, e)

	srv := redistest.Start(t)
	gone, err := newElection(t, newClient(t, srv.Client(t)), "words").Campaign(ctx, "v")
	if err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	if err := gone.Resign(ctx); err == nil || !strings.HasPrefix(err.Error(), `dlock: resign "words": `) {
		t.Errorf("Resign with Redis gone = %v, want an error of the resign", err)
	}
}

// checkErrText checks that err reads want and matches every sentinel.
func checkErrText(t *testing.T, what string, err error, want string, sentinels ...error) {
	t.Helper()
	if err == nil || err.Error() != want {
		t.Errorf("%s = %v, want the text %q", what, err, want)
	}
	for _, s := range sentinels {
		if !errors.Is(err, s) {
			t.Errorf("%s = %v, want it to match %v", what, err, s)
		}
	}
}

// electionDoLossWords: e's Do, whose leadership (of "words", on c) is
// forced away while fn runs, ends fn's context with the loss as its cause,
// and returns fn's error with the loss, on one line.
func electionDoLossWords(ctx context.Context, t *testing.T, c *dlock.Client, e *dlock.Election) {
	t.Helper()
	var loss error
	err := e.Do(ctx, "deposed", func(fctx context.Context, ld *dlock.Leadership) error {
		if ok, err := c.ForceRelease(ctx, "words"); !ok || err != nil {
			t.Errorf("ForceRelease = %v, %v", ok, err)
		}
		<-fctx.Done()
		loss = context.Cause(fctx)
		return fctx.Err()
	})
	if !strings.HasPrefix(fmt.Sprint(loss), `dlock: not held: "words": `) {
		t.Errorf("the cause of Do's context after the leadership was forced away = %v, want the loss", loss)
	}
	checkErrText(t, "Do whose leadership was forced away, fn returning its context's error", err,
		"context canceled: "+fmt.Sprint(loss), context.Canceled, dlock.ErrNotHeld)
	err = e.Do(ctx, "deposed", func(fctx context.Context, ld *dlock.Leadership) error {
		c.ForceRelease(ctx, "words")
		<-fctx.Done()
		loss = context.Cause(fctx)
		return loss
	})
	if loss == nil || err == nil || strings.Contains(err.Error(), "\n") || !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Do whose leadership was forced away, fn returning the cause %v: %q, want one line matching ErrNotHeld", loss, err)
	}
}

// TestObserveClosesWhileRedisFrozen: Observe's channel closes soon after
// its ctx ends even when Redis stopped answering (SIGSTOP) while it read.
func TestObserveClosesWhileRedisFrozen(t *testing.T) {
	t.Parallel()
	s, rdb := setup(t)
	c := newClient(t, rdb, dlock.LeaseTTL(300*time.Millisecond))
	e := newElection(t, c, "adv-obs")
	ld, err := e.Campaign(t.Context(), "a")
	if err != nil {
		t.Fatal(err)
	}
	octx, stop := context.WithCancel(t.Context())
	obs := e.Observe(octx)
	if got := <-obs; got.Value != "a" {
		t.Errorf("first value %+v, want a", got)
	}
	s.Pause()
	time.Sleep(400 * time.Millisecond) // Observe re-reads (lease due) against a frozen server
	stop()
	start := time.Now()
	closed := false
	for deadline := time.After(2 * time.Second); !closed; {
		select {
		case _, ok := <-obs:
			closed = !ok
		case <-deadline:
			t.Errorf("Observe's channel still open %v after its ctx ended, Redis frozen", time.Since(start).Round(time.Millisecond))
			closed = true
		}
	}
	s.Resume()
	ld.Resign(context.Background())
}

// TestCampaignRefusalsSayCampaign: an election's errors name a
// campaign, not an acquisition: a Campaign with an invalid lease option,
// and a Campaign after Close, as a campaign waiting across Close does.
func TestCampaignRefusalsSayCampaign(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	c := newClient(t, rdb)
	ctx := t.Context()
	e, err := c.Election("verb-closed")
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.Campaign(ctx, "v", dlock.LeaseTTL(time.Microsecond))
	if !errors.Is(err, dlock.ErrInvalid) || strings.Contains(err.Error(), "acquire") || !strings.Contains(err.Error(), "campaign") {
		t.Errorf("Campaign(LeaseTTL(1µs)) = %v; want ErrInvalid naming a campaign, not an acquire", err)
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	_, err = e.Campaign(ctx, "v")
	if !errors.Is(err, dlock.ErrClosed) || strings.Contains(err.Error(), "acquire") || !strings.Contains(err.Error(), "campaign") {
		t.Errorf("Campaign after Close = %v; want ErrClosed naming a campaign, not an acquire", err)
	}
}

// announcements collects what is published on an election's channel, from
// a subscription of the test's own (confirmed before it returns).
type announcements struct {
	ps   *redis.PubSub
	msgs chan string
}

func announced(t *testing.T, rdb *redis.Client, name string) *announcements {
	t.Helper()
	ps := rdb.Subscribe(t.Context(), "dlock:{"+name+"}:ch")
	if _, err := ps.Receive(t.Context()); err != nil {
		t.Fatal(err)
	}
	a := &announcements{ps: ps, msgs: make(chan string, 100)}
	go func() {
		defer close(a.msgs)
		for m := range ps.Channel() {
			select {
			case a.msgs <- m.Payload:
			default:
			}
		}
	}()
	t.Cleanup(func() { ps.Close() })
	return a
}

// drain returns what was announced until nothing came for quiet.
func (a *announcements) drain(quiet time.Duration) []string {
	var got []string
	for {
		select {
		case m := <-a.msgs:
			got = append(got, m)
		case <-time.After(quiet):
			return got
		}
	}
}

// A term longer than the fence window (a minute) keeps its fence counter,
// so Leader reads the leader's own fence all term long: whether the term
// began on a free name or was handed over by a resigning leader, the
// counter lives at least as long as the leader's lease.
func TestElectionLongTermKeepsItsFenceCounter(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	const name = "long-term"
	key := "dlock:{" + name + "}"
	e := newElection(t, newClient(t, rdb, dlock.LeaseTTL(5*time.Minute)), name)
	check := func(what string, ld *dlock.Leadership) {
		t.Helper()
		lease, counter := rdb.PTTL(ctx, key).Val(), rdb.PTTL(ctx, key+":fence").Val()
		if counter < lease-5*time.Second {
			t.Errorf("%s: the fence counter lives %v, the leader's lease %v: it would expire while the term lasts", what, counter, lease)
		}
		if cur, err := e.Leader(ctx); err != nil || cur.Token != ld.Lock().Token() || cur.Fence != ld.Fence() {
			t.Errorf("%s: Leader = %+v, %v; want the leader's own token and fence %d", what, cur, err, ld.Fence())
		}
	}
	first, err := e.Campaign(ctx, "first")
	if err != nil {
		t.Fatal(err)
	}
	check("a term begun on a free name", first)
	next := campaign(ctx, e, "next")
	if !queued(ctx, rdb, name, 1) {
		t.Fatal("the candidate never queued")
	}
	if err := first.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	o := <-next
	if o.err != nil {
		t.Fatal(o.err)
	}
	defer o.ld.Resign(context.WithoutCancel(ctx))
	check("a term handed over", o.ld)
}

// Resign is idempotent: a second Resign (and one after Do-style reuse of
// the Lock) reports what the first did, and changes nothing of the next
// leader's term.
func TestElectionResignTwiceLeavesTheNextTermAlone(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	const name = "twice"
	e := newElection(t, newClient(t, rdb), name)
	first, err := e.Campaign(ctx, "first")
	if err != nil {
		t.Fatal(err)
	}
	next := campaign(ctx, e, "next")
	if !queued(ctx, rdb, name, 1) {
		t.Fatal("the candidate never queued")
	}
	if err := first.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	o := <-next
	if o.err != nil {
		t.Fatal(o.err)
	}
	defer o.ld.Resign(ctx)
	if err := first.Resign(ctx); err != nil && !errors.Is(err, dlock.ErrReleased) {
		t.Errorf("second Resign = %v, want what the first returned", err)
	}
	if err := first.Lock().Release(ctx); err != nil && !errors.Is(err, dlock.ErrReleased) {
		t.Errorf("Release of a resigned leadership's Lock = %v", err)
	}
	cur, err := e.Leader(ctx)
	if err != nil || cur.Token != o.ld.Lock().Token() || cur.Fence != o.ld.Fence() {
		t.Errorf("Leader after the old leader resigned twice = %+v, %v; want the next term (fence %d)", cur, err, o.ld.Fence())
	}
	if o.ld.Err() != nil {
		t.Errorf("the next leader's Err = %v after its predecessor resigned twice", o.ld.Err())
	}
}

// go-redis re-sends a campaign whose reply was lost (the connection cut
// with the reply held). The re-sent copy finds the lease already leading:
// it must return the term's own fence, issue no second one and announce
// nothing more — whether the first copy took a free name, or queued the
// candidate behind a leader that then handed it the term.
func TestElectionReSentCampaignIssuesNoSecondFence(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a long fault/timing scenario; run without -short")
	}
	leakcheck.Check(t)                             // registered first: runs after the proxy and server are stopped
	p, rdb, direct := proxied(t, 3, 5*time.Second) // the cut, not a timeout, ends the wait
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	c := newClient(t, rdb, pipelined(false), dlock.LeaseTTL(5*time.Second))
	if warm, err := newElection(t, c, "warm").Campaign(ctx, "w"); err == nil { // the scripts are loaded
		warm.Resign(ctx)
	}

	t.Run("free", func(t *testing.T) {
		const name = "resent-free"
		a := announced(t, direct, name)
		e := newElection(t, c, name)
		var ld *dlock.Leadership
		err := stallThenCut(t, p, func() (err error) {
			ld, err = e.Campaign(ctx, "v")
			return err
		}, func() bool { return direct.Exists(ctx, "dlock:{"+name+"}").Val() == 1 })
		if err != nil {
			t.Fatalf("Campaign with its reply lost once = %v", err)
		}
		checkOneTerm(t, ctx, direct, e, ld, a.drain(300*time.Millisecond))
		ld.Resign(ctx)
	})

	t.Run("handed", func(t *testing.T) {
		const name = "resent-handed"
		a := announced(t, direct, name)
		leader, err := newElection(t, newClient(t, direct), name).Campaign(ctx, "leader")
		if err != nil {
			t.Fatal(err)
		}
		e := newElection(t, c, name)
		got := campaign(ctx, e, "candidate")
		if !queued(ctx, direct, name, 1) {
			t.Fatal("the candidate never queued")
		}
		// Queued for more than half its lease time, the candidate confirms
		// a handover with a poll (it does not trust the message alone):
		// that poll runs with its reply stalled, then is cut and re-sent.
		time.Sleep(3 * time.Second)
		p.StallReplies()
		if err := leader.Resign(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
		p.Cut()
		o := <-got
		if o.err != nil {
			t.Fatalf("Campaign = %v", o.err)
		}
		msgs := a.drain(300 * time.Millisecond)
		var mine []string
		for _, m := range msgs {
			if strings.HasPrefix(m, o.ld.Lock().Token()+" ") {
				mine = append(mine, m)
			}
		}
		checkOneTerm(t, ctx, direct, e, o.ld, mine)
		o.ld.Resign(ctx)
	})
}

// checkOneTerm checks that ld's term was announced once (msgs are the
// announcements naming it), with ld's fence, and that Leader and the fence
// counter agree.
func checkOneTerm(t *testing.T, ctx context.Context, rdb *redis.Client, e *dlock.Election, ld *dlock.Leadership, msgs []string) {
	t.Helper()
	want := ld.Lock().Token() + " " + strconv.FormatInt(ld.Fence(), 10)
	n := 0
	for _, m := range msgs {
		if strings.HasPrefix(m, ld.Lock().Token()+" ") {
			n++
			if m != want {
				t.Errorf("announced %q, want %q (the term's fence)", m, want)
			}
		}
	}
	if n != 1 {
		t.Errorf("the term was announced %d times (%q), want once", n, msgs)
	}
	if cur, err := e.Leader(ctx); err != nil || cur.Token != ld.Lock().Token() || cur.Fence != ld.Fence() {
		t.Errorf("Leader = %+v, %v; want the term's token and fence %d", cur, err, ld.Fence())
	}
	if f, _ := rdb.Get(ctx, "dlock:{"+e.Name()+"}:fence").Int64(); f != ld.Fence() {
		t.Errorf("fence counter = %d, want the term's %d (a second fence was issued)", f, ld.Fence())
	}
}

// A campaign request delayed in the network past its caller's give-up
// lands after the caller undid it (the undo went straight through): it
// must take nothing for nobody — no term, no fence, no announcement, no
// queue entry — whether the name was free or led by another. With
// go-redis's retries on, the re-sent copy leads at once on a free name;
// the delayed original, landing after the Resign, must not lead again.
func TestElectionDelayedCampaignTakesNothing(t *testing.T) {
	// Serial: a request held in the proxy must cross into it within 100ms, and the caller's give-up beat its 300ms read timeout; a busy machine outlasts them.
	if testing.Short() {
		t.Skip("a long fault/timing scenario; run without -short")
	}
	for _, retries := range []int{-1, 3} {
		for _, led := range []bool{false, true} {
			t.Run(fmt.Sprintf("retries=%d/led=%v", retries, led), func(t *testing.T) {
				leakcheck.Check(t)
				p, rdb, direct := proxied(t, retries, 300*time.Millisecond)
				ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
				defer cancel()
				name := fmt.Sprintf("delayed-%d-%v", retries, led)
				key := "dlock:{" + name + "}"
				c := newClient(t, rdb, dlock.LeaseTTL(5*time.Second), pipelined(false))
				if warm, err := newElection(t, c, name+"-warm").Campaign(ctx, "w"); err == nil { // the scripts are loaded
					warm.Resign(ctx)
				}
				var leader *dlock.Leadership
				if led {
					var err error
					if leader, err = newElection(t, newClient(t, direct), name).Campaign(ctx, "leader"); err != nil {
						t.Fatal(err)
					}
				}
				a := announced(t, direct, name)
				e := newElection(t, c, name)
				// A campaign that waits gives up at 500ms; one that goes
				// on through go-redis's re-sent copy (a new connection's
				// dial, handshake and round trip after the 300ms read
				// timeout) has until shortly before the original lands.
				wait := 500 * time.Millisecond
				if retries > 0 && !led {
					wait = 900 * time.Millisecond
				}
				d := delayThenLetThrough(p, rdb)
				cctx, ccancel := context.WithTimeout(ctx, wait)
				ld, err := e.Campaign(cctx, "late")
				ccancel()
				<-d.done
				switch {
				case (retries < 0 || led) && err == nil:
					t.Errorf("Campaign through a 1s delay with a 300ms read timeout = nil error, want it to fail")
				case retries > 0 && !led && err != nil:
					t.Errorf("Campaign = %v, want the re-sent copy's term", err)
				}
				var own string
				if ld != nil {
					own = ld.Lock().Token()
					if err := ld.Resign(ctx); err != nil {
						t.Errorf("Resign = %v", err)
					}
				}
				time.Sleep(time.Until(d.landed())) // the delayed original has landed
				if leader != nil {
					if err := leader.Resign(ctx); err != nil {
						t.Errorf("the leader's Resign = %v", err)
					}
				}
				if cur, err := e.Leader(ctx); err != nil || cur != (dlock.Leader{}) {
					t.Errorf("Leader after every term ended = %+v, %v; want none (a term for nobody)", cur, err)
				}
				if n := liveKeys(ctx, direct, key, key+":q", key+":qw"); n != 0 {
					t.Errorf("keys left: lock %q, queue %v %v", direct.Get(ctx, key).Val(),
						direct.LRange(ctx, key+":q", 0, -1).Val(), direct.HGetAll(ctx, key+":qw").Val())
				}
				for _, m := range a.drain(300 * time.Millisecond) {
					if m != "*" && (own == "" || !strings.HasPrefix(m, own+" ")) {
						t.Errorf("announced %q: a term of a campaign that gave up", m)
					}
				}
			})
		}
	}
}

// candidateHelper is the body of a worker process in mode "candidate": it
// campaigns once in the election DLOCK_NAME, prints "leading <fence>" when
// it leads, and resigns.
func candidateHelper(ctx context.Context, c *dlock.Client, name string) int {
	e, err := c.Election(name)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ld, err := e.Campaign(ctx, "paused")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("leading", ld.Fence())
	if err := ld.Resign(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// A candidate stopped (SIGSTOP) while it waits is handed the term; its
// lease runs out while it is stopped and the next candidate leads. When it
// resumes, the handover message (with the lost term's fence) is waiting
// for it: it must not lead on it while the next candidate does, and the
// term it leads later has a fence above the next candidate's.
func TestElectionPausedCandidateDoesNotLeadOnALostTerm(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a long fault/timing scenario; run without -short")
	}
	s, rdb := setup(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	const name = "paused"
	a := announced(t, rdb, name)
	e := newElection(t, newClient(t, rdb), name)
	first, err := e.Campaign(ctx, "first")
	if err != nil {
		t.Fatal(err)
	}
	h := startHelper(t, s, "candidate", name, time.Second, 0)
	if !queued(ctx, rdb, name, 1) {
		t.Fatalf("the worker never queued: %s", h.out.String())
	}
	next := campaign(ctx, e, "next")
	if !queued(ctx, rdb, name, 2) {
		t.Fatal("the next candidate never queued")
	}
	h.stop(t)
	if err := first.Resign(ctx); err != nil { // hands the term to the stopped worker
		t.Fatal(err)
	}
	o := <-next // the worker's lease ran out: the next candidate leads
	if o.err != nil {
		t.Fatal(o.err)
	}
	lost := a.drain(200 * time.Millisecond)
	if err := h.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if !queued(ctx, rdb, name, 1) { // the worker found the term gone and queued again
		t.Fatalf("the resumed worker never queued again: %s", h.out.String())
	}
	select {
	case l := <-h.lines:
		t.Errorf("the resumed worker printed %q while the next candidate leads (announced before: %q)", l, lost)
	default:
	}
	if cur, err := e.Leader(ctx); err != nil || cur.Token != o.ld.Lock().Token() || cur.Fence != o.ld.Fence() {
		t.Errorf("Leader = %+v, %v; want the next candidate, fence %d", cur, err, o.ld.Fence())
	}
	if err := o.ld.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-h.lines:
		var f int64
		if _, err := fmt.Sscanf(l, "leading %d", &f); err != nil || f <= o.ld.Fence() {
			t.Errorf("the worker's later term: %q, want a fence above the next candidate's %d", l, o.ld.Fence())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("the worker never led after the next candidate resigned: %s", h.out.String())
	}
	if err := h.wait(20 * time.Second); err != nil {
		t.Error(err)
	}
}

// Other kinds of lock on an election's name while a leader leads. The
// README says "a lock or semaphore of the same name is refused
// (ErrWrongType)": a semaphore and a reentrant lock are (ErrWrongType),
// but a plain lock is refused as any taken lock is (ErrNotAcquired, not
// ErrWrongType), and a fair lock's Acquire waits in the candidates' line
// and is handed the name by the resigning leader, with a fence above the
// leader's: Leader then refuses the name as a lock's (ErrWrongType), not
// a leader's.
func TestElectionOtherKindsOnTheLeadersName(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	const name = "mixed"
	e := newElection(t, newClient(t, rdb), name)
	leader, err := e.Campaign(ctx, "leader")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := newClient(t, rdb, dlock.WithUnfair(nil)).TryAcquire(ctx, name); !errors.Is(err, dlock.ErrNotAcquired) || errors.Is(err, dlock.ErrWrongType) {
		t.Errorf("plain TryAcquire on a led name = %v, want ErrNotAcquired (the README says ErrWrongType)", err)
	}
	if _, err := asOwner(t, newClient(t, rdb, dlock.WithReentrant(true)), "o").TryAcquire(ctx, name); !errors.Is(err, dlock.ErrWrongType) {
		t.Errorf("reentrant TryAcquire on a led name = %v, want ErrWrongType", err)
	}
	if _, err := newSemaphore(t, newClient(t, rdb), name, 2).TryAcquire(ctx); !errors.Is(err, dlock.ErrWrongType) {
		t.Errorf("semaphore TryAcquire on a led name = %v, want ErrWrongType", err)
	}
	fair := newClient(t, rdb, dlock.HolderMeta("a fair lock"))
	got := make(chan *dlock.Lock, 1)
	go func() {
		l, err := fair.Acquire(ctx, name)
		if err != nil {
			t.Errorf("fair Acquire behind the leader = %v", err)
		}
		got <- l
	}()
	if !queued(ctx, rdb, name, 1) {
		t.Fatal("the fair lock never queued")
	}
	if err := leader.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	l := <-got
	if l == nil {
		return
	}
	defer l.Release(ctx)
	if f := fenceOf(t, l); f <= leader.Fence() {
		t.Errorf("fence of the fair lock handed the name = %d; want above the leader's %d", f, leader.Fence())
	}
	if cur, err := e.Leader(ctx); !errors.Is(err, dlock.ErrWrongType) {
		t.Errorf("Leader while a fair lock holds the name = %+v, %v; want ErrWrongType", cur, err)
	}
}

// resignSeen checks on c that a leader resigning with nobody in line
// announces it: Observe reports that nobody leads at once, long before
// its re-read at the lease time (30s) would.
func resignSeen(t *testing.T, c *dlock.Client, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	e := newElection(t, c, name)
	obs := e.Observe(ctx)
	if ld := <-obs; ld != (dlock.Leader{}) {
		t.Fatalf("Observe's first value before any campaign = %+v, want none", ld)
	}
	ld, err := e.Campaign(ctx, "alone")
	if err != nil {
		t.Fatalf("Campaign = %v", err)
	}
	select {
	case got := <-obs:
		if got.Value != "alone" {
			t.Fatalf("Observe's leader = %+v, want %q", got, "alone")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Observe did not report the leader within 5s")
	}
	if err := ld.Resign(ctx); err != nil {
		t.Fatalf("Resign = %v", err)
	}
	select {
	case got := <-obs:
		if got != (dlock.Leader{}) {
			t.Errorf("Observe after the lone leader resigned = %+v, want none", got)
		}
	case <-time.After(5 * time.Second):
		t.Error("Observe did not report within 5s that the lone leader resigned: the release was not announced")
	}
}

func TestElectionLoneLeadersResignationIsAnnounced(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	resignSeen(t, newClient(t, rdb, dlock.LeaseTTL(30*time.Second)), "resign-alone")
}

// The same on a Cluster, announced with SPUBLISH on the name's shard,
// through go-redis and through a driver.
func TestElectionLoneLeadersResignationIsAnnouncedOnACluster(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds a Cluster")
	}
	var addrs []string
	for _, n := range redistest.StartCluster(t, 3, 0) {
		addrs = append(addrs, n.Addr())
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { cc.Close() })
	ttl := dlock.LeaseTTL(30 * time.Second)
	resignSeen(t, newClient(t, cc, ttl), "resign-alone-a")
	c, err := dlock.NewFrom(goredisdriver.Conn(cc), ttl)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	resignSeen(t, c, "resign-alone-b")
}

// Observe's channel is closed once its Client is closed, though its ctx
// lives on, and its reads end with it: Close waits for them.
func TestObserveEndsWhenTheClientCloses(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	c, err := dlock.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	e, err := c.Election("observe-close")
	if err != nil {
		t.Fatal(err)
	}
	obs := e.Observe(context.Background()) // (a ctx that never ends)
	if ld := <-obs; ld != (dlock.Leader{}) {
		t.Fatalf("Observe's first value = %+v, want none", ld)
	}
	if err := c.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	select {
	case ld, open := <-obs:
		if open {
			t.Errorf("Observe sent %+v after Close, want its channel closed", ld)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Observe's channel still open 5s after its Client was closed")
	}
}

// Close cuts an Observe's read under way: against a Redis that does not
// answer, through a client with no read timeout, Close returns as soon as
// the read is cut, not when its own ctx ends.
func TestCloseCutsAnObserveReadUnderWay(t *testing.T) {
	t.Parallel()
	p, rdb, _ := proxied(t, 0, -1) // (no read timeout: a stalled read waits for ever)
	c, err := dlock.New(rdb, dlock.LeaseTTL(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	e, err := c.Election("observe-stalled")
	if err != nil {
		t.Fatal(err)
	}
	obs := e.Observe(context.Background())
	<-obs // (the first read answered)
	p.Stall()
	// With no leader, Observe reads again a lease time later: its read is held.
	if !waitFor(10*time.Second, func() bool { return p.RequestsSinceStall() > 0 }) {
		t.Fatal("Observe sent no read in 10s")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := c.Close(ctx); err != nil {
		t.Errorf("Close with an Observe read held by a stalled Redis = %v, want nil (the read cut)", err)
	}
	p.Cut() // (ends the read if Close did not: the test then ends)
	select {
	case _, open := <-obs:
		if open {
			t.Error("Observe sent a value after Close, want its channel closed")
		}
	case <-time.After(10 * time.Second):
		t.Error("Observe's channel still open 10s after Close")
	}
}
