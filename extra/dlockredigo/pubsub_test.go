package dlockredigo_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlockio/dlock/driver"
	"github.com/dlockio/dlock/extra/dlockredigo"
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
	c, ps := openPubSub(t, redistest.Start(t, redistest.TCP()).Addr())
	ctx := within(t, 10*time.Second)
	if err := ps.Subscribe(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	expect(t, ps, driver.Message{Kind: "subscribe", Channel: "a"})
	if _, err := ps.Receive(within(t, 50*time.Millisecond)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Receive on a silent connection: %v, want DeadlineExceeded", err)
	}
	if _, err := c.Do(ctx, "PUBLISH", "a", "after"); err != nil {
		t.Fatal(err)
	}
	expect(t, ps, driver.Message{Kind: "message", Channel: "a", Payload: "after"})
}

func TestPubSubCloseEndsAReceive(t *testing.T) {
	t.Parallel()
	_, ps := openPubSub(t, redistest.Start(t, redistest.TCP()).Addr())
	done := make(chan error, 1)
	go func() {
		_, err := ps.Receive(context.Background())
		done <- err
	}()
	if err := ps.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, driver.ErrClosed) {
			t.Errorf("Receive after Close: %v, want ErrClosed", err)
		}
	case <-within(t, 10*time.Second).Done():
		t.Fatal("Close did not end a Receive")
	}
	if err := ps.Subscribe(context.Background(), "a"); !errors.Is(err, driver.ErrClosed) {
		t.Errorf("Subscribe after Close: %v, want ErrClosed", err)
	}
	if err := ps.Close(); err != nil {
		t.Errorf("a second Close: %v", err)
	}
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
