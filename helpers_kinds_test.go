package dlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/redistest"
)

// Helpers shared by the tests of the kinds of lock (semaphores, read-write
// locks, elections, multi-locks).

// delayThenLetThrough holds requests through p for a second; 100ms later,
// once the request sent meanwhile has crossed into the proxy, it lets the
// next ones (an undo, a re-sent copy) straight through and closes done.
// start is when the delay began.
func delayThenLetThrough(p *redistest.Proxy) (start time.Time, done <-chan struct{}) {
	p.Delay(time.Second, 0)
	start = time.Now()
	ch := make(chan struct{})
	go func() {
		defer close(ch)
		time.Sleep(100 * time.Millisecond) // the request has crossed into the proxy
		p.Delay(0, 0)                      // the undo (or re-sent copy) goes straight through
	}()
	return start, ch
}

// endedByMaxHold checks that l (a permit, a multi-lock: what) taken with
// MaxHold(300ms) ends within 10s with a loss that says why.
func endedByMaxHold(t *testing.T, what string, l interface {
	Done() <-chan struct{}
	Err() error
}) {
	t.Helper()
	if !closedWithin(l.Done(), 10*time.Second) {
		t.Fatalf("a %s with MaxHold(300ms) still held after 10s", what)
	}
	if err := l.Err(); !errors.Is(err, dlock.ErrNotHeld) || !errors.Is(err, dlock.ErrMaxHold) || !strings.Contains(err.Error(), "max hold") {
		t.Errorf("Err() of a %s at its max hold = %v, want ErrNotHeld and ErrMaxHold, saying so", what, err)
	}
}

// doneCause waits up to 10s for ctx to end and returns its cause (nil if it
// did not end).
func doneCause(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-time.After(10 * time.Second):
		return nil
	}
}

// waitSubscribed waits until c has an Acquire waiting and a client of rdb's
// server (a test's own) is subscribed to a channel: the waiter waits for a
// wake-up.
func waitSubscribed(ctx context.Context, t *testing.T, c *dlock.Client, rdb *redis.Client) {
	t.Helper()
	if !waitFor(5*time.Second, func() bool {
		return c.Stats().Waiting == 1 && len(rdb.PubSubChannels(ctx, "*").Val()) > 0
	}) {
		t.Fatalf("the waiter never subscribed and waited (%d waiting, channels %v)", c.Stats().Waiting, rdb.PubSubChannels(ctx, "*").Val())
	}
}
