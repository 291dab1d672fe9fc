package dlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/redistest"
)

// takeFunc takes one lease of a kind on c, optionally resuming a token.
type takeFunc func(ctx context.Context, c *dlock.Client, opts ...dlock.LockOption) (*dlock.Lock, error)

// releaseArgKinds are the kinds whose release scripts take fewer arguments
// on a clean lease's path: each must still mark a resumed lease and refuse
// the superseded Lock's release.
func releaseArgKinds() []releaseArgKind {
	sem := func(n int) takeFunc {
		return func(ctx context.Context, c *dlock.Client, opts ...dlock.LockOption) (*dlock.Lock, error) {
			s, err := c.Semaphore("ra-sem", 4)
			if err != nil {
				return nil, err
			}
			return s.AcquireN(ctx, n, opts...)
		}
	}
	rw := func(write bool) takeFunc {
		return func(ctx context.Context, c *dlock.Client, opts ...dlock.LockOption) (*dlock.Lock, error) {
			m, err := c.RWMutex("ra-rw")
			if err != nil {
				return nil, err
			}
			if write {
				return m.Writer().Acquire(ctx, opts...)
			}
			return m.Reader().Acquire(ctx, opts...)
		}
	}
	plain := func(ctx context.Context, c *dlock.Client, opts ...dlock.LockOption) (*dlock.Lock, error) {
		return c.Acquire(ctx, "ra-lock", opts...)
	}
	return []releaseArgKind{
		{"fair lock", nil, plain, plain},
		{"unfair lock", []dlock.Option{dlock.WithUnfair(nil)}, plain, plain},
		{"one permit", nil, sem(1), sem(4)},
		{"three permits", nil, sem(3), sem(4)},
		{"read", nil, rw(false), rw(true)},
		{"write", nil, rw(true), rw(true)},
	}
}

// releaseArgKind is a kind of lease: take takes one, full takes what keeps
// another take waiting (the semaphore's 4 permits, a write).
type releaseArgKind struct {
	name       string
	opts       []dlock.Option
	take, full takeFunc
}

// takeInBackground runs take until it returns and sends when it took the
// lease (zero and the error if it did not), releasing it; the test waits
// for it to end.
func takeInBackground(t *testing.T, take func(context.Context) (*dlock.Lock, error)) <-chan tookAt {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	got := make(chan tookAt, 1)
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		l, err := take(ctx)
		if err != nil {
			got <- tookAt{err: err}
			return
		}
		got <- tookAt{at: time.Now()}
		l.Release(context.Background())
	}()
	return got
}

type tookAt struct {
	at  time.Time
	err error
}

// releaseSupersededThenResumed releases l0, a Lock that r resumed, then r:
// l0's is refused and r's ends the lease with its marker "1" on each of
// nodes; a repeat of r's is nil.
func releaseSupersededThenResumed(t *testing.T, l0, r *dlock.Lock, nodes ...redis.UniversalClient) {
	t.Helper()
	ctx := t.Context()
	if err := l0.Release(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("the superseded Lock's Release = %v, want ErrNotHeld", err)
	}
	if err := r.Release(ctx); err != nil {
		t.Fatalf("the resumed Lock's Release after the superseded one's = %v, want nil (the lease was still its)", err)
	}
	for i, n := range nodes {
		if v := n.Get(ctx, r.Key()+":r:"+r.Token()).Val(); v != "1" {
			t.Errorf("node %d: the resumed lease's marker after its release = %q, want \"1\"", i, v)
		}
	}
	if err := r.Release(ctx); err != nil {
		t.Errorf("a repeated Release = %v, want nil", err)
	}
}

// A clean Lock superseded by a Resume: its release is refused (the resumed
// lease stays), and the resumed Lock's release ends the lease with its
// marker "1", so a late copy of one of its requests is refused.
func TestSupersededCleanReleaseRefusedResumedReleaseMarksEveryKind(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	for _, k := range releaseArgKinds() {
		t.Run(k.name, func(t *testing.T) {
			opts := append([]dlock.Option{dlock.LeaseTTL(5 * time.Second), dlock.WithAutoExtend(false)}, k.opts...)
			old, next := newClient(t, rdb, opts...), newClient(t, rdb, opts...)
			l0, err := k.take(ctx, old)
			if err != nil {
				t.Fatal(err)
			}
			r, err := k.take(ctx, next, dlock.Resume(l0.Token()))
			if err != nil {
				t.Fatal(err)
			}
			releaseSupersededThenResumed(t, l0, r, rdb)
		})
	}
}

