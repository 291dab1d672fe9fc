package dlock

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// hub shares one pub/sub connection among all of a Client's waiters. A
// channel is subscribed while at least one waiter watches it; the
// connection is open while any channel is subscribed.
type hub struct {
	rdb redis.UniversalClient

	mu      sync.Mutex
	ps      *redis.PubSub     // nil while nobody waits
	topics  map[string]*topic // subscribed channels
	pending map[string]int    // SUBSCRIBEs sent on ps and not yet confirmed
}

type topic struct {
	waiters map[*waiter]struct{}
	ready   chan struct{} // closed once the latest SUBSCRIBE is confirmed
}

// waiter receives a wake-up on wake when a release is announced on its channel.
type waiter struct {
	h       *hub
	channel string
	wake    chan struct{}
}

func newHub(rdb redis.UniversalClient) *hub {
	return &hub{rdb: rdb, topics: map[string]*topic{}, pending: map[string]int{}}
}

// watch subscribes a new waiter to channel and waits, at most maxWait or
// until ctx ends, for Redis to confirm the subscription. A waiter whose
// subscription failed or is unconfirmed still works: it is woken by its
// timers alone.
func (h *hub) watch(ctx context.Context, channel string, maxWait time.Duration) *waiter {
	w := &waiter{h: h, channel: channel, wake: make(chan struct{}, 1)}
	h.mu.Lock()
	t := h.topics[channel]
	if t == nil {
		t = &topic{waiters: map[*waiter]struct{}{}, ready: make(chan struct{})}
		h.topics[channel] = t
		if h.ps == nil {
			h.ps = h.rdb.Subscribe(ctx)
			go h.read(h.ps, h.ps.ChannelWithSubscriptions())
		}
		h.pending[channel]++
		if err := h.ps.Subscribe(ctx, channel); err != nil {
			close(t.ready) // nothing to wait for; timers will do
		}
	}
	t.waiters[w] = struct{}{}
	ready := t.ready
	h.mu.Unlock()

	timer := time.NewTimer(maxWait)
	defer timer.Stop()
	select {
	case <-ready:
	case <-timer.C:
	case <-ctx.Done():
	}
	return w
}

// close unsubscribes the waiter; the last one on a channel unsubscribes the
// channel, and the last one of all closes the connection.
func (w *waiter) close() {
	h := w.h
	h.mu.Lock()
	defer h.mu.Unlock()
	t := h.topics[w.channel]
	if t == nil {
		return
	}
	delete(t.waiters, w)
	if len(t.waiters) > 0 {
		return
	}
	delete(h.topics, w.channel)
	if len(h.topics) == 0 {
		h.ps.Close() // the reader sees its channel close and exits
		h.ps = nil
		clear(h.pending)
		return
	}
	h.ps.Unsubscribe(context.Background(), w.channel)
}

// read dispatches the messages of one pub/sub connection until it is closed.
func (h *hub) read(ps *redis.PubSub, msgs <-chan any) {
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
				for w := range t.waiters {
					select {
					case w.wake <- struct{}{}:
					default: // already has a wake-up pending
					}
				}
			}
		}
		h.mu.Unlock()
	}
}
