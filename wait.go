package dlock

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// linger is how long a channel stays subscribed after its last waiter
// left: a client that keeps contending for a lock reuses the subscription
// instead of paying a SUBSCRIBE, and an extra attempt, every time.
const linger = 500 * time.Millisecond

// wakeAll is the release message that wakes every waiter on a channel; any
// other message is "<token>": the lock was handed to that waiter (a
// previous version sent "<token> <fence>", which reads the same).
const wakeAll = "*"

// hub shares one pub/sub connection among all of a Client's waiters. A
// channel is subscribed while at least one waiter watches it (and for
// linger after); the connection is open while any channel is subscribed.
type hub struct {
	rdb     redis.UniversalClient
	sharded bool // SSUBSCRIBE, one connection per channel (it lives on its slot's node)

	mu      sync.Mutex
	ps      *redis.PubSub     // nil while no channel is subscribed
	topics  map[string]*topic // subscribed channels
	pending map[string]int    // SUBSCRIBEs sent on ps and not yet confirmed
}

type topic struct {
	waiters map[string]*waiter // by token
	ready   chan struct{}      // closed once the latest SUBSCRIBE is confirmed
	idle    *time.Timer        // unsubscribes the channel after linger without waiters
	ps      *redis.PubSub      // sharded: the channel's own connection
}

// waiter receives a wake-up on wake when its lock is released (0), or
// handedOver when the lock is handed to it.
type waiter struct {
	h       *hub
	channel string
	token   string
	wake    chan int64
}

func newHub(rdb redis.UniversalClient) *hub {
	return &hub{rdb: rdb, topics: map[string]*topic{}, pending: map[string]int{}}
}

// waiters are one Acquire's waiters on the hubs of all of a Client's nodes,
// sharing one wake channel.
type waiters struct {
	ws   []*waiter
	wake chan int64
}

// join returns waiters on channel if every node's hub already listens to it
// (see hub.join), and nil otherwise.
func (c *Client) join(channel, token string) *waiters {
	for _, h := range c.hubs {
		if !h.listening(channel) {
			return nil // the common case: nothing to allocate
		}
	}
	w := &waiters{wake: make(chan int64, 1)}
	for _, h := range c.hubs {
		hw := h.join(channel, token, w.wake)
		if hw == nil {
			w.close()
			return nil
		}
		w.ws = append(w.ws, hw)
	}
	return w
}

// watch subscribes to channel on every node's hub (see hub.watch), waiting
// for the confirmations together.
func (c *Client) watch(ctx context.Context, channel, token string) *waiters {
	w := &waiters{wake: make(chan int64, 1)}
	ready := make([]<-chan struct{}, len(c.hubs))
	for i, h := range c.hubs {
		var hw *waiter
		hw, ready[i] = h.subscribe(ctx, channel, token, w.wake)
		w.ws = append(w.ws, hw)
	}
	timer := time.NewTimer(DefaultMaxBackoff)
	defer timer.Stop()
	for _, r := range ready {
		select {
		case <-r:
		case <-timer.C:
			return w
		case <-ctx.Done():
			return w
		}
	}
	return w
}

// retoken moves the waiters to a new lease token, so that a handover to
// the token of an attempt after an undo reaches them.
func (w *waiters) retoken(token string) {
	for _, hw := range w.ws {
		hw.retoken(token)
	}
}

func (w *waiters) close() {
	for _, hw := range w.ws {
		hw.close()
	}
}

// listening reports whether channel is subscribed and confirmed.
func (h *hub) listening(channel string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.confirmed(channel) != nil
}

