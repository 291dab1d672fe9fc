// Package pubsub shares one pub/sub connection among all of a Client's
// waiters: a Hub per node listens for the release messages of the locks
// being waited for and wakes their waiters. It knows nothing of locks
// beyond the messages' form (WakeAll, or the token the lock was handed to).
package pubsub

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlockio/dlock/driver"
)

// linger is how long a channel stays subscribed after its last waiter
// left: a client that keeps contending for a lock reuses the subscription
// instead of paying a SUBSCRIBE, and an extra attempt, every time.
const linger = 500 * time.Millisecond

// WakeAll is the release message that wakes every waiter on a channel; any
// other message is "<token> <fence>": the lock was handed to that waiter,
// with that fence ("<token>" alone reads as a handover without a fence).
const WakeAll = "*"

// The wake-ups a waiter receives: Recheck, Released, or a handover:
// HandedOver, or above it the fence the handover came with (fences are
// server time in µs, far above it).
const (
	Recheck    int64 = -1 // the connection is back after a break: a release may have been missed, try again
	Released   int64 = 0  // the lock was released: try again
	HandedOver int64 = 1  // the lock was handed to the waiter, without a fence
)

// Hub shares one pub/sub connection among all of a Client's waiters on one
// node. A channel is subscribed while at least one waiter watches it (and
// for linger after); the connection is open while any channel is
// subscribed.
type Hub struct {
	conn    driver.Conn
	sharded bool // SSUBSCRIBE, one connection per channel (it lives on its slot's node)

	readers sync.WaitGroup // the goroutines that read its connections

	mu      sync.Mutex
	closed  bool              // Close was called: no more subscriptions
	ps      driver.PubSub     // nil while no channel is subscribed
	topics  map[string]*topic // subscribed channels
	pending map[string]int    // SUBSCRIBEs sent on ps and not yet confirmed
}

type topic struct {
	waiters  map[string]*Waiter // by token
	watchers map[string]*Waiter // those of waiters that watch the channel (WatchToken)
	ready    chan struct{}      // closed once the latest SUBSCRIBE is confirmed
	idle     *time.Timer        // unsubscribes the channel after linger without waiters
	ps       driver.PubSub      // sharded: the channel's own connection
}

// Waiter receives a wake-up on its wake channel when its lock is released
// (Released), or, when the lock is handed to it, the handover's fence (or
// HandedOver if it came without one).
type Waiter struct {
	h       *Hub
	channel string
	token   string
	wake    chan int64
}

// New returns a Hub that subscribes through conn; with sharded, it uses
// SSUBSCRIBE, one connection per channel.
func New(conn driver.Conn, sharded bool) *Hub {
	return &Hub{conn: conn, sharded: sharded, topics: map[string]*topic{}, pending: map[string]int{}}
}

// Listening reports whether channel is subscribed and confirmed.
func (h *Hub) Listening(channel string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.confirmed(channel) != nil
}

// Join adds a waiter to channel if the channel is already subscribed and
// confirmed, and returns nil otherwise. A waiter that joined before its
// first attempt cannot miss a release that follows that attempt.
func (h *Hub) Join(channel, token string, wake chan int64) *Waiter {
	h.mu.Lock()
	defer h.mu.Unlock()
	t := h.confirmed(channel)
	if t == nil {
		return nil
	}
	return h.add(t, channel, token, wake)
}

// confirmed returns channel's topic if Redis has confirmed its
// subscription, and nil otherwise; h.mu must be held.
func (h *Hub) confirmed(channel string) *topic {
	t := h.topics[channel]
	if t == nil {
		return nil
	}
	select {
	case <-t.ready:
		return t
	default:
		return nil
	}
}

// add registers a waiter on t; h.mu must be held.
func (h *Hub) add(t *topic, channel, token string, wake chan int64) *Waiter {
	if t.idle != nil {
		t.idle.Stop()
		t.idle = nil
	}
	w := &Waiter{h: h, channel: channel, token: token, wake: wake}
	t.waiters[token] = w
	if strings.HasPrefix(token, watchPrefix) {
		if t.watchers == nil {
			t.watchers = map[string]*Waiter{}
		}
		t.watchers[token] = w
	}
	return w
}

