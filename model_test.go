package dlock_test

// Tests of the data model's seams (see lib.lua): the lock key holding the
// lease's token, a marker key per lease, fences issued when asked for. Each
// was first written against a version that failed it (one that kept the
// ended leases' memory in the lock's own value).

import (
	"fmt"
	"testing"
	"time"

	"github.com/dlockio/dlock"
)

// An attempt whose outcome is unknown is undone and its token revoked for
// min(TTL, 1 minute), so a copy still in the network is refused when it
// lands — also when the lease that held the lock meanwhile expired, or
// released with a shorter TTL than the undoer's: the revocation must not
// live in that lease's key.
func TestUndoneAttemptStaysRevokedAfterTheHoldersKeyIsGone(t *testing.T) {
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
