package goredisdriver

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

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