// watchPrefix begins the token of a waiter that watches its channel (see
// WatchToken). No lease token begins with it.
const watchPrefix = "*"

var watchSeq atomic.Uint64

// WatchToken returns a new token for a waiter that watches its channel
// rather than waits for a lock: it is woken (Released) by every message,
// a handover to another waiter included. Each watcher needs its own.
func WatchToken() string {
	return watchPrefix + strconv.FormatUint(watchSeq.Add(1), 10)
}

// Subscribe adds a new waiter on channel, subscribing to it if needed, and
// returns it with a channel closed once Redis has confirmed the
// subscription. A waiter whose subscription failed or is unconfirmed still
// works: its timers wake it.
func (h *Hub) Subscribe(ctx context.Context, channel, token string, wake chan int64) (*Waiter, <-chan struct{}) {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		ready := make(chan struct{})
		close(ready)
		return &Waiter{h: h, channel: channel, token: token, wake: wake}, ready // woken by its timers only
	}
	t := h.topics[channel]
	if t == nil && h.sharded {
		t = &topic{waiters: map[string]*Waiter{}, ready: make(chan struct{})}
		h.topics[channel] = t
		t.ps = h.conn.PubSub(ctx, channel)
		h.readers.Go(func() { h.readTopic(t, receive(t.ps)) })
	}
	if t == nil {
		t = &topic{waiters: map[string]*Waiter{}, ready: make(chan struct{})}
		h.topics[channel] = t
		if h.ps == nil {
			ps := h.conn.PubSub(ctx, "")
			h.ps = ps
			h.readers.Go(func() { h.read(ps, receive(ps)) })
		}
		h.pending[channel]++
		if err := h.ps.Subscribe(ctx, channel); err != nil {
			close(t.ready) // nothing to wait for; timers will do
		}
	}
	w := h.add(t, channel, token, wake)
	ready := t.ready
	h.mu.Unlock()
	return w, ready
}

// Close closes the Hub's connections and waits for their readers to end.
// Waiters are woken by their timers only after it.
func (h *Hub) Close() {
	h.mu.Lock()
	h.closed = true
	for _, t := range h.topics {
		if t.idle != nil {
			t.idle.Stop()
		}
		if t.ps != nil {
			t.ps.Close()
		}
	}
	clear(h.topics)
	clear(h.pending)
	if h.ps != nil {
		h.ps.Close()
		h.ps = nil
	}
	h.mu.Unlock()
	h.readers.Wait()
}

// Close removes the waiter. A channel left without waiters is unsubscribed
// after linger, and the connection is closed with the last channel.
func (w *Waiter) Close() {
	h := w.h
	h.mu.Lock()
	defer h.mu.Unlock()
	t := h.topics[w.channel]
	if t == nil || t.waiters[w.token] != w {
		return
	}
	delete(t.waiters, w.token)
	delete(t.watchers, w.token)
	if len(t.waiters) == 0 && t.idle == nil {
		t.idle = time.AfterFunc(linger, func() { h.drop(w.channel, t) })
	}
}

// Retoken moves the waiter to a new token, so that a handover to the
// token of an attempt after an undo reaches it.
func (w *Waiter) Retoken(token string) {
	h := w.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if t := h.topics[w.channel]; t != nil && t.waiters[w.token] == w {
		delete(t.waiters, w.token)
		t.waiters[token] = w
	}
	w.token = token
}

// drop unsubscribes channel if t is still its topic and has no waiters.
func (h *Hub) drop(channel string, t *topic) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.topics[channel] != t || len(t.waiters) > 0 {
		return
	}
	delete(h.topics, channel)
	if t.ps != nil {
		t.ps.Close()
		return
	}
	if len(h.topics) == 0 {
		h.ps.Close() // the reader sees its channel close and exits
		h.ps = nil
		clear(h.pending)
		return
	}
	h.ps.Unsubscribe(context.Background(), channel)
}

// healthCheck is how long a pub/sub connection may stay silent before it
// is pinged; a dead connection is then replaced (and its channels
// subscribed again) by the driver.
const healthCheck = 30 * time.Second

