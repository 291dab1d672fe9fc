package dlock_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlockio/dlock"
)

// largeN is the largest hold AcquireN takes: more permits than a Lua script
// may unpack into one command (about 4,000 members with their scores).
const largeN = dlock.MaxAcquireN

// sizedSemaphore returns the semaphore name of largeN + 1 permits: the
// Semaphore's own N, or a size kept in Redis for a Semaphore of N = 0.
func sizedSemaphore(t *testing.T, c *dlock.Client, name string, kept bool) *dlock.Semaphore {
	t.Helper()
	if !kept {
		return newSemaphore(t, c, name, largeN+1)
	}
	s := newSemaphore(t, c, name, 0)
	if ok, err := s.TrySetPermits(t.Context(), largeN+1); err != nil || !ok {
		t.Fatalf("TrySetPermits(%d) = %v, %v; want true", largeN+1, ok, err)
	}
	return s
}

// wantAvailable checks s.Available.
func wantAvailable(t *testing.T, s *dlock.Semaphore, want int, when string) {
	t.Helper()
	if n, err := s.Available(t.Context()); err != nil || n != want {
		t.Errorf("Available %s = %d, %v; want %d", when, n, err, want)
	}
}

// AcquireN of many permits at once, on a free semaphore: held, counted,
// shown, extended and released as one, with or without a kept size; more
// than MaxAcquireN is refused with ErrInvalid.
func TestSemaphoreAcquireNOfManyPermits(t *testing.T) {
	t.Parallel()
	for _, kept := range []bool{false, true} {
		t.Run("kept="+strconv.FormatBool(kept), func(t *testing.T) {
			_, rdb := setup(t)
			ctx := t.Context()
			s := sizedSemaphore(t, newClient(t, rdb), "many", kept)
			if _, err := s.AcquireN(ctx, largeN+1); !errors.Is(err, dlock.ErrInvalid) || !strings.Contains(err.Error(), "MaxAcquireN") {
				t.Errorf("AcquireN(MaxAcquireN + 1) = %v, want ErrInvalid naming MaxAcquireN", err)
			}
			l, err := s.AcquireN(ctx, largeN)
			if err != nil {
				t.Fatalf("AcquireN(%d) of a free semaphore of %d: %v", largeN, largeN+1, err)
			}
			wantAvailable(t, s, 1, "with all but one held")
			if ps, err := s.Holders(ctx); err != nil || len(ps) != 1 || ps[0].Count != largeN {
				t.Errorf("Holders = %v, %v; want one hold of %d", ps, err, largeN)
			}
			if err := l.Extend(ctx, time.Minute); err != nil {
				t.Errorf("Extend of the hold of %d: %v", largeN, err)
			}
			last, err := s.TryAcquire(ctx)
			if err != nil {
				t.Fatalf("TryAcquire of the last permit: %v", err)
			}
			if _, err := s.TryAcquire(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
				t.Errorf("TryAcquire with all held = %v, want ErrNotAcquired", err)
			}
			if err := l.Release(ctx); err != nil {
				t.Errorf("Release of the hold of %d: %v", largeN, err)
			}
			wantAvailable(t, s, largeN, "after the release of the hold")
			if err := last.Release(ctx); err != nil {
				t.Errorf("Release of the last permit: %v", err)
			}
			if n := rdb.ZCard(ctx, semKey("many")).Val(); n != 0 {
				t.Errorf("%d members left after the release", n)
			}
		})
	}
}

// A waiter for many permits at once, queued behind a holder, holds up
// nobody's calls: the others' acquires are refused or queue behind it as
// usual, the holder's release grants it its permits and the next waiter
// its one, and the accounting is right afterwards.
func TestSemaphoreWaiterForManyPermitsBreaksNothing(t *testing.T) {
	t.Parallel()
	for _, kept := range []bool{false, true} {
		t.Run("kept="+strconv.FormatBool(kept), func(t *testing.T) {
			_, rdb := setup(t)
			ctx := t.Context()
			const name = "many-waiter"
			s := sizedSemaphore(t, newClient(t, rdb), name, kept)
			first, err := s.AcquireN(ctx, 2)
			if err != nil {
				t.Fatal(err)
			}
			type result struct {
				l   *dlock.Lock
				err error
			}
			many, one := make(chan result, 1), make(chan result, 1)
			queued := func(n int64) bool {
				return waitFor(10*time.Second, func() bool { return rdb.LLen(ctx, "dlock:{"+name+"}:q").Val() == n })
			}
			go func() {
				l, err := s.AcquireN(ctx, largeN, dlock.MaxWait(30*time.Second))
				many <- result{l, err}
			}()
			if !queued(1) {
				t.Fatal("the waiter for many permits never queued")
			}
			if _, err := s.TryAcquire(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
				t.Errorf("TryAcquire behind the waiter = %v, want ErrNotAcquired", err)
			}
			go func() {
				l, err := s.Acquire(ctx, dlock.MaxWait(30*time.Second))
				one <- result{l, err}
			}()
			if !queued(2) {
				t.Fatal("a waiter for one permit never queued behind the waiter for many")
			}
			wantAvailable(t, s, largeN-1, "with two held and two waiting")
			if err := first.Release(ctx); err != nil {
				t.Fatalf("Release of the holder ahead of the waiters: %v", err)
			}
			var held []*dlock.Lock
			for what, ch := range map[string]chan result{"AcquireN(MaxAcquireN)": many, "Acquire": one} {
				r := <-ch
				if r.err != nil {
					t.Errorf("%s once the holder released: %v", what, r.err)
					continue
				}
				held = append(held, r.l)
			}
			wantAvailable(t, s, 0, "with both waiters' holds")
			for _, l := range held {
				if err := l.Release(ctx); err != nil {
					t.Errorf("Release: %v", err)
				}
			}
			wantAvailable(t, s, largeN+1, "after all released")
			if n := rdb.Exists(ctx, "dlock:{"+name+"}:q", "dlock:{"+name+"}:qw").Val(); n != 0 {
				t.Errorf("%d queue keys left", n)
			}
		})
	}
}
