package dlock_test

// An ended lease must be remembered for its own revocation window, whatever
// happens to the lock after it: handovers, extensions, later leases with a
// shorter life, forced releases. (A version that kept this memory in the
// lock's value, as the last three releases, failed each of these; every
// lease now leaves a marker key of its own, see lib.lua.)

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/redistest"
)

// delayedThenResent takes name with c through the proxy p while the
// network holds the first copy of the acquire for 1s: go-redis's re-sent
// copy (after the 300ms read timeout) takes the lock, the delayed original
// lands about 1s after start. It returns the lock and start.
func delayedThenResent(t *testing.T, p *redistest.Proxy, acquire func(context.Context, string, ...dlock.LockOption) (*dlock.Lock, error), name string) (*dlock.Lock, time.Time) {
	t.Helper()
	ctx := t.Context()
	if warm, err := acquire(ctx, name+"-warm"); err == nil { // the scripts are loaded
		warm.Release(ctx)
	}
	p.Delay(time.Second, 0)
	start := time.Now()
	go func() {
		time.Sleep(100 * time.Millisecond) // the acquire has crossed into the proxy
		p.Delay(0, 0)                      // the re-sent copy goes straight through
	}()
	l, err := acquire(ctx, name)
	if err != nil {
		t.Fatalf("acquire = %v, want the re-sent copy's lock", err)
	}
	return l, start
}

// The README once said: "a released lease is remembered through the next
// three leases of its name". In fair mode a release that hands the lock to
// a waiter sets the waiter's token alone: the "+" entries of the releasing
// lease's value (the leases before it) are dropped. A delayed acquire of a
// lease P released two leases earlier is then refused by nothing:
//   - landing on the tombstone after the waiter's release, it takes the
//     lock for nobody, for P's TTL;
//   - landing (an Acquire's, queue=1) while the waiter holds, it queues P's
//     token, and the waiter's release hands the lock to P: nobody again,
//     and the release announces a handover no client waits for.
func TestDelayedAcquireAfterAHandoverTakesNothing(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a long fault/timing scenario; run without -short")
	}
	p, rdb, direct := proxied(t, 3, 300*time.Millisecond)
	for _, lands := range []string{"after-the-waiter-released", "while-the-waiter-holds"} {
		t.Run(lands, func(t *testing.T) {
			ctx := t.Context()
			name := "revocation-handover-" + lands
			key := "dlock:{" + name + "}"
			c := newClient(t, rdb, dlock.LeaseTTL(5*time.Second), dlock.WithAutoExtend(false))
			other := newClient(t, direct, dlock.WithAutoExtend(false))
			waiter := newClient(t, direct, dlock.WithAutoExtend(false))

			acquire := c.TryAcquire
			if lands == "while-the-waiter-holds" {
				acquire = c.Acquire // its attempts queue (queue=1)
			}
			l, start := delayedThenResent(t, p, acquire, name)
			pToken := l.Token()
			if err := l.Release(ctx); err != nil { // "~ +P"
				t.Fatal(err)
			}
			a, err := other.TryAcquire(ctx, name) // "A +P"
			if err != nil {
				t.Fatal(err)
			}
			got := make(chan *dlock.Lock, 1)
			go func() {
				w, err := waiter.Acquire(ctx, name)
				if err != nil {
					t.Errorf("waiter Acquire = %v", err)
				}
				got <- w
			}()
			if !waitFor(time.Second, func() bool { return direct.LLen(ctx, key+":q").Val() == 1 }) {
				t.Fatal("the waiter never queued")
			}
			t.Logf("before the handover: %q", direct.Get(ctx, key).Val())
			if err := a.Release(ctx); err != nil { // hands over to W: "W"
				t.Fatal(err)
			}
			t.Logf("after the handover: %q", direct.Get(ctx, key).Val())
			w := <-got
			if w == nil {
				return
			}
			if lands == "while-the-waiter-holds" {
				time.Sleep(time.Until(start.Add(1500 * time.Millisecond))) // the delayed original has landed
				t.Logf("queue while the waiter holds: %q %q", direct.LRange(ctx, key+":q", 0, -1).Val(), direct.HGetAll(ctx, key+":qw").Val())
			}
			if err := w.Release(ctx); err != nil { // "~ +W"
				t.Fatal(err)
			}
			t.Logf("after the waiter's release: %q", direct.Get(ctx, key).Val())
			if lands == "after-the-waiter-released" {
				if d := time.Since(start); d > 900*time.Millisecond {
					t.Skipf("too slow to beat the delayed request (%v)", d)
				}
				time.Sleep(time.Until(start.Add(1500 * time.Millisecond))) // the delayed original has landed
			}
			if liveKeys(ctx, direct, key) != 0 {
				_, terr := newClient(t, direct).TryAcquire(ctx, name)
				t.Errorf("the delayed original of lease %s, released two leases earlier (one handed over), took the lock %v after it was sent: value %q, pttl %v; TryAcquire = %v",
					pToken, time.Since(start).Round(time.Millisecond), direct.Get(ctx, key).Val(), direct.PTTL(ctx, key).Val(), terr)
			}
		})
	}
}