// join adds a waiter to channel if the channel is already subscribed and
// confirmed, and returns nil otherwise. A waiter that joined before its
// first attempt cannot miss a release that follows that attempt.
func (h *hub) join(channel, token string, wake chan int64) *waiter {
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
func (h *hub) confirmed(channel string) *topic {
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
func (h *hub) add(t *topic, channel, token string, wake chan int64) *waiter {
	if t.idle != nil {
		t.idle.Stop()
		t.idle = nil
	}
	w := &waiter{h: h, channel: channel, token: token, wake: wake}
	t.waiters[token] = w
	return w
}

// subscribe adds a new waiter on channel, subscribing to it if needed, and
// returns it with a channel closed once Redis has confirmed the
// subscription. A waiter whose subscription failed or is unconfirmed still
// works: its timers wake it.
func (h *hub) subscribe(ctx context.Context, channel, token string, wake chan int64) (*waiter, <-chan struct{}) {
	h.mu.Lock()
	t := h.topics[channel]
	if t == nil && h.sharded {
		t = &topic{waiters: map[string]*waiter{}, ready: make(chan struct{})}
		h.topics[channel] = t
		t.ps = h.rdb.SSubscribe(ctx, channel)
		go h.readTopic(t, receive(t.ps))
	}
	if t == nil {
		t = &topic{waiters: map[string]*waiter{}, ready: make(chan struct{})}
		h.topics[channel] = t
		if h.ps == nil {
			h.ps = h.rdb.Subscribe(ctx)
			go h.read(h.ps, receive(h.ps))
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

// close removes the waiter. A channel left without waiters is unsubscribed
// after linger, and the connection is closed with the last channel.
func (w *waiter) close() {
	h := w.h
	h.mu.Lock()
	defer h.mu.Unlock()
	t := h.topics[w.channel]
	if t == nil || t.waiters[w.token] != w {
		return
	}
	delete(t.waiters, w.token)
	if len(t.waiters) == 0 && t.idle == nil {
		t.idle = time.AfterFunc(linger, func() { h.drop(w.channel, t) })
	}
}

// retoken moves the waiter to a new token (see waiters.retoken).
func (w *waiter) retoken(token string) {
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
func (h *hub) drop(channel string, t *topic) {
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
// subscribed again) by go-redis.
const healthCheck = 30 * time.Second

// receive returns an iterator over ps's messages and subscription
// confirmations until ps is closed. It reads ps directly, rather than
// through go-redis's Channel, to save a goroutine hop on every wake-up.
func receive(ps *redis.PubSub) func(yield func(any) bool) {
	return func(yield func(any) bool) {
		ctx := context.Background()
		for {
			m, err := ps.ReceiveTimeout(ctx, healthCheck)
			switch {
			case err == nil:
				if !yield(m) {
					return
				}
			case errors.Is(err, redis.ErrClosed):
				return
			default:
				var nerr net.Error
				if errors.As(err, &nerr) && nerr.Timeout() {
					ps.Ping(ctx) // silent for a while: make sure the connection lives
					continue
				}
				time.Sleep(50 * time.Millisecond) // broken: go-redis reconnects on the next receive
			}
		}
	}
}

// read dispatches the messages of one pub/sub connection until it is closed.
func (h *hub) read(ps *redis.PubSub, msgs func(func(any) bool)) {
	for m := range msgs {
		h.mu.Lock()
		if h.ps != ps {
			h.mu.Unlock()
			continue // a closed connection's leftovers
		}
		switch m := m.(type) {
		case *redis.Subscription:
			if m.Kind != "subscribe" {
				break
			}
			// Confirmations come in the order the SUBSCRIBEs were sent; the
			// last one outstanding is the one that covers current waiters.
			// After a reconnect go-redis subscribes again: nothing pending.
			if h.pending[m.Channel]--; h.pending[m.Channel] <= 0 {
				delete(h.pending, m.Channel)
				if t := h.topics[m.Channel]; t != nil {
					select {
					case <-t.ready:
					default:
						close(t.ready)
					}
				}
			}
		case *redis.Message:
			if t := h.topics[m.Channel]; t != nil {
				t.dispatch(m.Payload)
			}
		}
		h.mu.Unlock()
	}
}

// readTopic dispatches the messages of a sharded channel's own connection
// until it is closed.
func (h *hub) readTopic(t *topic, msgs func(func(any) bool)) {
	for m := range msgs {
		h.mu.Lock()
		switch m := m.(type) {
		case *redis.Subscription:
			if m.Kind == "ssubscribe" {
				select {
				case <-t.ready:
				default:
					close(t.ready)
				}
			}
		case *redis.Message:
			t.dispatch(m.Payload)
		}
		h.mu.Unlock()
	}
}

// dispatch wakes the waiters a release message is for; h.mu must be held.
func (t *topic) dispatch(payload string) {
	if payload != wakeAll {
		token, _, _ := strings.Cut(payload, " ")
		if w := t.waiters[token]; w != nil {
			w.signal(handedOver)
		}
		return
	}
	for _, w := range t.waiters {
		w.signal(0)
	}
}

// handedOver is the wake-up of a waiter the lock was handed to.
const handedOver = 1

func (w *waiter) signal(wake int64) {
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
