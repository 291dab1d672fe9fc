package dlockrueidis

import (
	"context"
	"testing"
	"time"

	hub "github.com/dlockio/dlock/internal/pubsub"
	"github.com/dlockio/dlock/internal/redistest"
)

// A quiet pub/sub connection whose PINGs are answered is kept past the
// health check; one that takes a PING and answers nothing is let go, and
// once the network is back its waiter is woken (Recheck) and a release
// reaches it.
func TestQuietConnectionKeptAndStalledOneLetGo(t *testing.T) {
	if testing.Short() {
		t.Skip("waits past the health check three times")
	}
	t.Parallel()
	s := redistest.Start(t, redistest.TCP())
	p := redistest.NewProxy(t, s.Addr())
	h := hub.New(Conn(client(t, p.Addr())), false)
	defer h.Close()
	wake := make(chan int64, 1)
	w, ready := h.Subscribe("ch", "a", wake)
	defer w.Close()
	select {
	case <-ready:
	case <-time.After(10 * time.Second):
		t.Fatal("subscription not confirmed")
	}
	select { // (past one health check: pinged, answered)
	case got := <-wake:
		t.Fatalf("a quiet, healthy connection: woken with %d", got)
	case <-time.After(45 * time.Second):
	}
	if !h.Listening("ch") {
		t.Fatal("a quiet, healthy connection was let go")
	}
	p.Stall()
	for deadline := time.Now().Add(90 * time.Second); h.Listening("ch"); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the hub still listens on a connection that answers nothing")
		}
	}
	p.Cut()
	select {
	case got := <-wake:
		if got != hub.Recheck {
			t.Fatalf("woken with %d, want Recheck", got)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("not woken once the network was back")
	}
	if _, err := s.Do(context.Background(), "PUBLISH", "ch", hub.WakeAll); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-wake:
		if got != hub.Released {
			t.Fatalf("woken with %d, want Released", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a release did not reach the waiter")
	}
}

// A PING whose reply comes late, but within 10 s, keeps the connection:
// its waiter is not woken, and a release still reaches it.
func TestLatePongKeepsTheConnection(t *testing.T) {
	if testing.Short() {
		t.Skip("waits past the health check")
	}
	t.Parallel()
	s := redistest.Start(t, redistest.TCP())
	p := redistest.NewProxy(t, s.Addr())
	h := hub.New(Conn(client(t, p.Addr())), false)
	defer h.Close()
	wake := make(chan int64, 1)
	w, ready := h.Subscribe("ch", "a", wake)
	defer w.Close()
	select {
	case <-ready:
	case <-time.After(10 * time.Second):
		t.Fatal("subscription not confirmed")
	}
	p.Delay(0, 8*time.Second)
	select {
	case got := <-wake:
		t.Fatalf("woken with %d: a connection whose PING was answered late was let go", got)
	case <-time.After(60 * time.Second):
	}
	if !h.Listening("ch") {
		t.Fatal("not listening on a connection that answers late")
	}
	if _, err := s.Do(context.Background(), "PUBLISH", "ch", hub.WakeAll); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-wake:
		if got != hub.Released {
			t.Fatalf("woken with %d, want Released", got)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("a release did not reach the waiter")
	}
}