// A waiter that gives up leaves no queue entry behind, whatever its hold's
// member (a permit's token, "<token> 2"…, "r:<token>", "w:<token>"): the
// hold's release derives the queue's token from its member.
func TestGivenUpWaiterLeavesNoQueueEntryEveryKind(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	for _, k := range releaseArgKinds() {
		if k.name == "unfair lock" {
			continue // (its waiters poll: no queue)
		}
		t.Run(k.name, func(t *testing.T) {
			c := newClient(t, rdb, append([]dlock.Option{dlock.LeaseTTL(5 * time.Second)}, k.opts...)...)
			blocker, err := k.full(ctx, c)
			if err != nil {
				t.Fatal(err)
			}
			defer blocker.Release(ctx)
			wctx, cancel := context.WithCancel(ctx)
			defer cancel()
			got := takeInBackground(t, func(context.Context) (*dlock.Lock, error) { return k.take(wctx, c) })
			q := blocker.Key() + ":q"
			if !waitFor(5*time.Second, func() bool { return rdb.LLen(ctx, q).Val() == 1 }) {
				t.Fatalf("the waiter never queued: queue %v", rdb.LRange(ctx, q, 0, -1).Val())
			}
			cancel()
			if r := <-got; r.err == nil {
				t.Fatal("the waiter took the hold while it was full")
			}
			if n, h := rdb.LLen(ctx, q).Val(), rdb.HLen(ctx, blocker.Key()+":qw").Val(); n != 0 || h != 0 {
				t.Errorf("after the waiter gave up: %d queue entries, %d waiters' fields; want none", n, h)
			}
		})
	}
}

// A fair TryAcquire of a taken lock never queues; a waiter's Acquire does.
func TestFairTryNeverQueuesWaiterDoes(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.LeaseTTL(5*time.Second))
	l, err := c.TryAcquire(ctx, "ra-try")
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := c.TryAcquire(ctx, "ra-try"); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatalf("TryAcquire of a taken lock = %v, want ErrNotAcquired", err)
		}
	}
	if n := rdb.LLen(ctx, l.Key()+":q").Val() + rdb.HLen(ctx, l.Key()+":qw").Val(); n != 0 {
		t.Errorf("after three refused tries the queue holds %d entries, want none", n)
	}
	got := takeInBackground(t, func(ctx context.Context) (*dlock.Lock, error) { return c.Acquire(ctx, "ra-try") })
	if !waitFor(5*time.Second, func() bool { return rdb.LLen(ctx, l.Key()+":q").Val() == 1 }) {
		t.Fatal("the waiter never queued")
	}
	start := time.Now()
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if r := <-got; r.err != nil {
		t.Errorf("the waiter = %v", r.err)
	} else if d := r.at.Sub(start); d > time.Second {
		t.Errorf("the waiter took the lock %v after the release, want at once (handed over)", d)
	}
}

