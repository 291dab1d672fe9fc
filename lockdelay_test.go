package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/redistest"
)

// Tests of LockDelay: after an end its holder did not make, the name stays
// taken for the delay; a Release or a ForceRelease frees it at once.

// delayCase is one kind on one deployment: holder takes the lease through
// proxies that stall tells to hold every byte; next, on direct
// connections, takes the name after it (a write after a read).
type delayCase struct {
	name    string
	holder  func(t *testing.T, name string, opts ...dlock.Option) *dlock.Lock
	next    func(ctx context.Context, name string, try bool) (*dlock.Lock, error)
	stall   func()
	inspect *dlock.Client // on direct connections, with the cases' LockDelay
}

// delayCases returns every kind on a single node (a Client's own lock fair,
// unfair and reentrant, a semaphore's permit, a read and a write hold, a
// leadership), a Client's own lock over a quorum of three and without
// scripts; holders get opts besides ttl, inspect gets delay.
func delayCases(t *testing.T, ttl, delay time.Duration) []delayCase {
	t.Helper()
	var cases []delayCase
	single := func(name string, holderOpt, nextOpt dlock.Option, kind, nextKind string) {
		p, rdb, direct := proxied(t, -1, 0)
		take, nextTake := kindTake(kind), kindTake(nextKind)
		nc := asOwner(t, newClient(t, direct, nextOpt), "owner-b")
		cases = append(cases, delayCase{
			name: name,
			holder: func(t *testing.T, n string, opts ...dlock.Option) *dlock.Lock {
				c := asOwner(t, newClient(t, rdb, append([]dlock.Option{holderOpt, pipelined(false), dlock.LeaseTTL(ttl)}, opts...)...), "owner-a")
				l, err := take(t.Context(), c, n, true)
				if err != nil {
					t.Fatalf("%s: taking %q = %v", name, n, err)
				}
				return l
			},
			next:    func(ctx context.Context, n string, try bool) (*dlock.Lock, error) { return nextTake(ctx, nc, n, try) },
			stall:   p.Stall,
			inspect: newClient(t, direct, nextOpt, dlock.LockDelay(delay)),
		})
	}
	single("own-unfair", waiting(false), waiting(false), "own", "own")
	single("own-fair", waiting(true), waiting(true), "own", "own")
	single("reentrant", dlock.WithReentrant(true), dlock.WithReentrant(true), "own", "own")
	single("semaphore", waiting(true), waiting(true), "semaphore", "semaphore")
	single("read", waiting(true), waiting(true), "read", "write")
	single("write", waiting(true), waiting(true), "write", "write")
	single("election", waiting(true), waiting(true), "election", "election")

	ps, via, direct := proxiedQuorum(t, 3)
	var nodes []redis.UniversalClient
	for _, d := range direct {
		nodes = append(nodes, d)
	}
	qnext := newRedlock(t, nodes, 400*time.Millisecond)
	cases = append(cases, delayCase{
		name: "quorum",
		holder: func(t *testing.T, n string, opts ...dlock.Option) *dlock.Lock {
			c := newRedlock(t, via, 400*time.Millisecond, append([]dlock.Option{dlock.LeaseTTL(ttl)}, opts...)...)
			l, err := c.TryAcquire(t.Context(), n)
			if err != nil {
				t.Fatalf("quorum: taking %q = %v", n, err)
			}
			return l
		},
		next: func(ctx context.Context, n string, try bool) (*dlock.Lock, error) {
			return kindTake("own")(ctx, qnext, n, try)
		},
		stall: func() {
			for _, p := range ps {
				p.Stall()
			}
		},
		inspect: newRedlock(t, nodes, 400*time.Millisecond, dlock.LockDelay(delay)),
	})

	np, nrdb, ndirect := proxiedNoScript(t, -1, 0)
	nnext := newClient(t, ndirect, dlock.WithoutScripts())
	cases = append(cases, delayCase{
		name: "no-scripts",
		holder: func(t *testing.T, n string, opts ...dlock.Option) *dlock.Lock {
			c := newClient(t, nrdb, append([]dlock.Option{dlock.WithoutScripts(), pipelined(false), dlock.LeaseTTL(ttl)}, opts...)...)
			l, err := c.TryAcquire(t.Context(), n)
			if err != nil {
				t.Fatalf("no-scripts: taking %q = %v", n, err)
			}
			return l
		},
		next: func(ctx context.Context, n string, try bool) (*dlock.Lock, error) {
			return kindTake("own")(ctx, nnext, n, try)
		},
		stall:   np.Stall,
		inspect: newClient(t, ndirect, dlock.WithoutScripts(), dlock.LockDelay(delay)),
	})
	return cases
}

