package dlocktest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/dlocktest"
	"github.com/dlockio/dlock/internal/leakcheck"
)

// Hold makes the lock someone else's until release: TryAcquire is refused
// meanwhile, and succeeds after.
func TestHold(t *testing.T) {
	leakcheck.Check(t)
	c := dlocktest.NewClient(t)
	release := dlocktest.Hold(t, c, "reports")
	if _, err := c.TryAcquire(t.Context(), "reports"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire of a held lock = %v, want ErrNotAcquired", err)
	}
	release()
	l, err := c.TryAcquire(t.Context(), "reports")
	if err != nil {
		t.Fatalf("TryAcquire after release = %v", err)
	}
	l.Release(t.Context())
}

// Lose takes a lease away and returns once its holder knows: Err wraps
// ErrNotHeld, Done is closed, and Do's context is cancelled with that cause.
func TestLose(t *testing.T) {
	leakcheck.Check(t)
	for _, opts := range [][]dlock.Option{nil, {dlock.WithUnfair(nil)}, {dlock.WithAutoExtend(false)}} {
		c := dlocktest.NewClient(t, opts...)
		l, err := c.Acquire(t.Context(), "job")
		if err != nil {
			t.Fatal(err)
		}
		dlocktest.Lose(t, c, l)
		if !errors.Is(l.Err(), dlock.ErrNotHeld) {
			t.Errorf("Err after Lose = %v, want ErrNotHeld", l.Err())
		}
		other, err := c.TryAcquire(t.Context(), "job")
		if err != nil {
			t.Fatalf("TryAcquire after Lose = %v: the lock should be free", err)
		}
		other.Release(t.Context())

		err = c.Do(t.Context(), "job", func(ctx context.Context, l *dlock.Lock) error {
			dlocktest.Lose(t, c, l)
			if !errors.Is(context.Cause(ctx), dlock.ErrNotHeld) {
				t.Errorf("Do's ctx cause after Lose = %v, want ErrNotHeld", context.Cause(ctx))
			}
			return ctx.Err()
		})
		if !errors.Is(err, dlock.ErrNotHeld) {
			t.Errorf("Do after Lose = %v, want ErrNotHeld", err)
		}
	}
}

// The server's faults: a paused server answers nothing (an acquisition
// ends with its context), and a restarted one has forgotten every lock.
func TestServerFaults(t *testing.T) {
	t.Parallel()
	leakcheck.Check(t)
	s := dlocktest.Start(t, dlocktest.TCP())
	c, err := dlock.New(s.Client(), dlock.WithAutoExtend(false))
	if err != nil {
		t.Fatal(err)
	}
	l, err := c.TryAcquire(t.Context(), "a")
	if err != nil {
		t.Fatal(err)
	}
	s.Pause()
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	_, err = c.TryAcquire(ctx, "b")
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("TryAcquire on a paused server = %v, want its context's deadline", err)
	}
	s.Resume()
	s.Restart()
	for range 3 { // the first calls may meet connections of the old process
		if _, err = c.TryAcquire(t.Context(), "a"); err == nil {
			break
		}
	}
	if err != nil {
		t.Errorf("TryAcquire of a lock held before an empty restart = %v, want it free", err)
	}
	if err := l.Release(t.Context()); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Release of a lease the restart forgot = %v, want ErrNotHeld", err)
	}
	if err := c.Close(t.Context()); err != nil {
		t.Error(err)
	}
}