// docs/guarantees.md: "a revocation lasts min(TTL, 1 minute)". A released lease's
// revocation lives in the lock's value, whose expiry is set by whoever
// holds or releases the name next: a client with a shorter TTL (another
// service, or Extend to a shorter lease) takes the name, releases it (or
// dies), and the tombstone that names the first lease expires after the
// shorter TTL. The first lease's delayed acquire then takes the lock for
// nobody, for its own (longer) TTL. (The same for an undone attempt was
// fixed with markers; a released lease has no marker.)
func TestDelayedAcquireAfterAShortLivedLease(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a long fault/timing scenario; run without -short")
	}
	p, rdb, direct := proxied(t, 3, 300*time.Millisecond)
	for _, fair := range []bool{false, true} {
		for _, how := range []string{"releases", "expires", "same-ttl-extends-shorter-and-expires"} {
			t.Run(fmt.Sprintf("fair=%v/next-%s", fair, how), func(t *testing.T) {
				ctx := t.Context()
				name := fmt.Sprintf("revocation-short-%v-%s", fair, how)
				key := "dlock:{" + name + "}"
				c := newClient(t, rdb, waiting(fair), dlock.LeaseTTL(5*time.Second), dlock.WithAutoExtend(false))
				short := newClient(t, direct, waiting(fair), dlock.LeaseTTL(200*time.Millisecond), dlock.WithAutoExtend(false))
				if how == "same-ttl-extends-shorter-and-expires" { // the same configuration as the first lease's
					short = newClient(t, direct, waiting(fair), dlock.LeaseTTL(5*time.Second), dlock.WithAutoExtend(false))
				}

				l, start := delayedThenResent(t, p, c.TryAcquire, name)
				if err := l.Release(ctx); err != nil {
					t.Fatal(err)
				}
				t.Logf("tombstone: %q pttl %v", direct.Get(ctx, key).Val(), direct.PTTL(ctx, key).Val())
				n, err := short.TryAcquire(ctx, name)
				if err != nil {
					t.Fatal(err)
				}
				switch how {
				case "releases":
					if err := n.Release(ctx); err != nil {
						t.Fatal(err)
					}
				case "same-ttl-extends-shorter-and-expires": // and its holder dies
					if err := n.Extend(ctx, 200*time.Millisecond); err != nil {
						t.Fatal(err)
					}
				}
				t.Logf("after the 200ms lease: %q pttl %v", direct.Get(ctx, key).Val(), direct.PTTL(ctx, key).Val())
				if d := time.Since(start); d > 700*time.Millisecond {
					t.Skipf("too slow to beat the delayed request (%v)", d)
				}
				time.Sleep(time.Until(start.Add(1500 * time.Millisecond))) // the delayed original has landed
				if liveKeys(ctx, direct, key) != 0 {
					_, terr := newClient(t, direct, waiting(fair)).TryAcquire(ctx, name)
					t.Errorf("the delayed original of a lease released %v ago (TTL 5s: revoked for 5s) took the lock for nobody: value %q, pttl %v; TryAcquire = %v",
						time.Since(start).Round(time.Millisecond), direct.Get(ctx, key).Val(), direct.PTTL(ctx, key).Val(), terr)
				}
			})
		}
	}
}

