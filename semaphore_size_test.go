package dlock_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockio/dlock"
)

// A size kept in Redis is set once, and then it is N for every caller,
// whatever N they were made with.
func TestSemaphoreSizeKeptInRedis(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb)
	s2, _ := c.Semaphore("kept", 2)
	s9, _ := c.Semaphore("kept", 9)
	if n, err := s2.Available(ctx); err != nil || n != 2 {
		t.Fatalf("Available before a size is kept = %d, %v; want the Semaphore's N, 2", n, err)
	}
	if ok, err := s2.TrySetPermits(ctx, 3); err != nil || !ok {
		t.Fatalf("TrySetPermits(3) = %v, %v; want true", ok, err)
	}
	if ok, err := s9.TrySetPermits(ctx, 5); err != nil || ok {
		t.Fatalf("a second TrySetPermits = %v, %v; want false (kept once)", ok, err)
	}
	var held []*dlock.Lock
	for i, s := range []*dlock.Semaphore{s2, s2, s2} { // three callers of N = 2
		l, err := s.TryAcquire(ctx)
		if err != nil {
			t.Fatalf("permit %d of the kept 3: %v", i+1, err)
		}
		held = append(held, l)
	}
	if n, err := s9.Available(ctx); err != nil || n != 0 {
		t.Errorf("Available with 3 of 3 held = %d, %v", n, err)
	}
	if _, err := s9.TryAcquire(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("a caller of N = 9 past the kept 3 = %v, want ErrNotAcquired", err)
	}
	if _, err := s9.AcquireN(ctx, 4, dlock.MaxWait(0)); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("AcquireN(4) of a kept size of 3 = %v, want ErrInvalid", err)
	}
	for _, l := range held {
		l.Release(ctx)
	}
	l, err := s9.AcquireN(ctx, 3)
	if err != nil {
		t.Fatalf("AcquireN(3) of a kept size of 3: %v", err)
	}
	l.Release(ctx)
	// A caller of N = 2 takes 3 of the kept 3: the kept size bounds it.
	if l, err = s2.AcquireN(ctx, 3, dlock.MaxWait(time.Second)); err != nil {
		t.Fatalf("AcquireN(3) by a caller of N = 2 of a kept size of 3: %v", err)
	}
	l.Release(ctx)
}

// AddPermits grows and shrinks the kept size. Growing admits a waiter at
// once; after a shrink the holders keep their permits, Available goes
// below 0, and nothing is granted until fewer than the new size are held.
// A size below 1 is refused and changes nothing.
func TestSemaphoreAddPermits(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb)
	s, _ := c.Semaphore("grow", 1)
	first, err := s.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *dlock.Lock, 1)
	go func() {
		l, err := s.Acquire(ctx, dlock.MaxWait(5*time.Second))
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	if !queued(ctx, rdb, "grow", 1) {
		t.Fatal("the waiter never queued")
	}
	if n, err := s.AddPermits(ctx, 2); err != nil || n != 3 {
		t.Fatalf("AddPermits(2) from N = 1 = %d, %v; want 3", n, err)
	}
	var second *dlock.Lock
	select {
	case second = <-got:
	case <-time.After(time.Second): // far below the waiter's own retry: the change woke it
		t.Fatal("growing the size did not admit the waiter")
	}
	third, err := s.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("the third permit of 3: %v", err)
	}
	if n, err := s.AddPermits(ctx, -2); err != nil || n != 1 {
		t.Fatalf("AddPermits(-2) = %d, %v; want 1", n, err)
	}
	if n, err := s.Available(ctx); err != nil || n != -2 {
		t.Errorf("Available with 3 held of 1 = %d, %v; want -2", n, err)
	}
	for _, l := range []*dlock.Lock{first, second, third} {
		if err := l.Extend(ctx, time.Second); err != nil {
			t.Errorf("a holder above the shrunk size lost its permit: %v", err)
		}
	}
	first.Release(ctx)
	second.Release(ctx)
	if _, err := s.TryAcquire(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("TryAcquire with 1 held of 1 = %v, want ErrNotAcquired", err)
	}
	third.Release(ctx)
	l, err := s.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("TryAcquire with 0 held of 1: %v", err)
	}
	l.Release(ctx)
	for _, d := range []int{-1, -5} {
		if _, err := s.AddPermits(ctx, d); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("AddPermits(%d) of 1 = %v, want ErrInvalid", d, err)
		}
	}
	if ok, err := s.TrySetPermits(ctx, 0); ok || !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("TrySetPermits(0) = %v, %v; want ErrInvalid", ok, err)
	}
	if n, err := s.Available(ctx); err != nil || n != 1 {
		t.Errorf("after refused changes Available = %d, %v; want 1", n, err)
	}
}

