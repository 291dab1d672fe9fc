package dlockrueidis

import (
	"bytes"
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/redistest"
)

func newDlock(t *testing.T, addr string, opts ...dlock.Option) *dlock.Client {
	t.Helper()
	c, err := New(client(t, addr), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c.Close(ctx)
	})
	return c
}

func stacks() string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	// keep the goroutines running dlock code
	var out []byte
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		if bytes.Contains(g, []byte("dlock")) {
			out = append(append(out, g...), "\n\n"...)
		}
	}
	return string(out)
}

// A stalled pub/sub connection (a server that stops answering, a
// blackholed TCP connection) while the hub unsubscribes a channel whose
// last waiter left: an Acquire of the Client still ends with its context.
// (The hub calls the driver's Subscribe and Unsubscribe under its lock; an
// adapter whose Unsubscribe waited for the confirmation held every Acquire,
// and Close, for rueidis's write timeout.)
func TestStalledPubSubDoesNotHoldAcquire(t *testing.T) {
	s := redistest.Start(t, redistest.TCP())
	p := redistest.NewProxy(t, s.Addr())
	holder := newDlock(t, s.Addr())
	bg, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, name := range []string{"x", "y", "z"} {
		if _, err := holder.TryAcquire(bg, name); err != nil {
			t.Fatal(err)
		}
	}
	c := newDlock(t, p.Addr())
	xctx, xcancel := context.WithTimeout(bg, 30*time.Second)
	defer xcancel()
	xdone := make(chan struct{})
	go func() { defer close(xdone); c.Acquire(xctx, "x") }()
	time.Sleep(300 * time.Millisecond) // x is subscribed: the hub's connection stays open
	yctx, ycancel := context.WithTimeout(bg, 500*time.Millisecond)
	_, err := c.Acquire(yctx, "y")
	ycancel()
	if err == nil {
		t.Fatal("y acquired although held")
	}
	// y's waiter left: its channel is unsubscribed after linger (500ms).
	p.Stall()
	time.Sleep(800 * time.Millisecond)
	start := time.Now()
	zctx, zcancel := context.WithTimeout(bg, 300*time.Millisecond)
	done := make(chan error, 1)
	go func() { _, err := c.Acquire(zctx, "z"); done <- err }()
	var st string
	select {
	case err = <-done:
	case <-time.After(3 * time.Second):
		st = stacks()
		err = <-done
	}
	elapsed := time.Since(start)
	zcancel()
	p.Cut()
	xcancel()
	<-xdone
	if elapsed > 2*time.Second {
		t.Fatalf("Acquire with a 300ms context returned after %v (err %v): blocked on the hub while it waited for the stalled pub/sub connection\n%s", elapsed, err, st)
	}
	t.Logf("Acquire returned after %v: %v", elapsed, err)
}

// A nil client is refused with ErrInvalid, never a panic.
func TestNilClient(t *testing.T) {
	for name, f := range map[string]func() error{
		"New(nil)": func() error { _, err := New(nil); return err },
		"NewFrom(Conn(nil))": func() error {
			_, err := dlock.NewFrom(Conn(nil))
			return err
		},
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("%s panicked: %v", name, r)
				}
			}()
			if err := f(); !errors.Is(err, dlock.ErrInvalid) {
				t.Fatalf("%s = %v, want ErrInvalid", name, err)
			}
		})
	}
}

// As TestStalledPubSubDoesNotHoldAcquire, for Client.Close(ctx).
func TestStalledPubSubDoesNotHoldClose(t *testing.T) {
	s := redistest.Start(t, redistest.TCP())
	p := redistest.NewProxy(t, s.Addr())
	holder := newDlock(t, s.Addr())
	bg, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, name := range []string{"x", "y"} {
		if _, err := holder.TryAcquire(bg, name); err != nil {
			t.Fatal(err)
		}
	}
	c, err := New(client(t, p.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	xctx, xcancel := context.WithTimeout(bg, 30*time.Second)
	defer xcancel()
	xdone := make(chan struct{})
	go func() { defer close(xdone); c.Acquire(xctx, "x") }()
	time.Sleep(300 * time.Millisecond)
	yctx, ycancel := context.WithTimeout(bg, 500*time.Millisecond)
	c.Acquire(yctx, "y")
	ycancel()
	p.Stall()
	time.Sleep(800 * time.Millisecond)
	start := time.Now()
	cctx, ccancel := context.WithTimeout(bg, 300*time.Millisecond)
	c.Close(cctx)
	elapsed := time.Since(start)
	ccancel()
	p.Cut()
	xcancel()
	<-xdone
	if elapsed > 2*time.Second {
		t.Fatalf("Close with a 300ms context returned after %v", elapsed)
	}
}