// docs/guarantees.md: "a re-sent release reports what the first copy did,
// not a false loss", through the next three leases ("a release re-sent after three more
// leases came and went reports a false loss"). The "+" entries that carry
// the memory are dropped by an extension of the third lease (extend.lua
// keeps two), by a fair handover (the waiter's token alone) and by a forced
// release (DEL): the re-sent release of a lease that did release the lock
// then reports ErrNotHeld, and marks the lease as never having held it.
// So does the release of a next lease with a shorter TTL: its tombstone,
// which carries our entry, lives for its own TTL, not ours.
func TestReSentReleaseAfterTheEntriesWereDropped(t *testing.T) {
	t.Parallel()
	p, rdb, direct := proxied(t, 3, 5*time.Second) // the cut, not a timeout, ends the wait
	oldServer(t, direct)                           // (a lost release reply is told by the server's uptime)
	for _, how := range []string{"unfair/third-lease-extends", "fair/handover", "unfair/force-release", "unfair/next-lease-with-a-shorter-ttl"} {
		t.Run(how, func(t *testing.T) {
			ctx := t.Context()
			fair := how == "fair/handover"
			name := "revocation-resent-" + strings.ReplaceAll(how, "/", "-")
			key := "dlock:{" + name + "}"
			l, next := leaseOverProxy(t, rdb, direct, fair, name)
			var seen string
			err := stallThenCut(t, p, func() error { return l.Release(ctx) }, func() bool {
				if holderOf(direct.Get(ctx, key).Val()) == l.Token() {
					return false
				}
				// The first copy ran; its reply is held. What comes next:
				seen = dropEntries(t, how, direct, next, name)
				return true
			})
			if err != nil {
				t.Errorf("Release whose first copy freed the lock, re-sent after %s = %v, want nil (value before: %q, now %q; marker %q)",
					how, err, seen, direct.Get(ctx, key).Val(), direct.Get(ctx, key+":r:"+l.Token()).Val())
			}
		})
	}
}

// dropEntries does, while a re-sent release of name's last lease waits,
// what drops the "+" entries that remember that lease (how: a case of
// TestReSentReleaseAfterTheEntriesWereDropped), through next or a Client of
// direct's, and returns the lock's value as it was before the drop.
func dropEntries(t *testing.T, how string, direct *redis.Client, next *dlock.Client, name string) (seen string) {
	t.Helper()
	ctx := t.Context()
	key := "dlock:{" + name + "}"
	switch how {
	case "unfair/third-lease-extends":
		for range 2 { // two leases come and go
			n, err := next.TryAcquire(ctx, name)
			if err != nil {
				t.Errorf("next TryAcquire = %v", err)
				return seen
			}
			n.Release(ctx)
		}
		n, err := next.TryAcquire(ctx, name) // the third holds
		if err != nil {
			t.Errorf("third TryAcquire = %v", err)
			return seen
		}
		seen = direct.Get(ctx, key).Val()
		if err := n.Extend(ctx, 10*time.Second); err != nil {
			t.Errorf("Extend = %v", err)
		}
	case "fair/handover":
		a, err := next.TryAcquire(ctx, name)
		if err != nil {
			t.Errorf("next TryAcquire = %v", err)
			return seen
		}
		got := make(chan *dlock.Lock, 1)
		go func() {
			w, _ := newClient(t, direct, dlock.WithAutoExtend(false)).Acquire(ctx, name)
			got <- w
		}()
		waitFor(time.Second, func() bool { return direct.LLen(ctx, key+":q").Val() == 1 })
		seen = direct.Get(ctx, key).Val()
		a.Release(ctx) // handed to the waiter, who holds it now
		if w := <-got; w != nil {
			t.Cleanup(func() { w.Release(context.WithoutCancel(ctx)) })
		}
	case "unfair/next-lease-with-a-shorter-ttl":
		short := newClient(t, direct, dlock.LeaseTTL(200*time.Millisecond), dlock.WithAutoExtend(false))
		n, err := short.TryAcquire(ctx, name)
		if err != nil {
			t.Errorf("next TryAcquire = %v", err)
			return seen
		}
		n.Release(ctx)
		seen = direct.Get(ctx, key).Val()
		time.Sleep(300 * time.Millisecond) // its tombstone (200ms) is gone; ours had 10s
	case "unfair/force-release":
		if _, err := next.TryAcquire(ctx, name); err != nil { // a holder that died
			t.Errorf("next TryAcquire = %v", err)
			return seen
		}
		seen = direct.Get(ctx, key).Val()
		if ok, err := next.ForceRelease(ctx, name); !ok || err != nil {
			t.Errorf("ForceRelease = %v, %v", ok, err)
		}
	}
	return seen
}

