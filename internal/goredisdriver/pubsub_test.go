package goredisdriver

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/driver"
	"github.com/dlockio/dlock/internal/leakcheck"
	"github.com/dlockio/dlock/internal/redistest"
)

// A Receive that nothing answers before its ctx's deadline returns once
// that ctx has ended, its error wrapping the ctx's: the connection is still
// good, and the caller, which asks its ctx why, learns it timed out.
func TestReceiveTimesOutWithItsContext(t *testing.T) {
	t.Parallel()
	leakcheck.Check(t)
	rdb := redis.NewClient(redistest.Start(t).Options())
	defer rdb.Close()
	ps, err := Conn(rdb).PubSub(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer ps.Close()
	if err := ps.Subscribe(t.Context(), "ch"); err != nil {
		t.Fatal(err)
	}
	for i := range 300 {
		ctx, cancel := context.WithTimeout(t.Context(), time.Millisecond)
		m, err := ps.Receive(ctx)
		ended := ctx.Err()
		cancel()
		switch {
		case err == nil && m.Kind == "subscribe":
		case !errors.Is(err, context.DeadlineExceeded):
			t.Fatalf("Receive %d = %+v, %v; want an error wrapping context.DeadlineExceeded", i, m, err)
		case ended == nil:
			t.Fatalf("Receive %d returned %v before its ctx ended", i, err)
		}
	}
}

// A Receive that times out on a connection it makes (go-redis connects a
// broken PubSub again on its next read, and the handshake of a stalled
// server times out) returns at once, its ctx still running: the caller
// learns the connection is bad instead of taking it for a silent one.
func TestReceiveReturnsAtOnceWhenItsReconnectTimesOut(t *testing.T) {
	t.Parallel()
	leakcheck.Check(t)
	p := redistest.NewProxy(t, redistest.Start(t, redistest.TCP()).Addr())
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), DialTimeout: 100 * time.Millisecond,
		ReadTimeout: 100 * time.Millisecond, MaxRetries: -1})
	defer rdb.Close()
	dps, err := Conn(rdb).PubSub(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer dps.Close()
	if err := dps.Subscribe(t.Context(), "ch"); err != nil {
		t.Fatal(err)
	}
	if m, err := dps.Receive(t.Context()); err != nil || m.Kind != "subscribe" {
		t.Fatalf("Receive = %+v, %v; want the subscription's confirmation", m, err)
	}
	p.Cut()
	p.Stall()
	defer p.Cut()
	// (Read past the driver, which would fail from now on: go-redis closes
	// the connection and fails to make another.)
	ps := dps.(*pubsub).ps
	if _, err := ps.ReceiveTimeout(t.Context(), 5*time.Second); err == nil {
		t.Fatal("a read on a cut connection succeeded")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := dps.Receive(ctx); err == nil || ctx.Err() != nil {
		t.Fatalf("Receive = %v, ctx %v; want an error before its ctx ended", err, ctx.Err())
	}
}

// A PubSub ends at its connection's first failure: go-redis's, which
// connects again and subscribes again by itself, is closed at once, so the
// server soon counts no subscriber, and every method fails from then on;
// after Close they fail with ErrClosed.
func TestPubSubEndsAtItsFirstFailure(t *testing.T) {
	t.Parallel()
	leakcheck.Check(t)
	s := redistest.Start(t, redistest.TCP())
	p := redistest.NewProxy(t, s.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr()})
	defer rdb.Close()
	ps, err := Conn(rdb).PubSub(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer ps.Close()
	if err := ps.Subscribe(t.Context(), "ch"); err != nil {
		t.Fatal(err)
	}
	if m, err := ps.Receive(t.Context()); err != nil || m.Kind != "subscribe" {
		t.Fatalf("Receive = %+v, %v; want the subscription's confirmation", m, err)
	}
	p.Cut()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := ps.Receive(ctx); err == nil || ctx.Err() != nil {
		t.Fatalf("Receive on a cut connection = %v, ctx %v; want an error before its ctx ended", err, ctx.Err())
	}
	direct := s.Client(t)
	for deadline := time.Now().Add(5 * time.Second); direct.PubSubNumSub(t.Context(), "ch").Val()["ch"] > 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("ch still has a subscriber 5s after the PubSub's connection failed")
		}
	}
	if err := ps.Subscribe(t.Context(), "other"); err == nil {
		t.Error("Subscribe after the failure = nil, want an error")
	}
	if err := ps.Ping(t.Context()); err == nil {
		t.Error("Ping after the failure = nil, want an error")
	}
	if n := direct.PubSubNumSub(t.Context(), "ch", "other").Val(); n["ch"] != 0 || n["other"] != 0 {
		t.Errorf("subscribers after the failure: %v, want none", n)
	}
	ps.Close()
	if _, err := ps.Receive(t.Context()); !errors.Is(err, driver.ErrClosed) {
		t.Errorf("Receive after Close = %v, want ErrClosed", err)
	}
	if err := ps.Unsubscribe(t.Context(), "ch"); !errors.Is(err, driver.ErrClosed) {
		t.Errorf("Unsubscribe after Close = %v, want ErrClosed", err)
	}
}