// receive returns an iterator over ps's messages and subscription
// confirmations until ps is closed.
func receive(ps driver.PubSub) func(yield func(driver.Message) bool) {
	return func(yield func(driver.Message) bool) {
		for {
			ctx, cancel := context.WithTimeout(context.Background(), healthCheck)
			m, err := ps.Receive(ctx)
			cancel()
			var nerr net.Error
			switch {
			case err == nil:
				if !yield(m) {
					return
				}
			case errors.Is(err, driver.ErrClosed):
				return
			case errors.Is(err, context.DeadlineExceeded) || errors.As(err, &nerr) && nerr.Timeout():
				ctx, cancel := context.WithTimeout(context.Background(), healthCheck)
				ps.Ping(ctx) // silent for a while: make sure the connection lives
				cancel()
			default:
				if !yield(driver.Message{Kind: broken}) {
					return
				}
				time.Sleep(50 * time.Millisecond) // the driver reconnects on the next receive
			}
		}
	}
}

// broken is the Kind of the Message receive yields when ps reports a
// broken connection.
const broken = "broken"

// read dispatches the messages of one pub/sub connection until it is closed.
// A confirmation of a channel already confirmed is a subscription renewed
// after a break (the driver subscribes again, see driver.Conn.PubSub): a
// release announced while the connection was down was lost, so every waiter
// on the channel is woken to ask Redis again.
func (h *Hub) read(ps driver.PubSub, msgs func(func(driver.Message) bool)) {
	for m := range msgs {
		h.mu.Lock()
		if h.ps != ps {
			h.mu.Unlock()
			continue // a closed connection's leftovers
		}
		switch m.Kind {
		case broken:
			// The driver subscribes again to every channel: the SUBSCRIBEs
			// sent on the broken connection will not be confirmed.
			clear(h.pending)
		case "subscribe":
			// Confirmations come in the order the SUBSCRIBEs were sent; the
			// last one outstanding is the one that covers current waiters.
			// After a reconnect the driver subscribes again: nothing pending.
			if h.pending[m.Channel]--; h.pending[m.Channel] <= 0 {
				delete(h.pending, m.Channel)
				if t := h.topics[m.Channel]; t != nil {
					t.confirm()
				}
			}
		case "message", "smessage":
			if t := h.topics[m.Channel]; t != nil {
				t.dispatch(m.Payload)
			}
		}
		h.mu.Unlock()
	}
}

// readTopic dispatches the messages of a sharded channel's own connection
// until it is closed; a renewed confirmation wakes every waiter (see read).
func (h *Hub) readTopic(t *topic, msgs func(func(driver.Message) bool)) {
	for m := range msgs {
		h.mu.Lock()
		switch m.Kind {
		case "ssubscribe":
			t.confirm()
		case "message", "smessage":
			t.dispatch(m.Payload)
		}
		h.mu.Unlock()
	}
}

// confirm marks t's subscription confirmed. If it was already, this is its
// renewal after a break: every waiter is woken with Recheck (see Hub.read).
// h.mu must be held.
func (t *topic) confirm() {
	select {
	case <-t.ready:
		for _, w := range t.waiters {
			w.signal(Recheck)
		}
	default:
		close(t.ready)
	}
}

// dispatch wakes the waiters a release message is for; h.mu must be held.
func (t *topic) dispatch(payload string) {
	if payload != WakeAll {
		token, f, _ := strings.Cut(payload, " ")
		if w := t.waiters[token]; w != nil {
			fence, _ := strconv.ParseInt(f, 10, 64)
			w.signal(max(fence, HandedOver))
		}
		for _, w := range t.watchers {
			w.signal(Released)
		}
		return
	}
	for _, w := range t.waiters {
		w.signal(Released)
	}
}

func (w *Waiter) signal(wake int64) {
	for {
		select {
		case w.wake <- wake:
			return
		default: // a wake-up is pending: keep the handover, if either is one
			select {
			case old := <-w.wake:
				wake = max(wake, old)
			default:
			}
		}
	}
}
