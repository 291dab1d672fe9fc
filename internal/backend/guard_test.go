package backend

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/driver"
	"github.com/dlockio/dlock/internal/goredisdriver"
	"github.com/dlockio/dlock/internal/leakcheck"
	"github.com/dlockio/dlock/internal/redistest"
)

// An error reply and a closed client are replies; anything else a call
// returns (a broken or timed-out connection) is none.
func TestNoReplyIsNeitherAnErrorReplyNorAClosedClient(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{driver.Error("NOSCRIPT No matching script"), false},
		{fmt.Errorf("wrapped: %w", driver.Error("ERR x")), false},
		{fmt.Errorf("%w: %w", driver.ErrClosed, redis.ErrClosed), false},
		{fmt.Errorf("%w: argument 2 of type float64", driver.ErrNotSent), false},
		{io.EOF, true},
		{context.DeadlineExceeded, true},
	} {
		if got := noReply(c.err); got != c.want {
			t.Errorf("noReply(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// A driver call whose reply is lost answers with the driver's own errors,
// command by command, and guards the calls after it: a DoMulti or Do then
// left in flight when its context ends answers every command with
// ErrLeftInFlight and the context's error. Masters wraps each master in
// the guard. (Not parallel: it sets the process's lastNoReply.)
func TestGuardLeavesACallInFlightAfterALostReply(t *testing.T) {
	// (Its calls end at ReadTimeout, long after the contexts of the guarded
	// ones, which leave first.)
	g, p := guardedThroughProxy(t, 2*time.Second)

	ms, err := g.Masters(t.Context())
	if err != nil || len(ms) != 1 {
		t.Fatalf("Masters = %v, %v, want one", ms, err)
	}
	if _, ok := ms[0].(guard); !ok {
		t.Errorf("Masters' master is a %T, want a guard", ms[0])
	}
	if v, err := ms[0].Do(t.Context(), "PING"); err != nil || v != "PONG" {
		t.Fatalf("PING = %v, %v", v, err)
	}
	cmds := [][]any{{"PING"}, {"PING"}, {"PING"}}
	p.Stall()
	rs := g.DoMulti(t.Context(), cmds...)
	if len(rs) != len(cmds) || lastNoReply.Load() == 0 {
		t.Fatalf("a lost DoMulti = %v (lastNoReply %d), want %d results, and guarded calls from now", rs, lastNoReply.Load(), len(cmds))
	}
	for i, r := range rs {
		if !noReply(r.Err) || errors.Is(r.Err, ErrLeftInFlight) {
			t.Errorf("a lost DoMulti's result %d = %v, want the driver's own error", i, r.Err)
		}
	}

	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	rs = g.DoMulti(ctx, cmds...)
	if len(rs) != len(cmds) {
		t.Fatalf("a guarded DoMulti left in flight = %v, want %d results", rs, len(cmds))
	}
	for i, r := range rs {
		if r.Val != nil || !errors.Is(r.Err, ErrLeftInFlight) || !errors.Is(r.Err, context.DeadlineExceeded) {
			t.Errorf("a guarded DoMulti's result %d = %v, %v, want nil, ErrLeftInFlight and the context's error", i, r.Val, r.Err)
		}
	}
	ctx, cancel = context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	if v, err := ms[0].Do(ctx, "PING"); v != nil || !errors.Is(err, ErrLeftInFlight) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a guarded Do left in flight = %v, %v, want nil, ErrLeftInFlight and the context's error", v, err)
	}
}

// short is a driver whose DoMulti drops its last reply.
type short struct{ driver.Conn }

func (s short) DoMulti(ctx context.Context, cmds ...[]any) []driver.Result {
	rs := s.Conn.DoMulti(ctx, cmds...)
	return rs[:len(rs)-1]
}

// A driver that answers a pipeline with fewer replies than commands gets
// an error for every command, as a lost reply, instead of a short slice
// that a caller would index past. (Not parallel: it sets lastNoReply.)
func TestGuardAnswersEveryCommandOfADriverMissingReplies(t *testing.T) {
	was := lastNoReply.Swap(0)
	t.Cleanup(func() { lastNoReply.Store(was) })
	s := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr()})
	t.Cleanup(func() { rdb.Close() })
	g := guard{short{goredisdriver.Conn(rdb)}}
	rs := g.DoMulti(t.Context(), []any{"PING"}, []any{"PING"})
	if len(rs) != 2 {
		t.Fatalf("DoMulti gave %d results, want 2", len(rs))
	}
	for i, r := range rs {
		if r.Err == nil || !noReply(r.Err) || !strings.Contains(r.Err.Error(), "1 replies to 2 commands") {
			t.Errorf("result %d = %v, %v; want an error that no reply came", i, r.Val, r.Err)
		}
	}
}

