package dlock_test

// Adversarial tests: attacks on the lock's seams by delayed, re-sent and
// cancelled requests, error replies, and concurrency. Each comment says
// how the attack goes and, for those that broke the lock before it was
// fixed, what happened and what the fix is.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/leakcheck"
)

// Was a bug: a delayed shorter extension lands after a later, longer one.
//
// Extend(short) whose request is delayed in the network past its caller's
// ctx (or go-redis read timeout) returns an error and keeps min(old, new)
// validity, as documented. The next Extend(long) overtakes it on another
// connection and succeeds: ValidUntil moves to now+long. Then the delayed
// short PEXPIRE lands and cuts the server-side lease to `short` from its
// landing. The server lets another client in while the first holder's
// Err() is nil and ValidUntil is seconds in the future: two holders.
//
// The fix: every extension carries a sequence number, and Redis applies
// none older than one it applied (the lease's own key records it).
func TestDelayedShorterExtendCannotCutANewerLease(t *testing.T) {
	if testing.Short() {
		t.Skip("a long fault/timing scenario; run without -short")
	}
	leakcheck.Check(t)
	for _, pipelining := range []bool{true, false} {
		readTimeout := 5 * time.Second // the batcher returns at ctx end
		if !pipelining {
			readTimeout = 300 * time.Millisecond // go-redis gives up on the read
		}
		p, rdb, direct := proxied(t, -1, readTimeout)
		for _, m := range modes(t, rdb, false) {
			t.Run(fmt.Sprintf("%s/pipelining=%v", m.name, pipelining), func(t *testing.T) {
				name := fmt.Sprintf("ext-reorder-%s-%v", m.name, pipelining)
				c := m.new(t, dlock.LeaseTTL(10*time.Second), dlock.WithAutoExtend(false), pipelined(pipelining))
				l, err := c.TryAcquire(m.ctx(t.Context()), name)
				if err != nil {
					t.Fatal(err)
				}
				defer l.Release(context.WithoutCancel(t.Context()))

				p.Delay(1500*time.Millisecond, 0)
				start := time.Now()
				ctx1, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
				err = l.Extend(ctx1, 400*time.Millisecond)
				cancel()
				p.Delay(0, 0)
				if err == nil {
					t.Skip("short extension did not time out; cannot stage the reorder")
				}
				if err := l.Extend(t.Context(), 10*time.Second); err != nil {
					t.Fatalf("Extend(10s) = %v", err)
				}
				// The delayed Extend(400ms) lands at ~1.5s and the key dies at ~1.9s.
				time.Sleep(time.Until(start.Add(2300 * time.Millisecond)))
				other := newClient(t, direct, waiting(m.name == "fair"), dlock.WithReentrant(m.name == "reentrant"))
				o, err := asOwner(t, other, "intruder").TryAcquire(t.Context(), name)
				if err != nil {
					return // held up
				}
				defer o.Release(t.Context())
				if l.Err() == nil && time.Now().Before(l.ValidUntil()) {
					t.Errorf("TWO HOLDERS: another client acquired %q while the first holder's Err()=nil and ValidUntil is %v away",
						name, time.Until(l.ValidUntil()).Round(time.Millisecond))
				}
			})
		}
	}
}