// The same through an extension: extend.lua rewrites the value with the
// latest two "+" entries (history() of a held value), so the third lease
// after P forgets P as soon as it is extended. A fair Acquire of P delayed
// in the network lands while that lease holds, is queued (nothing names
// P), and the lease's release hands the lock to P, which nobody holds.
func TestDelayedFairAcquireAfterTheThirdLeaseExtended(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a long fault/timing scenario; run without -short")
	}
	p, rdb, direct := proxied(t, 3, 300*time.Millisecond)
	ctx := t.Context()
	name := "revocation-third-extends"
	key := "dlock:{" + name + "}"
	c := newClient(t, rdb, dlock.LeaseTTL(5*time.Second), dlock.WithAutoExtend(false))
	next := newClient(t, direct, dlock.WithAutoExtend(false))

	l, start := delayedThenResent(t, p, c.Acquire, name) // an Acquire: its attempts queue
	pToken := l.Token()
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for range 2 { // two leases come and go
		n, err := next.TryAcquire(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if err := n.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	x, err := next.TryAcquire(ctx, name) // the third holds: its value names P
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the third lease's value: %q", direct.Get(ctx, key).Val())
	if err := x.Extend(ctx, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("after its extension: %q", direct.Get(ctx, key).Val())
	if d := time.Since(start); d > 900*time.Millisecond {
		t.Skipf("too slow to beat the delayed request (%v)", d)
	}
	time.Sleep(time.Until(start.Add(1500 * time.Millisecond))) // the delayed original has landed
	t.Logf("queue: %q", direct.LRange(ctx, key+":q", 0, -1).Val())
	if err := x.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if liveKeys(ctx, direct, key) != 0 {
		_, terr := newClient(t, direct).TryAcquire(ctx, name)
		t.Errorf("the delayed Acquire of lease %s, released before the current (third) lease, was queued and handed the lock: value %q, pttl %v; TryAcquire = %v",
			pToken, direct.Get(ctx, key).Val(), direct.PTTL(ctx, key).Val(), terr)
	}
}

// ForceRelease marks the holder's lease ended ("0") for the operator
// Client's revocation window, min(its TTL, 1 min), not the holder's. The
// holder learns of the loss at its next extension, or from Release: "Release
// returns an error wrapping ErrNotHeld if the lock was lost before Release
// (the critical section may have overlapped with another holder's)". Here
// the operator's Client has a short TTL (the CLI's default is 10s against a
// holder's minute), another client takes the name meanwhile, and the
// holder releases after the marker is gone but before its watchdog's next
// extension: Release must still report the loss.
// (Against the committed scripts this holds, release.lua returning 0 for a
// lease it knows nothing of; it fails with the uncommitted change that
// counts such a lease as released, return 2.)
func TestForcedHolderIsToldAfterTheMarkerExpired(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	name := "revocation-forced"
	holder := newClient(t, rdb, dlock.LeaseTTL(6*time.Second)) // the watchdog extends every 2s
	l, err := holder.TryAcquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	operator := newClient(t, rdb, dlock.LeaseTTL(200*time.Millisecond))
	if ok, err := operator.ForceRelease(ctx, name); !ok || err != nil {
		t.Fatalf("ForceRelease = %v, %v", ok, err)
	}
	other, err := newClient(t, rdb, dlock.WithAutoExtend(false)).TryAcquire(ctx, name)
	if err != nil {
		t.Fatalf("another client's TryAcquire after the forced release = %v", err)
	}
	time.Sleep(400 * time.Millisecond) // the holder's marker (200ms) is gone; its next extension is 1.6s away
	if err := l.Release(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Release of a lease forced out while another client took the lock = %v, want ErrNotHeld (value now %q)",
			err, rdb.Get(ctx, "dlock:{"+name+"}").Val())
	}
	other.Release(ctx)
}

// A request delayed in the network past its caller's timeout lands after
// the caller's undo: it must not take the lock for nobody. With go-redis's
// retries on, the re-sent copy takes the lock at once, the delayed original
// lands after Release: it must not take it again either.
func TestDelayedAcquireAfterUndoTakesNothing(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a long fault/timing scenario; run without -short")
	}
	for _, retries := range []int{-1, 3} {
		p, rdb, direct := proxied(t, retries, 300*time.Millisecond)
		for _, m := range modes(t, rdb, false) {
			name := "delayed-" + m.name
			// The Client's scripts loaded first: the delayed request is
			// the acquire itself, not the load that precedes a Client's
			// first attempt.
			c := m.new(t, dlock.LeaseTTL(5*time.Second))
			if warm, err := c.TryAcquire(m.ctx(t.Context()), name+"-warm"); err == nil {
				warm.Release(t.Context())
			}
			p.Delay(time.Second, 0)
			start := time.Now()
			done := make(chan struct{})
			go func() {
				defer close(done)
				time.Sleep(100 * time.Millisecond) // the acquire has crossed into the proxy
				p.Delay(0, 0)                      // the undo (or re-sent copy) goes straight through
			}()
			l, err := c.TryAcquire(m.ctx(t.Context()), name)
			<-done
			switch {
			case retries < 0 && err == nil:
				t.Errorf("%s, no retries: TryAcquire through a 1s delay with a 300ms read timeout succeeded", m.name)
			case retries > 0 && err != nil:
				t.Errorf("%s, retries: TryAcquire = %v, want the re-sent copy's lock", m.name, err)
			}
			if l != nil {
				if err := l.Release(t.Context()); err != nil {
					t.Errorf("%s: Release = %v", m.name, err)
				}
			}
			time.Sleep(time.Until(start.Add(1500 * time.Millisecond))) // the delayed original has landed
			if n := liveKeys(t.Context(), direct, "dlock:{"+name+"}"); n != 0 {
				t.Errorf("%s, retries %d: the lock key exists after the delayed request landed: a lease held by nobody", m.name, retries)
			}
		}
	}
}

