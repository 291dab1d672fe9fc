package dlock_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/redistest"
)

// Helpers shared by the tests of the kinds of lock (semaphores, read-write
// locks, elections, multi-locks).

// delayedSend is a request held in the proxy by delayThenLetThrough.
type delayedSend struct {
	done chan struct{} // closed once the proxy lets requests through again
	sent time.Time     // when the held request was sent; read after done
}

// landed is when the held request has surely reached Redis: its send, the
// proxy's second of delay and as much again for a busy machine.
func (d *delayedSend) landed() time.Time { return d.sent.Add(2 * time.Second) }

// delayThenLetThrough holds requests through p for a second; 100ms after
// rdb (a client through p) sends its next command, once that request has
// crossed into the proxy, it lets the next ones (an undo, a re-sent copy)
// straight through and closes done.
func delayThenLetThrough(p *redistest.Proxy, rdb *redis.Client) *delayedSend {
	first := &firstSend{at: make(chan time.Time, 1)}
	rdb.AddHook(first)
	p.Delay(time.Second, 0)
	d := &delayedSend{done: make(chan struct{})}
	go func() {
		defer close(d.done)
		select {
		case d.sent = <-first.at:
		case <-time.After(5 * time.Second):
			d.sent = time.Now()
		}
		time.Sleep(100 * time.Millisecond) // the request has crossed into the proxy
		p.Delay(0, 0)                      // the undo (or re-sent copy) goes straight through
	}()
	return d
}

// firstSend is a go-redis hook that tells when the first command (or
// pipeline) after it was added is sent.
type firstSend struct {
	once sync.Once
	at   chan time.Time
}

func (h *firstSend) mark() { h.once.Do(func() { h.at <- time.Now() }) }

func (h *firstSend) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *firstSend) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { h.mark(); return next(ctx, cmd) }
}

func (h *firstSend) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { h.mark(); return next(ctx, cmds) }
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
