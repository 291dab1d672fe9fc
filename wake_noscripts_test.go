package dlock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/dlockio/dlock"
)

// A script-free waiter's attempt sets the wake key for the holder's lease
// left, as acquire.lua does: a wake key it finds is lengthened to that,
// never shortened.
func TestWakeKeyWithoutScriptsIsLengthenedNeverShortened(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	h := newClient(t, rdb, dlock.WithoutScripts(), dlock.LeaseTTL(30*time.Second))
	w := newClient(t, rdb, dlock.WithoutScripts(), dlock.WithUnfair(slowBackoff))
	l, err := h.TryAcquire(ctx, "wk-ns")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	wake := l.Key() + ":w"
	for _, c := range []struct {
		name     string
		before   time.Duration // the wake key's life before the attempt (0: none)
		min, max time.Duration // and after it
	}{
		{"none", 0, 20 * time.Second, 30 * time.Second},
		{"shorter", 2 * time.Second, 20 * time.Second, 30 * time.Second},
		{"longer", 55 * time.Second, 50 * time.Second, 55 * time.Second},
	} {
		rdb.Del(ctx, wake)
		if c.before > 0 {
			if err := rdb.Set(ctx, wake, "1", c.before).Err(); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := w.Acquire(ctx, "wk-ns", dlock.MaxWait(50*time.Millisecond)); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatalf("%s: Acquire = %v; want ErrNotAcquired", c.name, err)
		}
		if pttl := rdb.PTTL(ctx, wake).Val(); pttl < c.min || pttl > c.max {
			t.Errorf("%s: the wake key lives %v after the attempt; want %v to %v", c.name, pttl, c.min, c.max)
		}
	}
}
