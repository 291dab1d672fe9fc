package pubsub

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/internal/goredisdriver"
	"github.com/dlockio/dlock/internal/leakcheck"
	"github.com/dlockio/dlock/internal/redistest"
)

// start returns a client of a new server. The leak check runs after the
// server is stopped and before the client is closed (which would end the
// readers of connections the hub left open): every hub must have closed
// its connections by then.
func start(t *testing.T) *redis.Client {
	var rdb *redis.Client
	t.Cleanup(func() { rdb.Close() })
	leakcheck.Check(t)
	rdb = redis.NewClient(redistest.Start(t).Options())
	return rdb
}

// startHub starts a TCP server and a proxy to it, and returns a hub, plain
// or sharded, whose connections go through the proxy, and the client it
// uses. The leak check runs as in start.
func startHub(t *testing.T, sharded bool) (*Hub, *redis.Client, *redistest.Server, *redistest.Proxy) {
	return startHubReading(t, sharded, 0)
}

// startHubReading is startHub with the client's ReadTimeout (0: go-redis's
// default, -1: none).
func startHubReading(t *testing.T, sharded bool, readTimeout time.Duration) (*Hub, *redis.Client, *redistest.Server, *redistest.Proxy) {
	var rdb *redis.Client
	t.Cleanup(func() { rdb.Close() })
	leakcheck.Check(t)
	s := redistest.Start(t, redistest.TCP())
	p := redistest.NewProxy(t, s.Addr())
	rdb = redis.NewClient(&redis.Options{Addr: p.Addr(), ReadTimeout: readTimeout})
	return New(goredisdriver.Conn(rdb), sharded), rdb, s, p
}

// waitDeaf waits until h no longer listens on channel: its connection
// failed.
func waitDeaf(t *testing.T, h *Hub, channel string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); h.Listening(channel); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the hub still listens on %q 10s after the server died", channel)
		}
	}
}

// bothModes runs f as two subtests: on plain, then on sharded pub/sub.
func bothModes(t *testing.T, f func(t *testing.T, sharded bool)) {
	for _, sharded := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "sharded"}[sharded], func(t *testing.T) { f(t, sharded) })
	}
}

// subscribe adds a waiter with its own wake channel and waits for the
// subscription's confirmation.
func subscribe(t *testing.T, h *Hub, channel, token string) (*Waiter, chan int64) {
	t.Helper()
	wake := make(chan int64, 1)
	w, ready := h.Subscribe(channel, token, wake)
	select {
	case <-ready:
	case <-time.After(5 * time.Second):
		t.Fatalf("subscription to %q not confirmed", channel)
	}
	return w, wake
}

func expect(t *testing.T, who string, wake chan int64, want int64) {
	t.Helper()
	select {
	case got := <-wake:
		if got != want {
			t.Errorf("%s woken with %d, want %d", who, got, want)
		}
	case <-time.After(5 * time.Second):
		t.Errorf("%s not woken, want %d", who, want)
	}
}

func expectNone(t *testing.T, who string, wake chan int64) {
	t.Helper()
	select {
	case got := <-wake:
		t.Errorf("%s woken with %d, want no wake-up", who, got)
	case <-time.After(100 * time.Millisecond):
	}
}