// A Semaphore made with 0 permits is refused until a size is kept, with an
// error that says so rather than that the permits are all held, and then
// has that size: growing it wakes its waiters.
func TestSemaphoreOfTheKeptSizeOnly(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb)
	s, err := c.Semaphore("later", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.TryAcquire(ctx); !errors.Is(err, dlock.ErrInvalid) || !strings.Contains(err.Error(), "no size is kept in Redis") {
		t.Fatalf("TryAcquire before a size is kept = %v, want ErrInvalid saying no size is kept", err)
	}
	if ok, err := s.TrySetPermits(ctx, 1); err != nil || !ok {
		t.Fatalf("TrySetPermits(1) = %v, %v", ok, err)
	}
	first, err := s.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("TryAcquire once a size of 1 is kept: %v", err)
	}
	defer first.Release(ctx)
	got := make(chan error, 1)
	go func() {
		l, err := s.Acquire(ctx, dlock.MaxWait(5*time.Second))
		if err == nil {
			l.Release(ctx)
		}
		got <- err
	}()
	if !queued(ctx, rdb, "later", 1) {
		t.Fatal("the waiter never queued")
	}
	if n, err := s.AddPermits(ctx, 1); err != nil || n != 2 {
		t.Fatalf("AddPermits(1) = %v, %v; want 2", n, err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("the waiter once the size is 2: %v", err)
		}
	case <-time.After(time.Second):
		t.Fatal("growing the size did not wake the waiter")
	}
	if _, err := c.Semaphore("later", -1); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("Semaphore(-1) = %v, want ErrInvalid", err)
	}
}

// A waiter asking more than a size shrunk under it is refused with
// ErrInvalid soon after, and leaves the queue: the waiters behind it are
// not held back.
func TestSemaphoreShrunkBelowAWaiter(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb)
	s, _ := c.Semaphore("shrink", 3)
	if _, err := s.TrySetPermits(ctx, 3); err != nil {
		t.Fatal(err)
	}
	one, err := s.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	big := make(chan error, 1)
	go func() {
		_, err := s.AcquireN(ctx, 3, dlock.MaxWait(10*time.Second))
		big <- err
	}()
	if !queued(ctx, rdb, "shrink", 1) {
		t.Fatal("the waiter for 3 never queued")
	}
	small := make(chan error, 1)
	go func() {
		l, err := s.Acquire(ctx, dlock.MaxWait(10*time.Second))
		if err == nil {
			l.Release(ctx)
		}
		small <- err
	}()
	if !queued(ctx, rdb, "shrink", 2) {
		t.Fatal("the waiter for 1 never queued")
	}
	if _, err := s.AddPermits(ctx, -1); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-big:
		if !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("the waiter for 3 of a size shrunk to 2 = %v, want ErrInvalid", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the waiter for more than the size was not told")
	}
	select {
	case err := <-small:
		if err != nil {
			t.Errorf("the waiter behind it: %v", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the waiter behind a refused one was held back")
	}
	one.Release(ctx)
	if n := rdb.LLen(ctx, "dlock:{shrink}:q").Val(); n != 0 {
		t.Errorf("%d entries left in the queue", n)
	}
}

// Many callers with different N under one kept size never hold more than
// it between them; the size's reads and changes refuse another kind's key.
func TestSemaphoreKeptSizeBoundsEveryone(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.LeaseTTL(2*time.Second))
	base, _ := c.Semaphore("bound", 1)
	if _, err := base.TrySetPermits(ctx, 3); err != nil {
		t.Fatal(err)
	}
	var inside, most atomic.Int32
	var wg sync.WaitGroup
	for g := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, _ := c.Semaphore("bound", 1+g%6) // N from 1 to 6: the kept 3 rules
			for range 5 {
				l, err := s.Acquire(ctx, dlock.MaxWait(10*time.Second))
				if err != nil {
					t.Error(err)
					return
				}
				n := inside.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				time.Sleep(2 * time.Millisecond)
				inside.Add(-1)
				l.Release(ctx)
			}
		}()
	}
	wg.Wait()
	if m := most.Load(); m > 3 {
		t.Errorf("%d permits held at once under a kept size of 3", m)
	}

	lock, err := c.Acquire(ctx, "plain")
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release(ctx)
	rw, _ := c.RWMutex("rw")
	r, err := rw.Reader().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release(ctx)
	for _, name := range []string{"plain", "rw"} {
		s, _ := c.Semaphore(name, 2)
		if _, err := s.TrySetPermits(ctx, 2); !errors.Is(err, dlock.ErrWrongType) {
			t.Errorf("TrySetPermits on %s = %v, want ErrWrongType", name, err)
		}
		if _, err := s.Available(ctx); !errors.Is(err, dlock.ErrWrongType) {
			t.Errorf("Available on %s = %v, want ErrWrongType", name, err)
		}
		if n := rdb.Exists(ctx, "dlock:{"+name+"}:n").Val(); n != 0 {
			t.Errorf("a refused change kept a size for %s", name)
		}
	}
}