// Was a bug: one user Extend(short) whose request is delayed;
// the watchdog then extends with the OLD, longer TTL (an extension with an
// error does not change l.ttl) and succeeds; the delayed short one lands
// after it. No second user call is needed.
func TestDelayedShorterExtendCannotCutTheWatchdogsLease(t *testing.T) {
	if testing.Short() {
		t.Skip("a long fault/timing scenario; run without -short")
	}
	leakcheck.Check(t)
	p, rdb, direct := proxied(t, -1, 5*time.Second)
	c := newClient(t, rdb, dlock.LeaseTTL(6*time.Second), dlock.WithUnfair(nil)) // watchdog every 2s
	l, err := c.TryAcquire(t.Context(), "ext-dog")
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	defer l.Release(context.WithoutCancel(t.Context()))
	time.Sleep(time.Until(t0.Add(1500 * time.Millisecond)))
	p.Delay(time.Second, 0)
	ctx1, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	err = l.Extend(ctx1, 1200*time.Millisecond) // lands at ~2.5s, key dies at ~3.7s
	cancel()
	p.Delay(0, 0)
	if err == nil {
		t.Skip("short extension did not time out")
	}
	// The watchdog ticks at ~2.0s with the old 6s TTL; the next tick is ~4.0s.
	time.Sleep(time.Until(t0.Add(3850 * time.Millisecond)))
	o, err := newClient(t, direct, dlock.WithUnfair(nil)).TryAcquire(t.Context(), "ext-dog")
	if err != nil {
		return
	}
	defer o.Release(t.Context())
	if l.Err() == nil && time.Now().Before(l.ValidUntil()) {
		t.Errorf("TWO HOLDERS: intruder holds while the watchdog-extended holder's ValidUntil is %v away",
			time.Until(l.ValidUntil()).Round(time.Millisecond))
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

// Was a bug: a fair waiter whose later attempt gets an error REPLY from Redis
// (NOREPLICAS here; READONLY after a failover, OOM, BUSY are the same)
// returns the error from Acquire but leaves its queue entry behind. The
// next Release hands the lock to that token: a lease held by nobody, and
// every live waiter/TryAcquire is blocked for the entry's TTL.
//
// The fix: an attempt is undone after any error, and an undo that Redis
// refuses for the time being is retried in the background.
func TestFairWaiterErrorReplyLeavesNoGhostInQueue(t *testing.T) {
	_, rdb := setup(t)
	s2 := rdb // same server
	ctx := t.Context()
	h, err := newClient(t, rdb, dlock.LeaseTTL(2*time.Second)).TryAcquire(ctx, "ghost")
	if err != nil {
		t.Fatal(err)
	}
	w := newClient(t, s2, dlock.LeaseTTL(2*time.Second))
	errc := make(chan error, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		l, err := w.Acquire(wctx, "ghost")
		if l != nil {
			l.Release(ctx)
		}
		errc <- err
	}()
	if !waitFor(3*time.Second, func() bool { return rdb.LLen(ctx, "dlock:{ghost}:q").Val() == 1 }) {
		t.Fatal("waiter never queued")
	}
	ghost := rdb.LIndex(ctx, "dlock:{ghost}:q", 0).Val()
	rdb.ConfigSet(ctx, "min-replicas-to-write", "1") // writes now fail with NOREPLICAS
	var werr error
	select {
	case werr = <-errc:
	case <-time.After(3 * time.Second):
		rdb.ConfigSet(ctx, "min-replicas-to-write", "0")
		t.Fatal("waiter's Acquire did not fail")
	}
	rdb.ConfigSet(ctx, "min-replicas-to-write", "0")
	t.Logf("waiter's Acquire returned: %v", werr)
	if err := h.Release(ctx); err != nil {
		t.Logf("holder Release = %v", err)
	}
	// The waiter's undo, refused while writes were, is retried in the
	// background: once Redis takes writes again, within a retry's pause (at
	// most a second), the ghost is gone, whether it was still queued or had
	// been handed the lock meanwhile — well before its 2s lease would end.
	c := newClient(t, rdb)
	start := time.Now()
	var l *dlock.Lock
	if !waitFor(1500*time.Millisecond, func() bool {
		l, err = c.TryAcquire(ctx, "ghost")
		return err == nil
	}) {
		info, _ := c.Inspect(ctx, "ghost")
		t.Errorf("LEASE FOR NOBODY: 1.5s after writes resumed, TryAcquire = %v; holder %s (the ghost %s), TTL %v",
			err, info.Token, ghost, info.TTL)
		return
	}
	t.Logf("free again %v after writes resumed", time.Since(start).Round(time.Millisecond))
	l.Release(ctx)
}

// The batcher under heavy cancellation.
// 48 goroutines, each on its own free name, TryAcquire with random 0-4ms
// deadlines through a proxy that delays replies 1-3ms (so calls are
// abandoned queued and in flight), under -race. Every success must own the
// key; every failure must be ctx-caused and match ErrNotAcquired+ctx.Err;
// nothing may be left behind once the background undos are done.
func TestBatcherUnderACancellationStorm(t *testing.T) {
	if testing.Short() {
		t.Skip("a long fault/timing scenario; run without -short")
	}
	leakcheck.Check(t)
	p, rdb, direct := proxied(t, -1, 5*time.Second)
	for _, m := range modes(t, rdb, false) {
		t.Run(m.name, func(t *testing.T) {
			c := m.new(t, dlock.LeaseTTL(5*time.Second))
			p.Delay(0, 2*time.Millisecond)
			defer p.Delay(0, 0)
			var wg sync.WaitGroup
			var bad atomic.Int32
			var got atomic.Int32
			deadline := time.Now().Add(8 * time.Second)
			for g := range 48 {
				wg.Go(func() {
					name := fmt.Sprintf("storm-%s-%d", m.name, g)
					rnd := rand.New(rand.NewPCG(uint64(g), 7))
					for i := 0; i < 60 && time.Now().Before(deadline); i++ {
						ctx, cancel := context.WithTimeout(m.ctx(t.Context()), time.Duration(rnd.IntN(4000))*time.Microsecond)
						l, err := c.TryAcquire(ctx, name)
						ctxErr := ctx.Err()
						cancel()
						if err != nil {
							if ctxErr == nil || !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, ctxErr) {
								if bad.Add(1) < 5 {
									t.Errorf("%s: TryAcquire on a free name = %v (ctx err %v)", name, err, ctxErr)
								}
							}
							continue
						}
						got.Add(1)
						key := "dlock:{" + name + "}"
						owned := false
						if m.name == "reentrant" { // Token() is the owner id
							owned = direct.HGet(t.Context(), key, "owner").Val() == l.Token()
						} else {
							owned = holderOf(direct.Get(t.Context(), key).Val()) == l.Token()
						}
						if _, err := l.TTL(t.Context()); err != nil {
							owned = false
						}
						if !owned && bad.Add(1) < 5 {
							t.Errorf("%s: TryAcquire succeeded but the key does not hold it: %v / %v", name,
								direct.HGetAll(t.Context(), key).Val(), direct.Get(t.Context(), key).Val())
						}
						if err := l.Release(context.Background()); err != nil && bad.Add(1) < 5 {
							t.Errorf("%s: Release = %v", name, err)
						}
					}
				})
			}
			wg.Wait()
			t.Logf("%d acquisitions succeeded", got.Load())
			time.Sleep(2500 * time.Millisecond) // background undos (bounded by 2s)
			var left []string
			iter := direct.Scan(t.Context(), 0, "dlock:{storm-"+m.name+"-*}", 1000).Iterator()
			for iter.Next(t.Context()) {
				if liveKeys(t.Context(), direct, iter.Val()) == 1 {
					left = append(left, iter.Val())
				}
			}
			if len(left) > 0 {
				t.Errorf("lock keys left behind after the storm: %v", left)
			}
			for g := range 48 {
				if n := direct.LLen(t.Context(), fmt.Sprintf("dlock:{storm-%s-%d}:q", m.name, g)).Val(); n != 0 {
					t.Errorf("queue entries left behind for storm-%s-%d", m.name, g)
				}
			}
		})
	}
}

// Fair handover racing waiters that give up.
// A holder releases while waiters' contexts end around the same moment;
// whoever is handed the lock must either return it to its caller or pass it
// on. 300ms after everyone returned, no lease may be left for nobody.
func TestFairHandoverRacingWaitersThatGiveUp(t *testing.T) {
	if testing.Short() {
		t.Skip("a long fault/timing scenario; run without -short")
	}
	_, rdb := setup(t)
	ctx := t.Context()
	for round := range 12 {
		for _, pipelining := range []bool{true, false} {
			name := fmt.Sprintf("handrace-%d-%v", round, pipelining)
			mk := func() *dlock.Client {
				return newClient(t, rdb, dlock.LeaseTTL(3*time.Second), pipelined(pipelining))
			}
			h, err := mk().TryAcquire(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			rnd := rand.New(rand.NewPCG(uint64(round), 1))
			var wg sync.WaitGroup
			for w := range 8 {
				d := time.Duration(40+rnd.IntN(120)) * time.Millisecond
				c := mk()
				if w%2 == 1 {
					c = newClient(t, rdb, dlock.LeaseTTL(3*time.Second), pipelined(pipelining))
				}
				wg.Go(func() {
					wctx, cancel := context.WithTimeout(ctx, d)
					defer cancel()
					l, err := c.Acquire(wctx, name)
					if err != nil {
						if !errors.Is(err, dlock.ErrNotAcquired) {
							t.Errorf("waiter: %v", err)
						}
						return
					}
					l.Release(context.Background())
				})
			}
			time.Sleep(time.Duration(60+rnd.IntN(60)) * time.Millisecond)
			h.Release(ctx)
			wg.Wait()
			time.Sleep(300 * time.Millisecond)
			if info, _ := mk().Inspect(ctx, name); info.Held {
				t.Errorf("round %d pipelining %v: lease for nobody left: token %s TTL %v; queue %v", round, pipelining,
					info.Token, info.TTL, rdb.LRange(ctx, "dlock:{"+name+"}:q", 0, -1).Val())
			}
		}
	}
}

// Was a bug: a fair waiter that confirms a handover with an attempt (it waited
// more than TTL/2, so handedOver does not trust the message; or the message
// was lost and its timer woke it; or an earlier attempt was too slow)
// counts its validity from the confirming attempt's start, but the lease
// was set by the releaser at R, earlier, and acquire_fair.lua's
// `holder == token` branch returns the fence WITHOUT re-arming the expiry.
// ValidUntil overstates the server's lease by (attempt start − R) − drift:
// here the handover message takes 300ms to arrive, so the waiter believes
// in its lease ~270ms after the server let it expire, and another client
// takes the lock in that window.
//
// The fix: an acquire that finds the lock already ours pushes its expiry
// out to the TTL from now (PEXPIRE GT: never shortened).
func TestFairConfirmedHandoverValidityWithinTheLease(t *testing.T) {
	if testing.Short() {
		t.Skip("a long fault/timing scenario; run without -short")
	}
	leakcheck.Check(t)
	p, rdb, direct := proxied(t, -1, 5*time.Second)
	ctx := t.Context()
	const ttl = 3 * time.Second // W sleeps at most 1s between attempts; TTL/2 = 1.5s
	h, err := newClient(t, direct, dlock.LeaseTTL(ttl)).TryAcquire(ctx, "confirm")
	if err != nil {
		t.Fatal(err)
	}
	p.Delay(0, 300*time.Millisecond) // W's replies and pub/sub messages arrive 300ms late
	defer p.Delay(0, 0)
	w := newClient(t, rdb, dlock.LeaseTTL(ttl), dlock.WithAutoExtend(false))
	type res struct {
		l   *dlock.Lock
		err error
	}
	got := make(chan res, 1)
	q := time.Now()
	go func() {
		l, err := w.Acquire(ctx, "confirm")
		got <- res{l, err}
	}()
	// W's attempts start at ~0, ~0.6s, ~1.9s; release right after the
	// third one's reply, so the message (not a timer) wakes it.
	time.Sleep(time.Until(q.Add(2300 * time.Millisecond)))
	h.Release(ctx)
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer r.l.Release(context.Background())
	pttl := direct.PTTL(ctx, "dlock:{confirm}").Val()
	serverEnd := time.Now().Add(pttl)
	over := r.l.ValidUntil().Sub(serverEnd)
	t.Logf("waiter's ValidUntil is %v past the server's expiry", over.Round(time.Millisecond))
	if over <= 5*time.Millisecond {
		return
	}
	time.Sleep(time.Until(serverEnd.Add(5 * time.Millisecond)))
	o, err := newClient(t, direct).TryAcquire(ctx, "confirm")
	if err != nil {
		t.Errorf("ValidUntil overstated by %v but no intruder got in: %v", over, err)
		return
	}
	defer o.Release(ctx)
	if r.l.Err() == nil && time.Now().Before(r.l.ValidUntil()) {
		t.Errorf("TWO HOLDERS: intruder acquired while the handed-over waiter's Err()=nil, ValidUntil %v away",
			time.Until(r.l.ValidUntil()).Round(time.Millisecond))
	}
}

// Every Lock method from many goroutines at
// once, with a fast watchdog, shorter and longer Extends, Release in the
// middle, under -race; in every mode (quorum included).
func TestLockMethodsConcurrently(t *testing.T) {
	_, rdb := setup(t)
	for _, m := range modes(t, rdb, true) {
		t.Run(m.name, func(t *testing.T) {
			c := m.new(t, dlock.LeaseTTL(150*time.Millisecond)) // watchdog every 50ms
			ctx := m.ctx(t.Context())
			for round := range 5 {
				l, err := c.Acquire(ctx, fmt.Sprintf("conc-%s-%d", m.name, round))
				if err != nil {
					t.Fatal(err)
				}
				var wg sync.WaitGroup
				stop := time.Now().Add(300 * time.Millisecond)
				for g := range 6 {
					wg.Go(func() {
						for i := 0; i < 200 && time.Now().Before(stop); i++ {
							switch (g + i) % 7 {
							case 0:
								l.Extend(ctx, time.Duration(60+20*(i%5))*time.Millisecond)
							case 1:
								l.Err()
							case 2:
								l.ValidUntil()
							case 3:
								<-closedOrNot(l.Done())
							case 4:
								l.TTL(ctx)
							case 5:
								_ = l.Token() + l.Key() + l.Name()
							case 6:
								if g == 0 && i > 30 {
									l.Release(ctx)
								}
							}
						}
					})
				}
				wg.Wait()
				if err := l.Release(ctx); err != nil && !errors.Is(err, dlock.ErrNotHeld) {
					t.Errorf("Release = %v", err)
				}
				if err := l.Err(); err == nil {
					t.Errorf("Err() nil after Release")
				}
			}
		})
	}
}

func closedOrNot(ch <-chan struct{}) <-chan struct{} {
	out := make(chan struct{})
	close(out)
	select {
	case <-ch:
	default:
	}
	return out
}