// On a Cluster a release announces with SPUBLISH on the name's shard, on
// its clean path and on a resumed (marked) lease's: a fair lock's, a
// permit's, a write's waiter takes over at once, not at its next poll.
func TestClusterReleaseWakesQueuedWaiterEveryKind(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds a Redis Cluster")
	}
	_, cc := startCluster(t)
	ctx := t.Context()
	for _, k := range releaseArgKinds() {
		if k.name == "unfair lock" || k.name == "read" {
			continue // (TestUnfairWakeOnCluster; a read does not keep a read out)
		}
		for _, resume := range []bool{false, true} {
			opts := append([]dlock.Option{dlock.LeaseTTL(30 * time.Second), dlock.WithAutoExtend(false)}, k.opts...)
			hc, wc := newClient(t, cc, opts...), newClient(t, cc, opts...)
			h, err := k.full(ctx, hc)
			if err == nil && resume { // a marked lease
				h, err = k.full(ctx, hc, dlock.Resume(h.Token()))
			}
			if err != nil {
				t.Fatal(err)
			}
			got := takeInBackground(t, func(ctx context.Context) (*dlock.Lock, error) { return k.take(ctx, wc) })
			if !waitFor(5*time.Second, func() bool { return cc.LLen(ctx, h.Key()+":q").Val() == 1 }) {
				t.Fatalf("%s resume=%v: the waiter never queued", k.name, resume)
			}
			start := time.Now()
			if err := h.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if r := <-got; r.err != nil {
				t.Errorf("%s resume=%v: the waiter = %v", k.name, resume, r.err)
			} else if d := r.at.Sub(start); d > time.Second {
				t.Errorf("%s resume=%v: the waiter took over %v after the release: not woken by it", k.name, resume, d)
			}
		}
	}
	// An unfair holder's clean release, a fair waiter queued behind it
	// (acquire_fair.lua set the wake key): announced with SPUBLISH too.
	hc := newClient(t, cc, dlock.WithUnfair(nil), dlock.LeaseTTL(30*time.Second), dlock.WithAutoExtend(false))
	wc := newClient(t, cc, dlock.LeaseTTL(30*time.Second))
	h, err := hc.TryAcquire(ctx, "ra-mixed")
	if err != nil {
		t.Fatal(err)
	}
	got := takeInBackground(t, func(ctx context.Context) (*dlock.Lock, error) { return wc.Acquire(ctx, "ra-mixed") })
	if !waitFor(5*time.Second, func() bool { return cc.Exists(ctx, h.Key()+":w").Val() == 1 }) {
		t.Fatal("the fair waiter set no wake key")
	}
	start := time.Now()
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if r := <-got; r.err != nil {
		t.Errorf("the fair waiter behind an unfair holder = %v", r.err)
	} else if d := r.at.Sub(start); d > time.Second {
		t.Errorf("the fair waiter took over %v after the unfair holder's release: not woken by it", d)
	}
}

// The same across the modes: a lease taken in one mode and resumed in
// another (script-free, fair, unfair), and over a quorum.
func TestSupersededCleanReleaseRefusedAcrossModes(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	var nodes []redis.UniversalClient
	for range 3 {
		nodes = append(nodes, redistest.Start(t).Client(t))
	}
	rdb := nodes[0]
	base := []dlock.Option{dlock.LeaseTTL(5 * time.Second), dlock.WithAutoExtend(false)}
	free := append([]dlock.Option{dlock.WithoutScripts()}, base...)
	unfair := append([]dlock.Option{dlock.WithUnfair(nil)}, base...)
	for _, tc := range []struct {
		name      string
		old, next func() *dlock.Client
	}{
		{"fair resumed script-free", func() *dlock.Client { return newClient(t, rdb, base...) }, func() *dlock.Client { return newClient(t, rdb, free...) }},
		{"script-free resumed fair", func() *dlock.Client { return newClient(t, rdb, free...) }, func() *dlock.Client { return newClient(t, rdb, base...) }},
		{"script-free resumed script-free", func() *dlock.Client { return newClient(t, rdb, free...) }, func() *dlock.Client { return newClient(t, rdb, free...) }},
		{"unfair resumed script-free", func() *dlock.Client { return newClient(t, rdb, unfair...) }, func() *dlock.Client { return newClient(t, rdb, free...) }},
		{"script-free resumed unfair", func() *dlock.Client { return newClient(t, rdb, free...) }, func() *dlock.Client { return newClient(t, rdb, unfair...) }},
		{"quorum", func() *dlock.Client { return newRedlock(t, nodes, time.Second, base...) }, func() *dlock.Client { return newRedlock(t, nodes, time.Second, base...) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := "ra-" + strings.ReplaceAll(tc.name, " ", "-")
			l0, err := tc.old().Acquire(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			r, err := tc.next().Acquire(ctx, name, dlock.Resume(l0.Token()))
			if err != nil {
				t.Fatal(err)
			}
			if tc.name == "quorum" {
				releaseSupersededThenResumed(t, l0, r, nodes...)
			} else {
				releaseSupersededThenResumed(t, l0, r, rdb)
			}
		})
	}
}
