package pubsub

import (
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/internal/redistest"
)

// A channel whose SUBSCRIBE is sent and not yet confirmed is not listened
// to, and Join does not add to it, while the connection's other channels
// are; once the connection is back (subscribed again) every channel is.
func TestChannelNotListenedToUntilItsSubscribeIsConfirmed(t *testing.T) {
	t.Parallel()
	bothModes(t, func(t *testing.T, sharded bool) {
		h, _, _, p := startHub(t, sharded)
		defer h.Close()
		a, wakeA := subscribe(t, h, "a", "a")
		p.StallReplies()
		wakeB := make(chan int64, 1)
		b, _ := h.Subscribe("b", "b", wakeB)
		if h.Listening("b") || h.Join("b", "x", make(chan int64, 1)) != nil {
			t.Error("a channel whose SUBSCRIBE is unconfirmed is listened to")
		}
		if !h.Listening("a") || h.Join("a", "y", make(chan int64, 1)) == nil {
			t.Error("a confirmed channel is not listened to while another's SUBSCRIBE is unconfirmed")
		}
		p.Cut()
		expect(t, "a", wakeA, Recheck)
		for deadline := time.Now().Add(10 * time.Second); !h.Listening("b"); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("b not listened to 10s after the connection came back")
			}
		}
		if h.Join("b", "x", make(chan int64, 1)) == nil {
			t.Error("Join on b = nil once it is confirmed")
		}
		a.Close()
		b.Close()
	})
}

// Many channels come back together after a break; waiters that leave
// while the connection is down have their channels dropped, not
// subscribed again; waiters that arrive meanwhile (Join refuses them, on
// a channel of its own too) are subscribed once it is back; every waiter
// left is woken with Recheck and then by a release.
func TestHubComesBackWithManyChannelsAndWaitersThatCameAndWent(t *testing.T) {
	t.Parallel()
	bothModes(t, func(t *testing.T, sharded bool) {
		h, rdb, s, _ := startHub(t, sharded)
		defer h.Close()
		const n = 16
		ws := map[string]*Waiter{}
		wakes := map[string]chan int64{}
		for i := range n {
			ch := fmt.Sprint("ch", i)
			ws[ch], wakes[ch] = subscribe(t, h, ch, "a")
		}
		s.Kill()
		for i := range n {
			waitDeaf(t, h, fmt.Sprint("ch", i))
		}
		for i := range n / 2 { // leave
			ch := fmt.Sprint("ch", i)
			ws[ch].Close()
			delete(ws, ch)
			delete(wakes, ch)
		}
		for i := n; i < n+n/2; i++ { // arrive
			ch := fmt.Sprint("ch", i)
			if h.Join(ch, "j", make(chan int64, 1)) != nil || h.Join(fmt.Sprint("ch", n-1), "j", make(chan int64, 1)) != nil {
				t.Fatal("Join added a waiter while the connection was down")
			}
			wakes[ch] = make(chan int64, 1)
			ws[ch], _ = h.Subscribe(ch, "a", wakes[ch])
		}
		time.Sleep(2 * linger) // (the channels left are dropped meanwhile)
		s.Restart()
		for ch, wake := range wakes {
			expect(t, ch, wake, Recheck)
		}
		publish, numsub := rdb.Publish, s.Client(t).PubSubNumSub
		if sharded {
			publish, numsub = rdb.SPublish, s.Client(t).PubSubShardNumSub
		}
		for ch, wake := range wakes {
			if !h.Listening(ch) {
				t.Errorf("%s not listened to after the server came back", ch)
			}
			publish(t.Context(), ch, WakeAll)
			expect(t, ch, wake, Released)
		}
		for i := range n / 2 {
			ch := fmt.Sprint("ch", i)
			if got := numsub(t.Context(), ch).Val()[ch]; got != 0 || h.Listening(ch) {
				t.Errorf("%s, left while the connection was down, subscribed again (%d subscribers)", ch, got)
			}
		}
		for _, w := range ws {
			w.Close()
		}
	})
}

