package goredisdriver

import (
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/driver"
	"github.com/dlockio/dlock/internal/redistest"
)

// A command with an argument of a type the driver does not send is refused
// unsent (driver.ErrNotSent), and a DoMulti that holds one refuses all its
// commands: those before it are not sent either. A DoMulti without one runs.
func TestRefusedArgumentRefusesTheWholeDoMultiUnsent(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	rdb := redis.NewClient(s.Options())
	defer rdb.Close()
	c := Conn(rdb)
	if _, err := c.Do(t.Context(), "SET", "k", 1.5); !errors.Is(err, driver.ErrNotSent) {
		t.Errorf("Do with a float64 argument = %v, want it refused unsent (driver.ErrNotSent)", err)
	}
	rs := c.DoMulti(t.Context(), []any{"SET", "k", "v"}, []any{"SET", "j", 1.5}, []any{"SET", "i", "v"})
	if len(rs) != 3 {
		t.Fatalf("DoMulti = %+v, want 3 results", rs)
	}
	for i, r := range rs {
		if r.Val != nil || !errors.Is(r.Err, driver.ErrNotSent) {
			t.Errorf("DoMulti's result %d = %v, %v; want it refused unsent (driver.ErrNotSent)", i, r.Val, r.Err)
		}
	}
	if n := s.Client(t).Exists(t.Context(), "k", "j", "i").Val(); n != 0 {
		t.Errorf("%d of the refused DoMulti's keys were set, want none", n)
	}
	rs = c.DoMulti(t.Context(), []any{"SET", "k", "v"}, []any{"GET", "k"})
	if len(rs) != 2 || rs[0].Val != "OK" || rs[1].Val != "v" || rs[0].Err != nil || rs[1].Err != nil {
		t.Errorf("DoMulti without a refused argument = %+v, want OK and v", rs)
	}
}
