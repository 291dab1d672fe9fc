package dlockredigo_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dlockio/dlock/driver"
	"github.com/dlockio/dlock/extra/dlockredigo"
	"github.com/dlockio/dlock/internal/leakcheck"
	"github.com/dlockio/dlock/internal/redistest"
)

// openPubSub returns a Conn to addr and a pub/sub connection of it, closed
// in t's cleanup.
func openPubSub(t *testing.T, addr string) (driver.Conn, driver.PubSub) {
	c := dlockredigo.Conn(newPool(t, addr))
	ps, err := c.PubSub(within(t, 10*time.Second), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ps.Close() })
	return c, ps
}

// expect receives the next message within 10 s and checks it is want.
func expect(t *testing.T, ps driver.PubSub, want driver.Message) {
	t.Helper()
	if m, err := ps.Receive(within(t, 10*time.Second)); err != nil || m != want {
		t.Fatalf("Receive = %+v, %v; want %+v", m, err, want)
	}
}

// subscribed returns a Conn to a server of its own and a pub/sub
// connection of it, subscribed to channel "a" (the confirmation received).
func subscribed(t *testing.T) (driver.Conn, driver.PubSub) {
	c, ps := openPubSub(t, redistest.Start(t, redistest.TCP()).Addr())
	if err := ps.Subscribe(within(t, 10*time.Second), "a"); err != nil {
		t.Fatal(err)
	}
	expect(t, ps, driver.Message{Kind: "subscribe", Channel: "a"})
	return c, ps
}

// endsClosed checks that an error comes on done within 2s, and that it
// is ErrClosed: what (a Receive) ended with the Close just made.
func endsClosed(t *testing.T, done <-chan error, what string) {
	t.Helper()
	select {
	case err := <-done:
		if !errors.Is(err, driver.ErrClosed) {
			t.Errorf("%s across Close: %v, want ErrClosed", what, err)
		}
	case <-time.After(2 * time.Second):
		t.Fatalf("Close did not end %s within 2s", what)
	}
}

func TestPubSubDeliversConfirmationsMessagesAndPongs(t *testing.T) {
	t.Parallel()
	c, ps := openPubSub(t, redistest.Start(t, redistest.TCP()).Addr())
	ctx := within(t, 10*time.Second)
	if err := ps.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	expect(t, ps, driver.Message{Kind: "pong"}) // subscribed to nothing: a status reply
	if err := ps.Subscribe(ctx, "a", "b"); err != nil {
		t.Fatal(err)
	}
	expect(t, ps, driver.Message{Kind: "subscribe", Channel: "a"})
	expect(t, ps, driver.Message{Kind: "subscribe", Channel: "b"})
	if _, err := c.Do(ctx, "PUBLISH", "b", "hello"); err != nil {
		t.Fatal(err)
	}
	expect(t, ps, driver.Message{Kind: "message", Channel: "b", Payload: "hello"})
	if err := ps.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	expect(t, ps, driver.Message{Kind: "pong"})
	if err := ps.Unsubscribe(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	expect(t, ps, driver.Message{Kind: "unsubscribe", Channel: "a"})
	if err := ps.Subscribe(ctx); err == nil {
		t.Error("Subscribe to no channel was accepted")
	}
	if _, err := c.PubSub(ctx, "a"); err == nil {
		t.Error("a sharded pub/sub connection was opened")
	}
}

func TestPubSubOutlivesAReceiveWhoseContextEnded(t *testing.T) {
	t.Parallel()
	c, ps := subscribed(t)
	ctx := within(t, 10*time.Second)
	if _, err := ps.Receive(within(t, 50*time.Millisecond)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Receive on a silent connection: %v, want DeadlineExceeded", err)
	}
	if _, err := c.Do(ctx, "PUBLISH", "a", "after"); err != nil {
		t.Fatal(err)
	}
	expect(t, ps, driver.Message{Kind: "message", Channel: "a", Payload: "after"})
}

// Close while a Receive waits (in another goroutine) on a silent
// connection makes that Receive return ErrClosed at once, and ends the
// connection's reader (the leak check); a later Subscribe fails with
// ErrClosed and a second Close does no harm.
func TestPubSubCloseEndsAReceiveThatWaits(t *testing.T) {
	leakcheck.Check(t)
	t.Parallel()
	_, ps := subscribed(t)
	done := make(chan error, 1)
	go func() {
		_, err := ps.Receive(context.Background())
		done <- err
	}()
	if !waitFor(10*time.Second, func() bool { return leakcheck.Count(t, "(*pubsub).Receive") == 1 }) {
		t.Fatal("Receive never started waiting")
	}
	if err := ps.Close(); err != nil {
		t.Fatal(err)
	}
	endsClosed(t, done, "a waiting Receive")
	if err := ps.Subscribe(context.Background(), "a"); !errors.Is(err, driver.ErrClosed) {
		t.Errorf("Subscribe after Close: %v, want ErrClosed", err)
	}
	if err := ps.Close(); err != nil {
		t.Errorf("a second Close: %v", err)
	}
}

// Close while messages of 256 KiB stream in (the reader most likely in the
// middle of one) ends the Receive loop with ErrClosed at once (a Receive
// in progress may still return a message already read), ends the reader,
// and races with nothing.
func TestPubSubCloseWhileAMessageIsReadEndsReceive(t *testing.T) {
	leakcheck.Check(t)
	t.Parallel()
	c, ps := subscribed(t)
	ctx := within(t, 30*time.Second)
	pctx, stop := context.WithCancel(ctx)
	defer stop()
	payload := strings.Repeat("x", 256<<10)
	published := make(chan struct{})
	go func() {
		defer close(published)
		for i := 0; i < 2000 && pctx.Err() == nil; i++ {
			c.Do(pctx, "PUBLISH", "a", payload)
		}
	}()
	first, done := make(chan struct{}), make(chan error, 1)
	go func() {
		for n := 0; ; n++ {
			m, err := ps.Receive(ctx)
			if err != nil {
				done <- err
				return
			}
			if n == 0 {
				close(first)
			}
			if m.Kind != "message" || len(m.Payload) != len(payload) {
				done <- fmt.Errorf("message %d: %s on %q with %d bytes", n, m.Kind, m.Channel, len(m.Payload))
				return
			}
		}
	}()
	select {
	case <-first:
	case err := <-done:
		t.Fatalf("Receive before Close: %v", err)
	}
	if err := ps.Close(); err != nil {
		t.Fatal(err)
	}
	endsClosed(t, done, "the Receive loop")
	stop()
	<-published
}

// waitFor reports whether cond became true within d, polled every 10ms.
func waitFor(d time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(d); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			return false
		}
	}
	return true
}

func TestPubSubBreaksForGood(t *testing.T) {
	t.Parallel()
	p := redistest.NewProxy(t, redistest.Start(t, redistest.TCP()).Addr())
	_, ps := openPubSub(t, p.Addr())
	ctx := within(t, 10*time.Second)
	if err := ps.Subscribe(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	expect(t, ps, driver.Message{Kind: "subscribe", Channel: "a"})
	p.Cut()
	_, err := ps.Receive(ctx)
	if err == nil || errors.Is(err, driver.ErrClosed) || ctx.Err() != nil {
		t.Fatalf("Receive on a cut connection: %v, want the break", err)
	}
	if err := ps.Subscribe(ctx, "b"); err == nil {
		t.Error("Subscribe on a broken connection succeeded")
	}
	if _, err := ps.Receive(ctx); err == nil {
		t.Error("a second Receive on a broken connection succeeded")
	}
}
