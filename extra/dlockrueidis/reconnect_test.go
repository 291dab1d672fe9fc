package dlockrueidis

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/driver"
	"github.com/dlockio/dlock/internal/leakcheck"
	"github.com/dlockio/dlock/internal/redistest"
)

// a PubSub whose connection broke and whose reconnection meets a
// stalled server (TCP accepted, handshake unanswered): Close must not wait
// on the network (driver contract), yet the run goroutine is inside
// rueidis's Dedicate (a synchronous dial + HELLO, no context) and Close
// waits for it (wg.Wait).
func TestPubSubCloseDuringStalledReconnect(t *testing.T) {
	// Serial: bounds how soon Close returns.
	leakcheck.Check(t)
	s := redistest.Start(t, redistest.TCP())
	p := redistest.NewProxy(t, s.Addr())
	conn := Conn(client(t, p.Addr()))
	ctx := ctxT(t, 30*time.Second)
	ps, _ := conn.PubSub(ctx, "")
	defer ps.Close()
	if err := ps.Subscribe(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	expect(t, ps, driver.Message{Kind: "subscribe", Channel: "a"})
	p.Cut()
	p.Stall() // new connections: accepted, nothing crosses
	for deadline := time.Now().Add(5 * time.Second); leakcheck.Count(t, "(*pubsub).dedicate") == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("PubSub never began to reconnect after the cut")
		}
	}
	start := time.Now()
	ps.Close()
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Fatalf("PubSub.Close during a stalled reconnection took %v", d)
	}
}

// the same through the hub: the last waiter of a channel leaves while
// the pub/sub connection reconnects to a stalled server; after linger the
// hub closes the connection under its lock, and every Acquire of the Client
// waits for it, past its own context.
func TestStalledReconnectDoesNotHoldAcquire(t *testing.T) {
	// Serial: bounds how soon an Acquire returns.
	_, p, bg := heldBehindProxy(t, "x", "z")
	c := newDlock(t, p.Addr())
	xctx, xcancel := context.WithTimeout(bg, 700*time.Millisecond)
	defer xcancel()
	c.Acquire(xctx, "x") // subscribes x, then leaves: dropped after linger (500ms)
	p.Cut()
	p.Stall()
	time.Sleep(800 * time.Millisecond) // the hub's drop now waits in ps.Close
	start := time.Now()
	zctx, zcancel := context.WithTimeout(bg, 300*time.Millisecond)
	_, err := c.Acquire(zctx, "z")
	zcancel()
	d := time.Since(start)
	p.Cut()
	if d > 1500*time.Millisecond {
		t.Fatalf("Acquire with a 300ms context returned after %v (%v)", d, err)
	}
}

// ordering across a reconnect: while the connection is down,
// Unsubscribe a then Subscribe a; afterwards a must be subscribed.
// And Subscribe b then Unsubscribe b: b must not be.
func TestPubSubKeepsCallOrderAcrossReconnect(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t, redistest.TCP())
	p := redistest.NewProxy(t, s.Addr())
	conn := Conn(client(t, p.Addr()))
	direct := Conn(client(t, s.Addr()))
	ctx := ctxT(t, 30*time.Second)
	for round := range 5 {
		ps, _ := conn.PubSub(ctx, "")
		if err := ps.Subscribe(ctx, "a"); err != nil {
			t.Fatal(err)
		}
		expect(t, ps, driver.Message{Kind: "subscribe", Channel: "a"})
		p.Cut()
		if round%2 == 1 {
			time.Sleep(time.Duration(round) * 5 * time.Millisecond)
		}
		ps.Unsubscribe(ctx, "a")
		ps.Subscribe(ctx, "a")
		ps.Subscribe(ctx, "b")
		ps.Unsubscribe(ctx, "b")
		// Lets the calls made while down settle after the reconnection: b
		// may be subscribed for a moment, then unsubscribed.
		time.Sleep(500 * time.Millisecond)
		na, _ := direct.Do(ctx, "PUBSUB", "NUMSUB", "a", "b")
		t.Logf("round %d: NUMSUB %v", round, na)
		got := map[string]bool{}
		deadline := time.Now().Add(2 * time.Second)
		for time.Now().Before(deadline) && !got["a"] {
			direct.Do(ctx, "PUBLISH", "a", "x")
			direct.Do(ctx, "PUBLISH", "b", "y")
			for {
				m, err := recv(t, ps, 50*time.Millisecond)
				if errors.Is(err, context.DeadlineExceeded) {
					break
				}
				if err == nil && m.Kind == "message" {
					got[m.Channel] = true
				}
			}
		}
		ps.Close()
		if !got["a"] || got["b"] {
			t.Fatalf("round %d: messages received on %v, want a only", round, got)
		}
	}
}

// a waiter whose pub/sub connection was cut is still woken by the
// release (its own timers are 20s).
func TestWaiterWokenAfterPubSubCut(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t, redistest.TCP())
	p := redistest.NewProxy(t, s.Addr())
	slow := dlock.WithUnfair(func(int) time.Duration { return 20 * time.Second })
	holder := newDlock(t, s.Addr(), slow)
	bg, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for round := range 3 {
		l, err := holder.TryAcquire(bg, "x")
		if err != nil {
			t.Fatal(err)
		}
		c := newDlock(t, p.Addr(), slow)
		got := make(chan time.Time, 1)
		var werr error
		go func() {
			ctx, cancel := context.WithTimeout(bg, 15*time.Second)
			defer cancel()
			wl, err := c.Acquire(ctx, "x")
			for i := 0; err != nil && ctx.Err() == nil && i < 3; i++ {
				wl, err = c.Acquire(ctx, "x") // (an attempt in flight at the cut fails with it)
			}
			if err == nil {
				at := time.Now()
				wl.Release(bg)
				got <- at
			} else {
				werr = err
				got <- time.Time{}
			}
		}()
		if !listening(t, s, "dlock:{x}:ch") {
			t.Fatal("the waiter never subscribed")
		}
		time.Sleep(200 * time.Millisecond)
		p.Cut()
		time.Sleep(time.Duration(100+300*round) * time.Millisecond)
		rel := time.Now()
		l.Release(bg)
		at := <-got
		if at.IsZero() || at.Sub(rel) > 2*time.Second {
			t.Fatalf("round %d: waiter got the lock %v after the release (%v)", round, at.Sub(rel), werr)
		}
		t.Logf("round %d: woken %v after the release", round, at.Sub(rel))
	}
}

// listening reports whether channel has a subscriber on s, within 5s.
func listening(t *testing.T, s *redistest.Server, channel string) bool {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		v, err := s.Do(context.Background(), "PUBSUB", "NUMSUB", channel)
		if r, ok := v.([]any); err == nil && ok && len(r) == 2 && r[1] == int64(1) {
			return true
		}
	}
	return false
}