// TestSemaphoreSizeChangedWhileAcquiringBoundsHolders: concurrent holders of a semaphore whose kept size is changed
// (between 2 and 3) while they acquire, through handles made with N = 1,
// 5 and 0, never number more than 3 at once; once all released, Available
// is the kept size.
func TestSemaphoreSizeChangedWhileAcquiringBoundsHolders(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	setter := newClient(t, rdb, dlock.LeaseTTL(2*time.Second))
	s0, _ := setter.Semaphore("size", 0)
	if ok, err := s0.TrySetPermits(ctx, 2); !ok || err != nil {
		t.Fatal(ok, err)
	}
	var inside, most atomic.Int32
	var wg sync.WaitGroup
	stop := time.Now().Add(2500 * time.Millisecond)
	for i := range 6 {
		c := newClient(t, rdb, dlock.LeaseTTL(2*time.Second))
		s, err := c.Semaphore("size", []int{1, 5, 0}[i%3])
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			for j := 0; j < 200 && time.Now().Before(stop); j++ {
				actx, cancel := context.WithTimeout(ctx, time.Second)
				l, err := s.Acquire(actx)
				cancel()
				if err != nil {
					continue
				}
				n := inside.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				time.Sleep(time.Millisecond)
				inside.Add(-1)
				if err := l.Release(ctx); err != nil {
					t.Errorf("release: %v", err)
				}
			}
		})
	}
	wg.Go(func() {
		for j := 0; j < 100 && time.Now().Before(stop); j++ {
			if _, err := s0.AddPermits(ctx, 1); err != nil {
				t.Errorf("AddPermits(+1): %v", err)
			}
			time.Sleep(3 * time.Millisecond)
			if _, err := s0.AddPermits(ctx, -1); err != nil {
				t.Errorf("AddPermits(-1): %v", err)
			}
			time.Sleep(3 * time.Millisecond)
		}
	})
	wg.Wait()
	if m := most.Load(); m > 3 {
		t.Errorf("%d permits held at once; the kept size was never above 3", m)
	}
	if a, err := s0.Available(ctx); err != nil || a != 2 {
		t.Errorf("Available after all released = %d, %v; want 2", a, err)
	}
	if _, err := s0.AddPermits(ctx, -2); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("AddPermits(-2) of 2 = %v, want ErrInvalid", err)
	}
	if _, err := s0.AddPermits(ctx, math.MaxInt32); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("AddPermits(MaxInt32) of 2 = %v, want ErrInvalid", err)
	}
	if v := rdb.Get(ctx, "dlock:{size}:n").Val(); v != "2" {
		t.Errorf("the kept size after refused adds is %q, want 2", v)
	}
}