// hubWithWaiter starts a plain hub through a proxy (startHubReading, with
// the client's readTimeout) with a waiter "a" on "ch" whose subscription
// is confirmed; both are closed in t's cleanup, before the leak check.
func hubWithWaiter(t *testing.T, readTimeout time.Duration) (*Hub, *redis.Client, *redistest.Proxy, chan int64) {
	t.Helper()
	h, rdb, _, p := startHubReading(t, false, readTimeout)
	t.Cleanup(h.Close)
	w, wake := subscribe(t, h, "ch", "a")
	t.Cleanup(w.Close)
	return h, rdb, p, wake
}

// eachReadTimeout runs f as parallel subtests on a hubWithWaiter whose
// client has go-redis's default read timeout, then none: the hub decides
// when a connection is let go, not the client.
func eachReadTimeout(t *testing.T, f func(t *testing.T, h *Hub, rdb *redis.Client, p *redistest.Proxy, wake chan int64)) {
	for name, readTimeout := range map[string]time.Duration{"default read timeout": 0, "no read timeout": -1} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h, rdb, p, wake := hubWithWaiter(t, readTimeout)
			f(t, h, rdb, p, wake)
		})
	}
}

// A connection on which nothing arrives for longer than the health check
// is pinged, not replaced: its waiters are not woken, and a release after
// the silence reaches them.
func TestSilentConnectionIsKept(t *testing.T) {
	if testing.Short() {
		t.Skip("waits past the health check")
	}
	t.Parallel()
	h, rdb, _, wake := hubWithWaiter(t, 0)
	select {
	case got := <-wake:
		t.Fatalf("a waiter on a silent connection woken with %d", got)
	case <-time.After(healthCheck + 5*time.Second):
	}
	if !h.Listening("ch") {
		t.Error("a silent connection was let go")
	}
	rdb.Publish(t.Context(), "ch", WakeAll)
	expect(t, "a", wake, Released)
}

// A connection that stops answering (everything sent on it held, pings
// included) is let go once a ping sent after a silence of healthCheck went
// unanswered for another healthCheck: the hub stops listening on it, and
// once the network is back it listens again, wakes its waiters (Recheck)
// and a release reaches them. The hub decides, not the client: so also on
// a client that would wait for a reply for ever (no read timeout).
func TestUnansweredPingLetsTheConnectionGo(t *testing.T) {
	if testing.Short() {
		t.Skip("waits past the health check twice")
	}
	t.Parallel()
	eachReadTimeout(t, func(t *testing.T, h *Hub, rdb *redis.Client, p *redistest.Proxy, wake chan int64) {
		p.Stall()
		for deadline := time.Now().Add(2*healthCheck + 15*time.Second); h.Listening("ch"); time.Sleep(100 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the hub still listens on a connection that answered nothing for", 2*healthCheck+15*time.Second)
			}
		}
		p.Cut() // (the network is back)
		expect(t, "a", wake, Recheck)
		if !h.Listening("ch") {
			t.Error("not listening once the waiter was woken")
		}
		if err := rdb.Publish(t.Context(), "ch", WakeAll).Err(); err != nil {
			t.Fatal(err)
		}
		expect(t, "a", wake, Released)
	})
}

// A PING whose reply comes late, but within netTimeout, keeps the
// connection: its waiter is not woken, and a release still reaches it.
func TestLatePongKeepsTheConnection(t *testing.T) {
	if testing.Short() {
		t.Skip("waits past the health check")
	}
	t.Parallel()
	eachReadTimeout(t, func(t *testing.T, h *Hub, rdb *redis.Client, p *redistest.Proxy, wake chan int64) {
		p.Delay(0, netTimeout-2*time.Second)
		select {
		case got := <-wake:
			t.Fatalf("woken with %d: a connection whose PING was answered late was let go", got)
		case <-time.After(healthCheck + netTimeout + 15*time.Second):
		}
		if !h.Listening("ch") {
			t.Fatal("not listening on a connection that answers late")
		}
		p.Delay(0, 0)
		if err := rdb.Publish(t.Context(), "ch", WakeAll).Err(); err != nil {
			t.Fatal(err)
		}
		select {
		case got := <-wake:
			if got != Released {
				t.Fatalf("woken with %d, want Released", got)
			}
		case <-time.After(netTimeout + 5*time.Second):
			t.Fatal("a release did not reach the waiter")
		}
	})
}