// kindTake returns everyKind's way to take a lease of the kind named kind.
func kindTake(kind string) func(ctx context.Context, c *dlock.Client, name string, try bool) (*dlock.Lock, error) {
	for _, k := range everyKind() {
		if k.name == kind {
			return func(ctx context.Context, c *dlock.Client, name string, try bool) (*dlock.Lock, error) {
				return k.take(ctx, c, name, try)
			}
		}
	}
	panic("no kind " + kind)
}

// A holder cut off from Redis (its watchdog's extensions stalled) loses
// its lease at its validity; on every kind and deployment, nobody takes
// the name until the lock-delay after that, as Redis keeps the lease.
func TestLapsedLeaseKeepsNameForLockDelay(t *testing.T) {
	// Not parallel: it starts processes and servers for nine cases at once,
	// which crowd a two-core machine's other tests.
	const ttl, delay = time.Second, 2 * time.Second
	for _, tc := range delayCases(t, ttl, delay) {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l := tc.holder(t, "lapsed", dlock.LockDelay(delay))
			tc.stall()
			if !closedWithin(l.Done(), 10*time.Second) {
				t.Fatal("the holder cut off from Redis still held its lease after 10s")
			}
			ended := l.ValidUntil()
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			next, err := tc.next(ctx, "lapsed", false)
			got := time.Now()
			if err != nil {
				t.Fatalf("Acquire after the holder's lease lapsed = %v, want the lock", err)
			}
			defer next.Release(ctx)
			// Redis keeps the lease at least the delay past the holder's
			// validity (a few ms: its clock counts whole ms).
			if early := ended.Add(delay - 10*time.Millisecond); got.Before(early) {
				t.Errorf("next holder got the name %v after the lapsed holder's validity ended, want at least the lock-delay %v",
					got.Sub(ended).Round(time.Millisecond), delay)
			}
			t.Logf("next holder %v after the lapsed holder's validity (TTL %v, lock-delay %v)", got.Sub(ended).Round(time.Millisecond), ttl, delay)
		})
	}
}

// A Release frees the name at once, lock-delay or not, on every kind and
// deployment; a live holder's name is not shown in lock-delay.
func TestReleaseFreesNameDespiteLockDelay(t *testing.T) {
	t.Parallel()
	for _, tc := range delayCases(t, 2*time.Second, time.Minute) {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l := tc.holder(t, "released", dlock.LockDelay(time.Minute))
			if info, err := tc.inspect.Inspect(t.Context(), "released"); err != nil || !info.Held || info.InDelay {
				t.Errorf("Inspect(released) of a live holder = %+v, %v; want held, not in lock-delay", info, err)
			}
			if err := l.Release(t.Context()); err != nil {
				t.Fatalf("Release = %v", err)
			}
			next, err := tc.next(t.Context(), "released", true)
			if err != nil {
				t.Fatalf("TryAcquire right after a Release, with a lock-delay of 1m = %v, want the lock", err)
			}
			next.Release(t.Context())
		})
	}
}

// A lapsed lease shows in Inspect as in lock-delay, still held, until a
// ForceRelease frees the name at once.
func TestForceReleaseEndsLockDelay(t *testing.T) {
	t.Parallel()
	for _, tc := range delayCases(t, time.Second, time.Minute) {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			l := tc.holder(t, "forced", dlock.LockDelay(time.Minute))
			tc.stall()
			if !closedWithin(l.Done(), 10*time.Second) {
				t.Fatal("the holder cut off from Redis still held its lease after 10s")
			}
			var info dlock.Info
			if !waitFor(10*time.Second, func() bool {
				info, _ = tc.inspect.Inspect(ctx, "forced")
				return info.InDelay
			}) {
				t.Fatalf("Inspect(forced) after the holder's lease lapsed = %+v, want InDelay", info)
			}
			if !info.Held {
				t.Errorf("Inspect(forced) in lock-delay: Held = false, want true")
			}
			if next, err := tc.next(ctx, "forced", true); !errors.Is(err, dlock.ErrNotAcquired) {
				t.Errorf("TryAcquire in lock-delay = %v, want ErrNotAcquired", err)
				if next != nil {
					next.Release(ctx)
				}
			}
			if _, err := tc.inspect.ForceRelease(ctx, "forced"); err != nil {
				t.Fatalf("ForceRelease = %v", err)
			}
			next, err := tc.next(ctx, "forced", true)
			if err != nil {
				t.Fatalf("TryAcquire right after ForceRelease in lock-delay = %v, want the lock", err)
			}
			next.Release(ctx)
		})
	}
}

