package dlock

import (
	"context"
	"slices"

	"github.com/dlockio/dlock/internal/backend"
	"github.com/dlockio/dlock/internal/pubsub"
)

// waiters are one Acquire's waiters on the hubs of all of a Client's nodes,
// sharing one wake channel (see pubsub.Waiter for what it receives).
type waiters struct {
	ws   []*pubsub.Waiter
	wake chan int64
}

// join returns waiters on channel if every node's hub already listens to it
// (see pubsub.Hub.Join), and nil otherwise.
func (c *Client) join(channel, token string) *waiters {
	if slices.ContainsFunc(c.hubs, func(h *pubsub.Hub) bool { return !h.Listening(channel) }) {
		return nil // the common case: nothing to allocate
	}
	w := &waiters{wake: make(chan int64, 1)}
	for _, h := range c.hubs {
		hw := h.Join(channel, token, w.wake)
		if hw == nil {
			w.close()
			return nil
		}
		w.ws = append(w.ws, hw)
	}
	return w
}

// watch subscribes to channel on every node's hub (see
// pubsub.Hub.Subscribe), waiting for the confirmations together.
func (c *Client) watch(ctx context.Context, channel, token string) *waiters {
	w := &waiters{ws: make([]*pubsub.Waiter, len(c.hubs)), wake: make(chan int64, 1)}
	ready := make([]<-chan struct{}, len(c.hubs))
	for i, h := range c.hubs {
		w.ws[i], ready[i] = h.Subscribe(channel, token, w.wake)
	}
	backend.Await(ctx, ready, DefaultMaxBackoff)
	return w
}

// retoken moves the waiters to a new lease token, so that a handover to
// the token of an attempt after an undo reaches them. A handover already
// received was for the old token, whose hold the undo passed on: it is
// kept as a plain wake-up (try again), never trusted. Once every hub
// has moved, only a handover to the new token can arrive.
func (w *waiters) retoken(token string) {
	for _, hw := range w.ws {
		hw.Retoken(token)
	}
	select {
	case old := <-w.wake:
		select {
		case w.wake <- min(old, pubsub.Released):
		default: // a wake-up for the new token came meanwhile
		}
	default:
	}
}

// close leaves the waiters' hubs; nil waiters have nothing to leave.
func (w *waiters) close() {
	if w == nil {
		return
	}
	for _, hw := range w.ws {
		hw.Close()
	}
}
