package dlockredigo_test

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/dlockio/dlock/extra/dlockredigo"
	"github.com/dlockio/dlock/internal/redistest"
)

// DoMulti on an idle connection the server closed loses every reply (an
// io.EOF or a net.Error, which dlock asks again after), and leaves no dead
// connection in the pool: the next DoMulti runs.
func TestDoMultiOnADeadIdleConnectionLosesTheRepliesOnce(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.TCP())
	pool := newPool(t, srv.Addr())
	c := dlockredigo.Conn(pool)
	ctx := within(t, 10*time.Second)
	rc := pool.Get()
	if _, err := rc.Do("PING"); err != nil {
		t.Fatal(err)
	}
	rc.Close()
	admin := srv.Client(t)
	if err := admin.Do(ctx, "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes").Err(); err != nil {
		t.Fatal(err)
	}
	if pool.IdleCount() != 1 {
		t.Fatalf("idle %d, want 1", pool.IdleCount())
	}
	rs := c.DoMulti(ctx, []any{"INCR", "n"}, []any{"INCR", "n"})
	for i, r := range rs {
		var ne net.Error
		if r.Err == nil || !errors.Is(r.Err, io.EOF) && !errors.As(r.Err, &ne) {
			t.Errorf("command %d on a dead connection: %v, %v; want io.EOF or a net.Error", i, r.Val, r.Err)
		}
	}
	if n := pool.IdleCount(); n != 0 {
		t.Errorf("%d connections idle after the dead one failed, want 0", n)
	}
	rs = c.DoMulti(ctx, []any{"INCR", "n"}, []any{"GET", "n"})
	if rs[0].Err != nil || rs[1].Err != nil || rs[1].Val != "1" {
		t.Errorf("DoMulti after: %+v, want n = 1 (the dead connection's commands never ran)", rs)
	}
}