// TestSemaphoreHandleOfAnotherNIsBoundByTheKeptSize: with a kept size of 2, a Semaphore made with N = 5 is bound by 2;
// AcquireN(3) through it is ErrInvalid; a waiter for 2 behind one holder,
// shrunk to 1, is refused with ErrInvalid and leaves the queue.
func TestSemaphoreHandleOfAnotherNIsBoundByTheKeptSize(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.LeaseTTL(3*time.Second))
	s5, _ := c.Semaphore("mm", 5)
	if ok, err := s5.TrySetPermits(ctx, 2); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if ok, err := s5.TrySetPermits(ctx, 4); ok || err != nil {
		t.Errorf("TrySetPermits over a kept size = %v, %v; want false", ok, err)
	}
	a, err := s5.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s5.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s5.TryAcquire(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("a third permit of a kept 2 through N=5 = %v, want ErrNotAcquired", err)
	}
	if _, err := s5.AcquireN(ctx, 3, dlock.MaxWait(100*time.Millisecond)); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("AcquireN(3) of a kept 2 = %v, want ErrInvalid", err)
	}
	b.Release(ctx)
	done := make(chan error, 1)
	go func() {
		l, err := s5.AcquireN(ctx, 2, dlock.MaxWait(3*time.Second))
		if l != nil {
			l.Release(ctx)
		}
		done <- err
	}()
	if !waitFor(2*time.Second, func() bool { return rdb.LLen(ctx, "dlock:{mm}:q").Val() == 1 }) {
		t.Fatal("the waiter for 2 did not queue")
	}
	if n, err := s5.AddPermits(ctx, -1); err != nil || n != 1 {
		t.Fatalf("AddPermits(-1) = %d, %v", n, err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("the waiter for 2 after the shrink to 1 = %v, want ErrInvalid", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("the waiter for 2 was not told of the shrink")
	}
	if n := rdb.LLen(ctx, "dlock:{mm}:q").Val(); n != 0 {
		t.Errorf("%d queue entries left", n)
	}
	a.Release(ctx)
	if av, err := s5.Available(ctx); err != nil || av != 1 {
		t.Errorf("Available = %d, %v; want 1", av, err)
	}
}

// A Semaphore of N = 0 takes the size kept in Redis; with none kept, every
// way to take a permit, and Available, fail at once with ErrInvalid saying
// so, rather than wait for a size that may never come.
func TestSemaphoreOfNoSizeRefusesAtOnce(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	s := newSemaphore(t, newClient(t, rdb), "no-size", 0)
	for what, call := range map[string]func() error{
		"Acquire":    func() error { _, err := s.Acquire(ctx); return err },
		"AcquireN":   func() error { _, err := s.AcquireN(ctx, 2); return err },
		"TryAcquire": func() error { _, err := s.TryAcquire(ctx); return err },
		"Do":         func() error { return s.Do(ctx, func(context.Context, *dlock.Lock) error { return nil }) },
		"Available":  func() error { _, err := s.Available(ctx); return err },
	} {
		if err := call(); !errors.Is(err, dlock.ErrInvalid) || errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s of a Semaphore(name, 0) with no size kept = %v, want ErrInvalid", what, err)
		}
	}
	if n := rdb.Exists(ctx, "dlock:{no-size}:q", "dlock:{no-size}:qw").Val(); n != 0 {
		t.Errorf("%d queue keys left by the refused calls", n)
	}
}

// UnsetPermits deletes the size kept in Redis: each caller's own N counts
// again, and a waiter of a Semaphore of N = 0 is refused with ErrInvalid
// rather than left waiting for a size.
func TestSemaphoreUnsetPermits(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	const name = "unset"
	c := newClient(t, rdb)
	s0 := newSemaphore(t, c, name, 0)
	s5 := newSemaphore(t, c, name, 5)
	if ok, err := s0.UnsetPermits(ctx); err != nil || ok {
		t.Errorf("UnsetPermits with none kept = %v, %v; want false", ok, err)
	}
	if ok, err := s0.TrySetPermits(ctx, 1); err != nil || !ok {
		t.Fatalf("TrySetPermits(1) = %v, %v", ok, err)
	}
	held, err := s0.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		_, err := s0.Acquire(ctx, dlock.MaxWait(time.Minute))
		got <- err
	}()
	if !waitFor(10*time.Second, func() bool { return rdb.LLen(ctx, "dlock:{"+name+"}:q").Val() == 1 }) {
		t.Fatal("the waiter never queued")
	}
	if ok, err := s5.UnsetPermits(ctx); err != nil || !ok {
		t.Fatalf("UnsetPermits with a size kept = %v, %v; want true", ok, err)
	}
	select {
	case err := <-got:
		if !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("a waiter of N = 0 once the kept size is unset = %v, want ErrInvalid", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a waiter of N = 0 still waits 30s after the kept size was unset")
	}
	if n := rdb.Exists(ctx, "dlock:{"+name+"}:n").Val(); n != 0 {
		t.Errorf("the size key is still there after UnsetPermits")
	}
	wantAvailable(t, s5, 4, "of N = 5 with one held, once unset")
	if _, err := s5.AcquireN(ctx, 4, dlock.MaxWait(0)); err != nil {
		t.Errorf("AcquireN(4) of N = 5 with one held, once unset: %v", err)
	}
	held.Release(ctx)
}

// A refusal of a handle made with N = 5, while a size of 2 is kept in Redis
// and 2 permits are held, does not say that all 5 are held: the kept size,
// not the handle's N, bounds the holders.
func TestSemaphoreRefusalUnderAKeptSizeDoesNotCountTheHandlesN(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	s5, err := newClient(t, rdb).Semaphore("kept-refusal", 5)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := s5.TrySetPermits(ctx, 2); !ok || err != nil {
		t.Fatalf("TrySetPermits(2) = %v, %v", ok, err)
	}
	for range 2 {
		if _, err := s5.TryAcquire(ctx); err != nil {
			t.Fatal(err)
		}
	}
	_, err = s5.TryAcquire(ctx)
	if !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("a third permit of a kept 2 = %v, want ErrNotAcquired", err)
	}
	if strings.Contains(err.Error(), "all 5 held") {
		t.Errorf("the refusal says %q: 2 permits are held, of a kept size of 2", err)
	}
}