// A command that the driver refuses before sending it (an argument of a
// type it cannot send) got no reply because it never left the client: its
// error wraps ErrNotSent, and the calls after it are not guarded. (Not
// parallel: it reads lastNoReply.)
func TestGuardLeavesCallsUnguardedAfterADriversOwnRefusal(t *testing.T) {
	was := lastNoReply.Swap(0)
	t.Cleanup(func() { lastNoReply.Store(was) })
	s := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr()})
	t.Cleanup(func() { rdb.Close() })
	g := guard{goredisdriver.Conn(rdb)}
	if _, err := g.Do(t.Context(), "SET", "k", struct{}{}); !errors.Is(err, ErrNotSent) {
		t.Errorf("Do(SET k struct{}{}) = %v, want ErrNotSent", err)
	}
	for i, r := range g.DoMulti(t.Context(), []any{"SET", "k", "v"}, []any{"SET", "k", struct{}{}}) {
		if !errors.Is(r.Err, ErrNotSent) {
			t.Errorf("DoMulti's result %d, beside a refused command = %v, want ErrNotSent", i, r.Err)
		}
	}
	if troubled() {
		t.Errorf("after the driver's refusals, calls are guarded (lastNoReply %d), want not", lastNoReply.Load())
	}
	if v, err := g.Do(t.Context(), "GET", "k"); v != nil || err != nil {
		t.Errorf("GET k = %v, %v, want nil, nil: nothing was sent", v, err)
	}
}

// A guarded call left in flight when its context ends failed without a
// reply then, not when the driver's call ends: a call that checks the
// guard after the earlier trouble would have ended, while the driver still
// waits on the network for the first, is guarded too and leaves at its own
// context's end. (Not parallel: it sets lastNoReply.)
func TestGuardCountsACallLeftInFlightAsTroubleWhenItLeaves(t *testing.T) {
	g, p := guardedThroughProxy(t, 5*time.Second) // (its calls end at ReadTimeout, whatever their contexts)
	if v, err := g.Do(t.Context(), "PING"); err != nil || v != "PONG" {
		t.Fatalf("PING = %v, %v", v, err)
	}
	p.Stall()
	ends := time.Now().Add(time.Second) // an earlier failure's trouble ends then
	lastNoReply.Store(int64(time.Since(epoch) - troubleFor + time.Second))
	call := func() (time.Duration, error) {
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := g.Do(ctx, "PING")
		return time.Since(start), err
	}
	if _, err := call(); !errors.Is(err, ErrLeftInFlight) {
		t.Fatalf("a call in the trouble = %v, want ErrLeftInFlight", err)
	}
	time.Sleep(time.Until(ends) + 50*time.Millisecond)
	if took, err := call(); !errors.Is(err, ErrLeftInFlight) {
		t.Errorf("a call after the earlier trouble's end, the first in flight = %v after %v, want ErrLeftInFlight at its context's end", err, took)
	}
}

// guardedThroughProxy returns a guard over a go-redis client of a new
// server, through a proxy that is cut when the test ends (so that the calls
// left in flight end), whose calls end at readTimeout. It clears
// lastNoReply for the test and puts it back after: the test is not
// parallel.
func guardedThroughProxy(t *testing.T, readTimeout time.Duration) (guard, *redistest.Proxy) {
	t.Helper()
	leakcheck.Check(t)
	was := lastNoReply.Swap(0)
	t.Cleanup(func() { lastNoReply.Store(was) })
	s := redistest.Start(t, redistest.TCP())
	p := redistest.NewProxy(t, s.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ReadTimeout: readTimeout, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	t.Cleanup(p.Cut)
	return guard{goredisdriver.Conn(rdb)}, p
}

// While calls are guarded, one whose context is already done is not sent:
// it is told ErrNotSent (nothing to undo), not left in flight, and adds no
// trouble. (Not parallel: it sets lastNoReply.)
func TestGuardedCallWithADoneContextIsNotSent(t *testing.T) {
	g, _ := guardedThroughProxy(t, 2*time.Second)
	at := int64(time.Since(epoch))
	lastNoReply.Store(at)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := g.Do(ctx, "SET", "k", "v"); !errors.Is(err, ErrNotSent) || errors.Is(err, ErrLeftInFlight) || !errors.Is(err, context.Canceled) {
		t.Errorf("a guarded SET with a done context = %v, want ErrNotSent and the context's error", err)
	}
	for i, r := range g.DoMulti(ctx, []any{"SET", "k", "v"}, []any{"PING"}) {
		if !errors.Is(r.Err, ErrNotSent) {
			t.Errorf("a guarded DoMulti with a done context: result %d = %v, want ErrNotSent", i, r.Err)
		}
	}
	if v, err := g.Do(t.Context(), "GET", "k"); v != nil || err != nil {
		t.Errorf("GET k = %v, %v, want nil, nil: nothing was sent", v, err)
	}
	if lastNoReply.Load() != at {
		t.Errorf("the done calls moved the trouble's start")
	}
}
