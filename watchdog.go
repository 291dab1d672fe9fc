package dlock

import (
	"context"
	"errors"
	"time"
)

// minRetry is the shortest pause between extension attempts after an error.
const minRetry = 10 * time.Millisecond

// watchdog extends the lease every TTL/3 until the Lock is released or lost.
// Acquire starts it; it returns when Done closes. A failed extension is
// retried until the validity deadline; the Lock's expiry timer, not the
// watchdog, declares the loss at that deadline, so a call that hangs on a
// frozen server cannot delay the signal.
func (l *Lock) watchdog() {
	l.mu.Lock()
	next := l.ttl / 3
	l.mu.Unlock()
	t := time.NewTimer(next)
	defer t.Stop()
	for {
		select {
		case <-l.done:
			return
		case <-t.C:
		}
		l.mu.Lock()
		ttl, validUntil := l.ttl, l.validUntil
		l.mu.Unlock()

		// go-redis honours this deadline only with ContextTimeoutEnabled;
		// either way the expiry timer fires on time.
		ctx, cancel := context.WithDeadline(context.Background(), validUntil)
		err := l.extend(ctx, ttl)
		cancel()
		switch {
		case err == nil:
			next = ttl / 3
		case errors.Is(err, ErrNotHeld), errors.Is(err, ErrReleased):
			return
		default:
			// Redis did not answer: try again a few times before the
			// validity runs out.
			next = max(time.Until(validUntil)/4, minRetry)
		}
		t.Reset(next)
	}
}