// A lease ended at its max hold is not released when it has a lock-delay:
// the holder's work may still run past the cap, so the name stays taken.
func TestMaxHoldCapLeavesNameInLockDelay(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.LockDelay(time.Minute))
	l, err := c.TryAcquire(ctx, "capped", dlock.MaxHold(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if !closedWithin(l.Done(), 10*time.Second) || !errors.Is(l.Err(), dlock.ErrMaxHold) {
		t.Fatalf("at the max hold: Err() = %v, want ErrMaxHold", l.Err())
	}
	var info dlock.Info
	if !waitFor(10*time.Second, func() bool {
		info, _ = c.Inspect(ctx, "capped")
		return info.InDelay
	}) {
		t.Fatalf("Inspect(capped) after the max hold = %+v, want InDelay", info)
	}
	if next, err := c.TryAcquire(ctx, "capped"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("TryAcquire after the max hold, in lock-delay = %v, want ErrNotAcquired", err)
		if next != nil {
			next.Release(ctx)
		}
	}
	if err := l.Release(ctx); !errors.Is(err, dlock.ErrMaxHold) {
		t.Errorf("Release after the max hold = %v, want ErrMaxHold", err)
	}
	if next, err := c.TryAcquire(ctx, "capped"); err != nil {
		t.Errorf("TryAcquire after the holder's Release = %v, want the lock", err)
	} else {
		next.Release(ctx)
	}
}

// A fair waiter handed the lock after waiting longer than its TTL, with a
// lock-delay longer still, gets a lease it can use: its validity counts
// the TTL, not the lease time Redis was asked for.
func TestFairHandoverAfterLongWaitIsValidWithLockDelay(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	const ttl = 500 * time.Millisecond
	holder := newClient(t, rdb, dlock.LeaseTTL(ttl), dlock.LockDelay(10*ttl))
	waiter := newClient(t, rdb, dlock.LeaseTTL(ttl), dlock.LockDelay(10*ttl))
	h, err := holder.TryAcquire(ctx, "handed")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *dlock.Lock, 1)
	errc := make(chan error, 1)
	go func() {
		l, err := waiter.Acquire(ctx, "handed", dlock.MaxWait(20*time.Second))
		got <- l
		errc <- err
	}()
	waitSubscribed(ctx, t, waiter, rdb)
	queued := time.Now()
	// Hold past the waiter's TTL (the watchdog extends it), then hand over.
	for time.Since(queued) < 2*ttl {
		time.Sleep(50 * time.Millisecond)
	}
	if err := h.Release(ctx); err != nil {
		t.Fatalf("Release = %v", err)
	}
	l, err := <-got, <-errc
	if err != nil {
		t.Fatalf("the waiter's Acquire = %v", err)
	}
	defer l.Release(ctx)
	if err := l.Err(); err != nil || !time.Now().Before(l.ValidUntil()) {
		t.Errorf("the Lock handed over after a wait of %v: Err() = %v, ValidUntil in %v; want a valid lease",
			time.Since(queued).Round(time.Millisecond), err, time.Until(l.ValidUntil()).Round(time.Millisecond))
	}
}

// LockDelay refuses a negative delay, on New and per call.
func TestLockDelayRefusesNegative(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	if _, err := dlock.New(rdb, dlock.LockDelay(-time.Second)); !errors.Is(err, dlock.ErrInvalid) || !strings.Contains(err.Error(), "LockDelay") {
		t.Errorf("New(LockDelay(-1s)) = %v, want ErrInvalid naming LockDelay", err)
	}
	c := newClient(t, rdb)
	if l, err := c.TryAcquire(t.Context(), "negative", dlock.LockDelay(-time.Second)); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("TryAcquire(LockDelay(-1s)) = %v, %v; want ErrInvalid", l, err)
	}
}

