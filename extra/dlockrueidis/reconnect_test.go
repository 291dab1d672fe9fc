package dlockrueidis

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/redistest"
)

// Opening a pub/sub connection to a stalled server (TCP accepted,
// handshake unanswered) ends with its context, although rueidis dials and
// greets a dedicated connection with no context; Close, after it, too.
func TestPubSubOpenEndsWithItsContext(t *testing.T) {
	// Serial: bounds how soon PubSub returns.
	s := redistest.Start(t, redistest.TCP())
	p := redistest.NewProxy(t, s.Addr())
	conn := Conn(client(t, p.Addr()))
	ctx := ctxT(t, 30*time.Second)
	ps, err := conn.PubSub(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	ps.Close()
	p.Cut()
	p.Stall() // new connections: accepted, nothing crosses
	defer p.Cut()
	octx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = conn.PubSub(octx, "")
	if d := time.Since(start); d > 1500*time.Millisecond || err == nil {
		t.Fatalf("PubSub to a stalled server with a 300ms context: %v after %v", err, d)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("PubSub to a stalled server: %v, want its context's error", err)
	}
}

// The last waiter of a channel leaves while the hub's pub/sub connection
// reconnects to a stalled server; after linger the hub drops the channel:
// an Acquire of the Client still ends with its context (the hub waits on
// no network under its lock).
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