// An attempt whose outcome is unknown is undone and its token revoked for
// min(TTL, 1 minute), so a copy still in the network is refused when it
// lands — also when the lease that held the lock meanwhile expired, or
// released with a shorter TTL than the undoer's: the revocation must not
// live in that lease's key.
func TestUndoneAttemptStaysRevokedAfterTheHoldersKeyIsGone(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a long fault/timing scenario; run without -short")
	}
	p, rdb, direct := proxied(t, -1, 200*time.Millisecond)
	for _, fair := range []bool{false, true} {
		for _, how := range []string{"holder-expires", "holder-releases-with-shorter-ttl"} {
			t.Run(fmt.Sprintf("fair=%v/%s", fair, how), func(t *testing.T) {
				ctx := t.Context()
				name := fmt.Sprintf("model-undo-%v-%s", fair, how)
				key := "dlock:{" + name + "}"
				holderTTL := 400 * time.Millisecond
				holderC := newClient(t, direct, waiting(fair), dlock.WithAutoExtend(false), dlock.LeaseTTL(holderTTL))
				holder, err := holderC.TryAcquire(ctx, name)
				if err != nil {
					t.Fatal(err)
				}
				// The waiter (TTL 5s) tries through a network that holds its
				// request for 1s; its read times out after 200ms and it undoes
				// the attempt (the undo goes straight through).
				waiter := newClient(t, rdb, waiting(fair), dlock.LeaseTTL(5*time.Second))
				p.Delay(time.Second, 0)
				start := time.Now()
				go func() {
					time.Sleep(100 * time.Millisecond) // the acquire has crossed into the proxy
					p.Delay(0, 0)
				}()
				if l, err := waiter.TryAcquire(ctx, name); err == nil {
					l.Release(ctx)
					t.Fatal("TryAcquire through a 1s delay with a 200ms read timeout succeeded")
				}
				v := direct.Get(ctx, key).Val()
				t.Logf("after the undo: value %q, pttl %v", v, direct.PTTL(ctx, key).Val())
				if how == "holder-releases-with-shorter-ttl" {
					if err := holder.Release(ctx); err != nil {
						t.Fatal(err)
					}
					t.Logf("tombstone after the holder's release: %q (pttl %v)", direct.Get(ctx, key).Val(), direct.PTTL(ctx, key).Val())
				}
				// 1.4s after the attempt was sent — well within the undoer's 5s
				// revocation window — the delayed original has landed.
				time.Sleep(time.Until(start.Add(1400 * time.Millisecond)))
				v = direct.Get(ctx, key).Val()
				if n := liveKeys(ctx, direct, key); n != 0 {
					pttl := direct.PTTL(ctx, key).Val()
					other := newClient(t, direct, waiting(fair))
					_, terr := other.TryAcquire(ctx, name)
					t.Errorf("a request undone %v ago (revocation promised for the TTL, 5s) took the lock for nobody: value %q, pttl %v; another TryAcquire = %v",
						time.Since(start).Round(time.Millisecond), v, pttl, terr)
				}
			})
		}
	}
}