// A lock-delay so long that the lease time plus it overflows a Duration
// keeps the name for as long as Redis can, and never gives a lease that
// Redis sees as already ended: on every kind (and a reentrant lock's
// other owner), over a quorum and without scripts, the first holder holds
// and the second is refused.
func TestLockDelayPastMaxDurationKeepsHoldsExclusive(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	const delay = time.Duration(math.MaxInt64) - time.Second // + a 10s TTL overflows
	type take func(name string) (*dlock.Lock, error)
	cases := map[string][2]take{}
	for _, fair := range []bool{false, true} {
		c := newClient(t, rdb, waiting(fair), dlock.LockDelay(delay))
		for _, k := range everyKind() {
			next := k.name
			if next == "read" {
				next = "write" // (reads share)
			}
			tk := func(name string) (*dlock.Lock, error) { return k.take(ctx, c, name, true) }
			tn := func(name string) (*dlock.Lock, error) { return kindTake(next)(ctx, c, name, true) }
			cases[fmt.Sprintf("%s-fair=%v", k.name, fair)] = [2]take{tk, tn}
		}
	}
	for _, m := range modesAt(t, rdb, true, time.Second)[3:] { // (the quorum's; its lease the default 10s)
		c := m.new(t, dlock.LockDelay(delay))
		tk := func(name string) (*dlock.Lock, error) { return c.TryAcquire(ctx, name) }
		cases[m.name] = [2]take{tk, tk}
	}
	ns := newClient(t, rdb, dlock.WithoutScripts(), dlock.LockDelay(delay))
	nsTake := func(name string) (*dlock.Lock, error) { return ns.TryAcquire(ctx, name) }
	cases["no-scripts"] = [2]take{nsTake, nsTake}
	re := newClient(t, rdb, dlock.WithReentrant(true), dlock.LockDelay(delay))
	first, second := asOwner(t, re, "first"), asOwner(t, re, "second")
	cases["reentrant"] = [2]take{
		func(name string) (*dlock.Lock, error) { return first.TryAcquire(ctx, name) },
		func(name string) (*dlock.Lock, error) { return second.TryAcquire(ctx, name) },
	}
	for name, tc := range cases {
		a, err := tc[0](name)
		if err != nil {
			t.Errorf("%s: first TryAcquire with LockDelay(%v) = %v, want the lock", name, delay, err)
			continue
		}
		if b, err := tc[1](name); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Errorf("%s: second TryAcquire while the first holds = %v, want ErrNotAcquired", name, err)
			if b != nil {
				b.Release(ctx)
			}
		}
		if err := a.Release(ctx); err != nil {
			t.Errorf("%s: the first holder's Release = %v, want nil", name, err)
		}
	}
}

// A Do whose release meets Redis unreachable for a moment, longer than its
// lease time but far shorter than its lock-delay, has the release retried
// (as an undo) until Redis is back: the name is free soon after, not left
// held for the delay after a clean end.
func TestDoReleaseThroughOutageFreesNameDespiteLockDelay(t *testing.T) {
	t.Parallel()
	s, direct := setup(t)
	ctx := t.Context()
	rdb, d := refusable(t, s)
	c := newClient(t, rdb, dlock.LeaseTTL(300*time.Millisecond), dlock.LockDelay(time.Minute))
	defer c.Close(ctx)
	err := c.Do(ctx, "outage", func(context.Context, *dlock.Lock) error {
		d.cutAndRefuse() // the release finds Redis unreachable
		return nil
	})
	if err == nil {
		t.Fatal("Do whose release found Redis unreachable = nil, want the release's error")
	}
	time.Sleep(1200 * time.Millisecond) // the outage: four times the lease time
	d.allow()
	next := newClient(t, direct)
	var l *dlock.Lock
	if !waitFor(10*time.Second, func() bool { l, err = next.TryAcquire(ctx, "outage"); return err == nil }) {
		t.Fatalf("TryAcquire 10s after a 1.2s outage that met Do's release, with a lock-delay of 1m = %v, want the lock", err)
	}
	l.Release(ctx)
}

// Over a quorum, a node that the holder's extensions no longer reach keeps
// an older, shorter copy of the lease; the holder, extended on a majority,
// is live, and Inspect does not show its name in lock-delay.
func TestQuorumNodeMissingExtensionsIsNotLockDelay(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	ps, via, direct := proxiedQuorum(t, 3)
	var nodes []redis.UniversalClient
	for _, d := range direct {
		nodes = append(nodes, d)
	}
	const ttl, delay = time.Second, 2 * time.Second
	holder := newRedlock(t, via, 400*time.Millisecond, dlock.LeaseTTL(ttl), dlock.LockDelay(delay))
	// Inspect reports the need-th longest copy of those that answered: with
	// one of the two extended nodes past the node timeout (a loaded
	// machine), that is the stale third copy, in lock-delay. Its node
	// timeout is far above a loaded machine's round trip, so that all three
	// answer (none goes through the stalled proxy).
	inspect := newRedlock(t, nodes, 2*time.Second, dlock.LockDelay(delay))
	l, err := holder.TryAcquire(ctx, "minority")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	ps[2].Stall() // the third node's copy is extended no more
	lag := redistest.TimerLag()
	defer lag()
	for end := time.Now().Add(2 * (ttl + delay)); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		info, err := inspect.Inspect(ctx, "minority")
		if err != nil {
			t.Fatalf("Inspect = %v", err)
		}
		if info.InDelay && l.Err() == nil && time.Now().Before(l.ValidUntil()) {
			t.Fatalf("Inspect of a live holder extended on a majority = InDelay (TTL %v), want not in lock-delay", info.TTL)
		}
	}
	if err := l.Err(); err != nil && !lostToLag(t, err, lag(), ttl) {
		t.Fatalf("the holder extended on two of three nodes: Err() = %v, want held", err)
	}
}