// waitUnsubscribed waits until the server counts no subscriber of channel:
// the hub let it go after linger.
func waitUnsubscribed(t *testing.T, rdb *redis.Client, channel string, sharded bool) {
	t.Helper()
	count := func() int64 {
		if sharded {
			return rdb.PubSubShardNumSub(context.Background(), channel).Val()[channel]
		}
		return rdb.PubSubNumSub(context.Background(), channel).Val()[channel]
	}
	for deadline := time.Now().Add(5 * time.Second); count() > 0; {
		if time.Now().After(deadline) {
			t.Fatalf("%q still subscribed 5s after its last waiter left", channel)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A release message wakes every waiter on the channel; a handover wakes
// only the waiter it names, also in the "<token> <fence>" form of earlier
// versions. Plain and sharded pub/sub work alike.
func TestWakeUps(t *testing.T) {
	bothModes(t, func(t *testing.T, sharded bool) {
		rdb := start(t)
		publish := rdb.Publish
		if sharded {
			publish = rdb.SPublish
		}
		h := New(goredisdriver.Conn(rdb), sharded)
		a, wakeA := subscribe(t, h, "ch", "a")
		b, wakeB := subscribe(t, h, "ch", "b")
		other, wakeOther := subscribe(t, h, "other", "a")
		ctx := t.Context()

		publish(ctx, "ch", WakeAll)
		expect(t, "a", wakeA, Released)
		expect(t, "b", wakeB, Released)
		expectNone(t, "a waiter on another channel", wakeOther)

		publish(ctx, "ch", "b") // a handover without a fence
		expect(t, "b", wakeB, HandedOver)
		expectNone(t, "a", wakeA)

		publish(ctx, "ch", "a 1234") // with its fence
		expect(t, "a", wakeA, 1234)
		expectNone(t, "b", wakeB)

		for _, w := range []*Waiter{a, b, other} {
			w.Close()
		}
		waitUnsubscribed(t, rdb, "ch", sharded)
		waitUnsubscribed(t, rdb, "other", sharded)
	})
}

// Join adds a waiter only to a channel already subscribed and confirmed.
// A channel stays subscribed for linger after its last waiter left, and
// is let go after it.
func TestJoinAndLinger(t *testing.T) {
	rdb := start(t)
	h := New(goredisdriver.Conn(rdb), false)
	wake := make(chan int64, 1)
	if h.Listening("ch") || h.Join("ch", "a", wake) != nil {
		t.Fatal("a channel nobody subscribed to is listened to")
	}
	first, _ := subscribe(t, h, "ch", "first")
	if !h.Listening("ch") {
		t.Fatal("Listening = false after a confirmed subscription")
	}
	joined := h.Join("ch", "a", wake)
	if joined == nil {
		t.Fatal("Join on a confirmed channel = nil")
	}
	first.Close()
	joined.Close()
	if !h.Listening("ch") {
		t.Error("Listening = false right after the last waiter left, want true for linger")
	}
	again := h.Join("ch", "b", wake) // within linger: reuses the subscription
	if again == nil {
		t.Fatal("Join within linger = nil")
	}
	time.Sleep(2 * linger)
	if !h.Listening("ch") {
		t.Error("a channel with a waiter was let go")
	}
	rdb.Publish(t.Context(), "ch", WakeAll)
	expect(t, "the waiter that joined", wake, Released)
	again.Close()
	again.Close() // a second Close does nothing
	waitUnsubscribed(t, rdb, "ch", false)
	if h.Listening("ch") {
		t.Error("Listening = true after the channel was let go")
	}
}

// A retokened waiter is handed the lock under its new token only.
func TestRetoken(t *testing.T) {
	rdb := start(t)
	h := New(goredisdriver.Conn(rdb), false)
	w, wake := subscribe(t, h, "ch", "old")
	w.Retoken("new")
	rdb.Publish(t.Context(), "ch", "old")
	expectNone(t, "the waiter, by its old token", wake)
	rdb.Publish(t.Context(), "ch", "new")
	expect(t, "the waiter, by its new token", wake, HandedOver)
	w.Close()
	waitUnsubscribed(t, rdb, "ch", false)
}

// A wake-up that finds another pending keeps the handover, if either is one.
func TestSignalKeepsHandover(t *testing.T) {
	for _, order := range [][2]int64{{Released, HandedOver}, {HandedOver, Released}, {Released, Released}} {
		w := &Waiter{wake: make(chan int64, 1)}
		w.signal(order[0])
		w.signal(order[1])
		if got, want := <-w.wake, max(order[0], order[1]); got != want {
			t.Errorf("signal(%d) then signal(%d): pending %d, want %d", order[0], order[1], got, want)
		}
	}
}

// When its connection breaks and comes back, subscribed again, every waiter
// is woken with Recheck: a release announced meanwhile was lost.
func TestRenewedSubscriptionWakesWaiters(t *testing.T) {
	t.Parallel()
	bothModes(t, func(t *testing.T, sharded bool) {
		h, _, s, p := startHub(t, sharded)
		a, wakeA := subscribe(t, h, "ch", "a")
		b, wakeB := subscribe(t, h, "ch", "b")
		p.Cut()
		expect(t, "a", wakeA, Recheck)
		expect(t, "b", wakeB, Recheck)
		a.Close()
		b.Close()
		waitUnsubscribed(t, s.Client(t), "ch", sharded)
	})
}

// While the server is down the hub keeps connecting again, with backoff: a
// waiter that subscribes meanwhile goes on at once (its timers wake it),
// and once the server is back every channel is subscribed again and every
// waiter woken with Recheck.
func TestHubSubscribesAgainOnceTheServerIsBack(t *testing.T) {
	t.Parallel()
	bothModes(t, func(t *testing.T, sharded bool) {
		h, rdb, s, _ := startHub(t, sharded)
		a, wakeA := subscribe(t, h, "ch", "a")
		s.Kill()
		waitDeaf(t, h, "ch")
		wakeB := make(chan int64, 1)
		b, ready := h.Subscribe("ch", "b", wakeB)
		c, wakeC := subscribe(t, h, "other", "c") // (ready once its connection failed)
		select {
		case <-ready:
		case <-time.After(5 * time.Second):
			t.Fatal("a waiter that subscribed while the server was down was kept waiting")
		}
		s.Restart()
		expect(t, "a", wakeA, Recheck)
		expect(t, "b", wakeB, Recheck)
		expect(t, "c", wakeC, Recheck)
		if !h.Listening("ch") || !h.Listening("other") {
			t.Error("not listening again after the server came back")
		}
		publish := rdb.Publish
		if sharded {
			publish = rdb.SPublish
		}
		publish(t.Context(), "ch", WakeAll)
		expect(t, "a", wakeA, Released)
		for _, w := range []*Waiter{a, b, c} {
			w.Close()
		}
		waitUnsubscribed(t, s.Client(t), "ch", sharded)
	})
}

// A channel whose last waiter left while the connection was down, and
// that was dropped meanwhile, is not subscribed again; the others are.
func TestHubSubscribesAgainOnlyChannelsWithWaiters(t *testing.T) {
	t.Parallel()
	bothModes(t, func(t *testing.T, sharded bool) {
		h, _, s, _ := startHub(t, sharded)
		a, wakeA := subscribe(t, h, "a", "a")
		b, _ := subscribe(t, h, "b", "b")
		s.Kill()
		dropped := func() bool {
			h.mu.Lock()
			defer h.mu.Unlock()
			return h.topics["b"] == nil
		}
		waitDeaf(t, h, "a")
		b.Close()
		for deadline := time.Now().Add(10 * time.Second); !dropped(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("b not dropped 10s after its last waiter left")
			}
		}
		s.Restart()
		expect(t, "a", wakeA, Recheck)
		numsub := s.Client(t).PubSubNumSub
		if sharded {
			numsub = s.Client(t).PubSubShardNumSub
		}
		if n := numsub(t.Context(), "a", "b").Val(); n["a"] != 1 || n["b"] != 0 {
			t.Errorf("subscribers after the restart: %v, want a only", n)
		}
		a.Close()
		waitUnsubscribed(t, s.Client(t), "a", sharded)
	})
}

// A closed Hub subscribes nothing: Subscribe and Watch return at once with
// their ready channels closed, Join adds no waiter, nothing is listened to,
// and closing what they returned does nothing.
func TestClosedHubSubscribesNothing(t *testing.T) {
	t.Parallel()
	h := New(nil, false) // (it never connects)
	h.Close()
	w, ready := h.Subscribe("ch", "a", make(chan int64, 1))
	watch := h.Watch("ch", "k", func() {}, nil)
	for _, c := range []<-chan struct{}{ready, watch.Ready()} {
		select {
		case <-c:
		default:
			t.Fatal("a closed Hub's ready channel is open")
		}
	}
	if h.Join("ch", "b", make(chan int64, 1)) != nil || h.Listening("ch") {
		t.Error("a closed Hub listens")
	}
	w.Close()
	watch.Close()
	watch.Close()
	h.Close()
}
