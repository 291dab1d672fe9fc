package dlockredigo_test

import (
	"context"
	"errors"
	"io"
	"net"
	"reflect"
	"testing"
	"time"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/driver"
	"github.com/dlockio/dlock/extra/dlockredigo"
	"github.com/dlockio/dlock/internal/redisserver"
	"github.com/dlockio/dlock/internal/redistest"
)

// within returns a context that ends after d or with t.
func within(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestNilPoolIsRefused(t *testing.T) {
	t.Parallel()
	if c := dlockredigo.Conn(nil); c != nil {
		t.Fatalf("Conn(nil) = %v, want nil", c)
	}
	if _, err := dlockredigo.New(nil); !errors.Is(err, dlock.ErrInvalid) {
		t.Fatalf("New(nil): %v, want ErrInvalid", err)
	}
}

func TestRepliesTakeTheDriverForms(t *testing.T) {
	t.Parallel()
	c := dlockredigo.Conn(newPool(t, redistest.Start(t, redistest.TCP()).Addr()))
	ctx := within(t, 10*time.Second)
	key := "k"
	for _, tc := range []struct {
		args []any
		want any
	}{
		{[]any{"SET", &key, []byte("v")}, "OK"},
		{[]any{"GET", "k"}, "v"},
		{[]any{"GET", "missing"}, nil},
		{[]any{"INCRBY", "n", int64(2)}, int64(2)},
		{[]any{"EVAL", "return {1, 'a', {false, 'b'}}", 0}, []any{int64(1), "a", []any{nil, "b"}}},
	} {
		if got, err := c.Do(ctx, tc.args...); err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Do%v = %#v, %v; want %#v", tc.args, got, err, tc.want)
		}
	}
	var derr driver.Error
	if _, err := c.Do(ctx, "NOSUCHCOMMAND"); !errors.As(err, &derr) {
		t.Errorf("an unknown command: %v, want a driver.Error", err)
	}
	if _, err := c.Do(ctx, "EVAL", "return {1, redis.error_reply('BOOM inside')}", 0); !errors.As(err, &derr) || derr != "BOOM inside" {
		t.Errorf("an error inside an array: %v, want driver.Error BOOM inside", err)
	}
	if got := c.Info(); got != (driver.Info{}) {
		t.Errorf("Info = %+v, want a single server, and nothing said of retries", got)
	}
	if ms, err := c.Masters(ctx); err != nil || len(ms) != 1 || ms[0] != c {
		t.Errorf("Masters = %v, %v; want the Conn itself", ms, err)
	}
}

func TestBadCommandsAreRefusedAndOthersRun(t *testing.T) {
	t.Parallel()
	c := dlockredigo.Conn(newPool(t, redistest.Start(t, redistest.TCP()).Addr()))
	ctx := within(t, 10*time.Second)
	if _, err := c.Do(ctx); !errors.Is(err, driver.ErrNotSent) {
		t.Errorf("an empty command: %v, want it refused unsent (driver.ErrNotSent)", err)
	}
	if _, err := c.Do(ctx, "SET", "k", 1.5); !errors.Is(err, driver.ErrNotSent) {
		t.Errorf("a float64 argument: %v, want it refused unsent (driver.ErrNotSent)", err)
	}
	rs := c.DoMulti(ctx, []any{"SET", "k", "v"}, nil, []any{"GET", "k", struct{}{}}, []any{"BADCMD"}, []any{"GET", "k"})
	if len(rs) != 5 || rs[0].Val != "OK" || !errors.Is(rs[1].Err, driver.ErrNotSent) || !errors.Is(rs[2].Err, driver.ErrNotSent) || rs[4].Val != "v" || rs[4].Err != nil {
		t.Fatalf("DoMulti = %+v", rs)
	}
	var derr driver.Error
	if !errors.As(rs[3].Err, &derr) {
		t.Errorf("DoMulti's unknown command: %v, want a driver.Error", rs[3].Err)
	}
}

func TestClosedPoolIsErrClosed(t *testing.T) {
	t.Parallel()
	p := newPool(t, redistest.Start(t, redistest.TCP()).Addr())
	c := dlockredigo.Conn(p)
	ctx := within(t, 10*time.Second)
	if _, err := c.Do(ctx, "PING"); err != nil {
		t.Fatal(err)
	}
	p.Close()
	if _, err := c.Do(ctx, "PING"); !errors.Is(err, driver.ErrClosed) {
		t.Errorf("Do on a closed pool: %v, want ErrClosed", err)
	}
	if rs := c.DoMulti(ctx, []any{"PING"}); !errors.Is(rs[0].Err, driver.ErrClosed) {
		t.Errorf("DoMulti on a closed pool: %v, want ErrClosed", rs[0].Err)
	}
}

func TestNoServerIsADialError(t *testing.T) {
	t.Parallel()
	ln, err := redisserver.Listen() // (a port no other server of this process is given)
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	c := dlockredigo.Conn(newPool(t, addr))
	ctx := within(t, 10*time.Second)
	var op *net.OpError
	if _, err := c.Do(ctx, "PING"); !errors.As(err, &op) || op.Op != "dial" {
		t.Errorf("Do with no server: %v, want a dial *net.OpError", err)
	}
	if _, err := c.PubSub(ctx, ""); !errors.As(err, &op) || op.Op != "dial" {
		t.Errorf("PubSub with no server: %v, want a dial *net.OpError", err)
	}
}

func TestCutConnectionLosesTheReply(t *testing.T) {
	t.Parallel()
	p := redistest.NewProxy(t, redistest.Start(t, redistest.TCP()).Addr())
	c := dlockredigo.Conn(newPool(t, p.Addr()))
	ctx := within(t, 30*time.Second)
	if _, err := c.Do(ctx, "PING"); err != nil {
		t.Fatal(err)
	}
	p.StallReplies()
	done := make(chan error, 1)
	go func() {
		_, err := c.Do(ctx, "INCR", "n")
		done <- err
	}()
	cut := time.NewTicker(50 * time.Millisecond) // until the command is in flight
	defer cut.Stop()
	for {
		select {
		case err := <-done:
			var ne net.Error
			if !errors.Is(err, io.EOF) && !errors.As(err, &ne) {
				t.Fatalf("a cut connection's reply: %v, want io.EOF or a net.Error", err)
			}
			return
		case <-cut.C:
			p.Cut()
		case <-ctx.Done():
			t.Fatal("Do did not return after the connection was cut")
		}
	}
}

func TestCommandEndsWithItsContext(t *testing.T) {
	t.Parallel()
	p := redistest.NewProxy(t, redistest.Start(t, redistest.TCP()).Addr())
	c := dlockredigo.Conn(newPool(t, p.Addr()))
	p.StallReplies()
	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(100*time.Millisecond, cancel)
	if _, err := c.Do(ctx, "PING"); !errors.Is(err, context.Canceled) {
		t.Errorf("Do under a stall: %v, want context.Canceled", err)
	}
	rs := c.DoMulti(within(t, 100*time.Millisecond), []any{"PING"}, []any{"PING"})
	var ne net.Error
	for _, r := range rs {
		if !errors.Is(r.Err, context.DeadlineExceeded) && !errors.As(r.Err, &ne) {
			t.Errorf("DoMulti under a stall: %v, want a deadline or timeout", r.Err)
		}
	}
}