// A lease's acquire delayed in the network while go-redis's re-sent copy
// takes the lock: the lease does its work and releases, another lease comes
// and goes, and the delayed original must still be refused when it lands.
func TestDelayedAcquireAfterTwoLeasesTakesNothing(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a long fault/timing scenario; run without -short")
	}
	p, rdb, direct := proxied(t, 3, 300*time.Millisecond)
	for _, fair := range []bool{false, true} {
		t.Run(fmt.Sprint("fair=", fair), func(t *testing.T) {
			ctx := t.Context()
			name := fmt.Sprint("model-delayed-acq-", fair)
			key := "dlock:{" + name + "}"
			c := newClient(t, rdb, waiting(fair), dlock.LeaseTTL(5*time.Second), dlock.WithAutoExtend(false))
			other := newClient(t, direct, waiting(fair), dlock.WithAutoExtend(false))
			if warm, err := c.TryAcquire(ctx, name+"-warm"); err == nil { // the scripts are loaded
				warm.Release(ctx)
			}
			p.Delay(time.Second, 0)
			start := time.Now()
			go func() {
				time.Sleep(100 * time.Millisecond) // the acquire has crossed into the proxy
				p.Delay(0, 0)                      // the re-sent copy goes straight through
			}()
			l, err := c.TryAcquire(ctx, name)
			if err != nil {
				t.Fatalf("TryAcquire = %v, want the re-sent copy's lock", err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			n, err := other.TryAcquire(ctx, name) // the next lease comes and goes
			if err != nil {
				t.Fatal(err)
			}
			if err := n.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if d := time.Since(start); d > 900*time.Millisecond {
				t.Skipf("too slow to beat the delayed request (%v)", d)
			}
			time.Sleep(time.Until(start.Add(1500 * time.Millisecond))) // the delayed original has landed
			if liveKeys(ctx, direct, key) != 0 {
				_, terr := newClient(t, direct, waiting(fair)).TryAcquire(ctx, name)
				t.Errorf("the delayed original of a released lease took the lock %v after it was sent: value %q, pttl %v; TryAcquire = %v",
					time.Since(start).Round(time.Millisecond), direct.Get(ctx, key).Val(), direct.PTTL(ctx, key).Val(), terr)
			}
		})
	}
}
