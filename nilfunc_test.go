package dlock_test

import (
	"context"
	"errors"
	"testing"

	"github.com/dlockio/dlock"
)

// Every Do given a nil function refuses it with ErrInvalid before it takes
// anything: the name stays free.
func TestDoRefusesANilFuncBeforeTakingTheLock(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb)
	sem, err := c.Semaphore("nil-sem", 2)
	if err != nil {
		t.Fatal(err)
	}
	rw, err := c.RWMutex("nil-rw")
	if err != nil {
		t.Fatal(err)
	}
	e, err := c.Election("nil-e")
	if err != nil {
		t.Fatal(err)
	}
	for name, do := range map[string]func() error{
		"Client.Do":    func() error { return c.Do(ctx, "nil-a", nil) },
		"Client.TryDo": func() error { return c.TryDo(ctx, "nil-a", nil) },
		"DoAll":        func() error { return c.DoAll(ctx, []string{"nil-a", "nil-b"}, nil) },
		"TryDoAll":     func() error { return c.TryDoAll(ctx, []string{"nil-a", "nil-b"}, nil) },
		"Semaphore.Do": func() error { return sem.Do(ctx, nil) },
		"RWLocker.Do":  func() error { return rw.Writer().Do(ctx, nil) },
		"Election.Do":  func() error { return e.Do(ctx, "v", nil) },
	} {
		if err := do(); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("%s(nil) = %v, want ErrInvalid", name, err)
		}
	}
	if n, err := rdb.Exists(ctx, "dlock:{nil-a}", "dlock:{nil-b}", "dlock:{nil-sem}", "dlock:{nil-rw}", "dlock:{nil-e}").Result(); err != nil || n != 0 {
		t.Errorf("%d lock keys exist after the refused calls (%v), want none", n, err)
	}
}

// Guard.Write refuses a write with no fence or no token (a Lock.Fence
// whose error was ignored returns 0): such a write would not be fenced.
func TestGuardWriteRefusesAMissingFenceOrToken(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	g := dlock.NewGuard(rdb)
	ctx := context.Background()
	for _, in := range []struct {
		fence int64
		token string
	}{{0, "tok"}, {-1, "tok"}, {5, ""}, {0, ""}} {
		if err := g.Write(ctx, "res", "v", in.fence, in.token); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("Write(fence %d, token %q) = %v, want ErrInvalid", in.fence, in.token, err)
		}
	}
	if n, _ := rdb.Exists(ctx, "res").Result(); n != 0 {
		t.Error("a refused write wrote the resource")
	}
}

// After its own Release a Lock's TTL says it was released, as Extend does,
// not that the lease was lost.
func TestTTLAfterReleaseIsErrReleased(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb)
	l, err := c.Acquire(ctx, "ttl-released")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := l.TTL(ctx); !errors.Is(err, dlock.ErrReleased) || errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("TTL after Release = %v, want ErrReleased (not ErrNotHeld)", err)
	}
}
