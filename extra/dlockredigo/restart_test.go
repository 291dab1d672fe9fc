package dlockredigo_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlockio/dlock/extra/dlockredigo"
	"github.com/dlockio/dlock/internal/redistest"
)

// After a server restart, a pool holds several idle connections the server
// closed: an acquisition still succeeds, although each of them fails one
// command before the pool hands out a live one.
func TestAcquireAfterARestartLeftSeveralDeadIdleConnections(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.TCP())
	pool := newPool(t, srv.Addr())
	c, err := dlockredigo.New(pool)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	ctx := within(t, 20*time.Second)
	// Four idle connections in the pool.
	var held []interface{ Close() error }
	for range 4 {
		rc, err := pool.GetContext(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := rc.Do("PING"); err != nil {
			t.Fatal(err)
		}
		held = append(held, rc)
	}
	for _, rc := range held {
		rc.Close()
	}
	if n := pool.IdleCount(); n != 4 {
		t.Fatalf("idle = %d, want 4", n)
	}
	srv.Restart()
	l, err := c.TryAcquire(ctx, "after-restart")
	if err != nil {
		t.Fatalf("TryAcquire after a restart: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
}
