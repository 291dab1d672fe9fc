package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlockio/dlock"
)

// A waiter's queueing request held in the network lands after its caller
// gave up, after the undo, and after its lease's revocation window
// (min(TTL, 1 min)) has lapsed: nothing refuses it any more, and it joins
// the queue for nobody. Its place in line must lapse with the window, as
// the marker that would have refused it did: the docs bound what a request
// delayed past the window can do to one TTL. A queue entry lived max(TTL,
// 1s), so with a lease of 60ms the dead entry held the line for a second:
//
//   - read-write lock: a writer's entry at the head kept every new reader
//     out while a read was held;
//   - semaphore: the dead waiter's entry kept out a caller whose larger N
//     had room;
//   - fair lock, election: the holder's release, a few windows after the
//     landing, handed the lock (the leadership) to the dead entry instead
//     of freeing it.
//
// The read-write lock and the semaphore are polled from the landing: the
// line must be free well within 500ms — the window is 60ms, and 500ms is
// generous for a loaded machine and half of the old entry's second (only
// a slowdown of the test could make the old code pass, never one make the
// fixed code fail). The fair lock and the election are released 4 windows
// after the landing, and a new caller must get them at once.
func TestLateQueueingRequestHoldsTheLineOneWindow(t *testing.T) {
	if testing.Short() {
		t.Skip("a long fault/timing scenario; run without -short")
	}
	const (
		ttl   = 60 * time.Millisecond // the late waiter's lease, and so its windows
		bound = 500 * time.Millisecond
	)
	for _, kind := range []string{"fair", "semaphore", "rw", "election"} {
		t.Run(kind, func(t *testing.T) {
			p, rdb, direct := proxied(t, -1, 300*time.Millisecond)
			ctx := t.Context()
			name := "late-queue-" + kind
			key := semKey(name)
			// The late waiter reaches Redis through the proxy; everyone else
			// directly, with leases far longer than the test.
			late := newClient(t, rdb, pipelined(false))
			other := newClient(t, direct, dlock.LeaseTTL(10*time.Second))
			var (
				holder *dlock.Lock
				wait   func(context.Context) error // the late waiter's Acquire
				probe  func() (bool, error)        // whether the line is free of the dead entry
				resign func() error                // fair lock, election: the holder's release
				err    error
			)
			admitted := func(l *dlock.Lock, err error) (bool, error) {
				if l != nil {
					return true, l.Release(ctx)
				}
				if errors.Is(err, dlock.ErrNotAcquired) {
					return false, nil
				}
				return false, err
			}
			switch kind {
			case "fair":
				holder, err = other.TryAcquire(ctx, name)
				wait = func(ctx context.Context) error {
					_, err := late.Acquire(ctx, name, dlock.LeaseTTL(ttl))
					return err
				}
				probe = func() (bool, error) { return admitted(other.TryAcquire(ctx, name)) }
			case "semaphore":
				holder, err = newSemaphore(t, other, name, 1).TryAcquire(ctx)
				s := newSemaphore(t, late, name, 1)
				wait = func(ctx context.Context) error {
					_, err := s.Acquire(ctx, dlock.LeaseTTL(ttl))
					return err
				}
				// One permit is held: a caller with N=2 has room, unless a
				// waiter with N=1 is ahead of it.
				roomy := newSemaphore(t, other, name, 2)
				probe = func() (bool, error) { return admitted(roomy.TryAcquire(ctx)) }
			case "rw":
				holder, err = newRW(t, other, name).Reader().TryAcquire(ctx)
				w := newRW(t, late, name).Writer()
				wait = func(ctx context.Context) error {
					_, err := w.Acquire(ctx, dlock.LeaseTTL(ttl))
					return err
				}
				r := newRW(t, other, name).Reader()
				probe = func() (bool, error) { return admitted(r.TryAcquire(ctx)) }
			case "election":
				var ld *dlock.Leadership
				ld, err = newElection(t, other, name).Campaign(ctx, "leader")
				if ld != nil {
					holder = ld.Lock()
				}
				e := newElection(t, late, name)
				wait = func(ctx context.Context) error {
					_, err := e.Campaign(ctx, "late", dlock.LeaseTTL(ttl))
					return err
				}
				next := newElection(t, other, name)
				probe = func() (bool, error) {
					ld, err := next.Campaign(ctx, "next", dlock.MaxWait(0))
					if ld != nil {
						return true, ld.Resign(ctx)
					}
					return admitted(nil, err)
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			if kind == "fair" || kind == "election" {
				resign = func() error { return holder.Release(ctx) }
			} else {
				defer holder.Release(ctx)
			}

			// The late Client's scripts are loaded first (a first attempt
			// loads them before its clock starts), so that the request held
			// below is the queueing one itself.
			warm(t, ctx, late, kind, name+"-warm")

			// The waiter's request is held 600ms; it gives up after 250ms,
			// and its undo (on a new connection, no longer delayed) revokes
			// the lease for 60ms. The request lands some 300ms after that.
			p.Delay(600*time.Millisecond, 0)
			go func() {
				time.Sleep(100 * time.Millisecond) // the request has crossed into the proxy
				p.Delay(0, 0)
			}()
			wctx, cancel := context.WithTimeout(ctx, 250*time.Millisecond)
			if err := wait(wctx); !errors.Is(err, dlock.ErrNotAcquired) {
				t.Fatalf("the late waiter's Acquire = %v, want it to give up (ErrNotAcquired)", err)
			}
			cancel()
			if !waitFor(3*time.Second, func() bool { return direct.LLen(ctx, key+":q").Val() == 1 }) {
				t.Fatalf("the held request never queued (queue %v): the test did not make the late landing it is about",
					direct.LRange(ctx, key+":q", 0, -1).Val())
			}
			landed := time.Now()
			dead := direct.LIndex(ctx, key+":q", 0).Val()
			t.Logf("the late request queued for nobody: entry %q", direct.HGet(ctx, key+":qw", dead).Val())

			if resign == nil {
				var free bool
				for !free && time.Since(landed) < 3*time.Second {
					if free, err = probe(); err != nil {
						t.Fatal(err)
					}
					if !free {
						time.Sleep(10 * time.Millisecond)
					}
				}
				d := time.Since(landed)
				t.Logf("the line was free %v after the landing", d.Round(time.Millisecond))
				if !free || d > bound {
					t.Errorf("the line was free of the dead waiter's entry %v after it landed (free: %v), want within %v: its lease was %v, and its place in line must lapse with its revocation window",
						d.Round(time.Millisecond), free, bound, ttl)
				}
				return
			}
			time.Sleep(time.Until(landed.Add(4 * ttl)))
			if err := resign(); err != nil {
				t.Fatalf("the holder's release = %v", err)
			}
			free, err := probe()
			if err != nil {
				t.Fatal(err)
			}
			if !free {
				t.Errorf("released %v after the dead entry landed (its lease %v), the lock went to it, not to the next caller: the lock holds %q",
					time.Since(landed).Round(time.Millisecond), ttl, direct.Get(ctx, key).Val())
			}
		})
	}
}