// A holder process killed with SIGKILL leaves its lease in Redis for the
// lock-delay past its validity: the next one takes the name no sooner
// than the lease Redis showed before the kill runs out, which is longer
// than the delay (a live holder keeps it so); every kind a helper process
// holds, on a single node and over a quorum.
func TestKilledHolderKeepsNameForLockDelay(t *testing.T) {
	// Not parallel: it starts processes and servers for nine cases at once,
	// which crowd a two-core machine's other tests.
	const ttl, delay = 2 * time.Second, 2 * time.Second
	for _, tc := range []struct {
		name string
		env  []string
	}{
		{"unfair", nil},
		{"fair", []string{"DLOCK_FAIR=1"}},
		{"semaphore", []string{"DLOCK_PERMITS=1"}},
		{"quorum", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, rdb := setup(t)
			env := append(tc.env, "DLOCK_LOCK_DELAY="+delay.String())
			take := func(ctx context.Context, c *dlock.Client) (*dlock.Lock, error) { return c.Acquire(ctx, "killed") }
			c := newClient(t, rdb, dlock.LockDelay(delay))
			switch tc.name {
			case "semaphore":
				take = func(ctx context.Context, c *dlock.Client) (*dlock.Lock, error) {
					return kindTake("semaphore")(ctx, c, "killed", false)
				}
			case "quorum":
				_, nodes := startQuorum(t, 3)
				var addrs []string
				for _, n := range nodes {
					addrs = append(addrs, n.(*redis.Client).Options().Addr)
				}
				env = append(env, "DLOCK_QUORUM="+strings.Join(addrs, ","))
				c = newRedlock(t, nodes, 400*time.Millisecond, dlock.LockDelay(delay))
			}
			holder := startHelper(t, s, "hold", "killed", ttl, 0, env...)
			if !holder.waitLine("held", 20*time.Second) {
				t.Fatalf("the helper process did not take the lock: %s", holder.out.String())
			}
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			read := time.Now()
			info, err := c.Inspect(ctx, "killed")
			if err != nil {
				t.Fatal(err)
			}
			left := leaseLeft(info)
			holder.kill()
			killed := time.Now()
			if left <= delay {
				t.Errorf("a live holder's lease in Redis had %v left, want more than the lock-delay %v", left, delay)
			}
			l, err := take(ctx, c)
			got := time.Now()
			if err != nil {
				t.Fatalf("Acquire after the holder was killed = %v", err)
			}
			defer l.Release(ctx)
			if early := read.Add(left - 10*time.Millisecond); got.Before(early) {
				t.Errorf("next holder got the name %v after the lease read with %v left", got.Sub(read).Round(time.Millisecond), left)
			}
			t.Logf("killed with %v of its lease left in Redis (TTL %v, lock-delay %v): next holder %v after the kill",
				left.Round(time.Millisecond), ttl, delay, got.Sub(killed).Round(time.Millisecond))
		})
	}
}

// leaseLeft is the longest lease left of the holders info shows.
func leaseLeft(info dlock.Info) time.Duration {
	left := info.TTL
	for _, p := range info.Permits {
		left = max(left, p.TTL)
	}
	return left
}

// A lease lost on the holder's side (its validity ran out unextended) is
// reported lost by TTL, though Redis keeps it for the lock-delay: TTL
// does not tell a lost holder that its lease has time left.
func TestTTLOfALeaseLostDuringItsLockDelayIsNotHeld(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.WithAutoExtend(false), dlock.LeaseTTL(200*time.Millisecond), dlock.LockDelay(20*time.Second))
	l, err := c.Acquire(ctx, "ttl-in-delay")
	if err != nil {
		t.Fatal(err)
	}
	if !waitFor(5*time.Second, func() bool { return l.Err() != nil }) {
		t.Fatal("the unextended 200ms lease was never lost")
	}
	if n := rdb.Exists(ctx, l.Key()).Val(); n != 1 {
		t.Fatalf("Redis no longer keeps the lease during its lock-delay (EXISTS = %d)", n)
	}
	if left, err := l.TTL(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("TTL of a lease lost during its lock-delay = %v, %v; want ErrNotHeld", left, err)
	}
}
