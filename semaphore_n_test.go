package dlock_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
)

// Several permits at once (Semaphore.AcquireN): one Lock for n permits,
// counted as n by everyone, released, extended and fenced as one.
func TestSemaphoreAcquireN(t *testing.T) {
	_, rdb := setup(t)
	ctx := t.Context()
	const name = "sem-n"
	c := newClient(t, rdb)
	s := newSemaphore(t, c, name, 5)

	three, err := s.AcquireN(ctx, 3, dlock.MaxWait(time.Nanosecond))
	if err != nil {
		t.Fatal(err)
	}
	if n := rdb.ZCard(ctx, semKey(name)).Val(); n != 3 {
		t.Fatalf("members after AcquireN(3) = %d, want 3", n)
	}
	if _, err := s.AcquireN(ctx, 3, dlock.MaxWait(50*time.Millisecond)); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("AcquireN(3) with 3 of 5 held = %v, want ErrNotAcquired", err)
	}
	one, err := s.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("a single permit with 3 of 5 held: %v", err)
	}
	hs, err := s.Holders(ctx)
	if err != nil || len(hs) != 2 {
		t.Fatalf("Holders = %v, %v; want two holds", hs, err)
	}
	for _, h := range hs {
		if want := map[string]int{three.Token(): 3, one.Token(): 1}[h.Token]; h.Count != want {
			t.Errorf("Holders: %s counts %d, want %d", h.Token, h.Count, want)
		}
	}
	if f, err := three.Fence(ctx); err != nil || f <= 0 {
		t.Errorf("Fence of a hold of 3 = %d, %v", f, err)
	}
	if err := three.Extend(ctx, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{three.Token(), three.Token() + " 2", three.Token() + " 3"} {
		if left := rdb.ZScore(ctx, semKey(name), m).Val() - float64(time.Now().UnixMilli()); left < 15000 {
			t.Errorf("member %q has %.0fms left after Extend(20s)", m, left)
		}
	}
	if err := three.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n := rdb.ZCard(ctx, semKey(name)).Val(); n != 1 {
		t.Fatalf("members after releasing the 3 = %d, want 1", n)
	}
	four, err := s.AcquireN(ctx, 4, dlock.MaxWait(time.Nanosecond))
	if err != nil {
		t.Fatalf("AcquireN(4) with 1 of 5 held: %v", err)
	}
	if ok, err := c.ForceRelease(ctx, name); !ok || err != nil {
		t.Fatalf("ForceRelease over a hold of 4 = %v, %v", ok, err)
	}
	four.Release(ctx)
	one.Release(ctx)

	for _, n := range []int{0, -1, 6} {
		if _, err := s.AcquireN(ctx, n); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("AcquireN(%d) of 5 = %v, want ErrInvalid", n, err)
		}
	}
}

// Callers wanting several permits never deadlock and never hold more than N
// between them (two callers taking 3 of 10 one by one can); a caller
// wanting all N is not starved by a stream of single permits.
func TestSemaphoreAcquireNConcurrent(t *testing.T) {
	_, rdb := setup(t)
	ctx := t.Context()
	const name, permits = "sem-n-many", 10
	var held, most atomic.Int32
	take := func(c *dlock.Client, n int) error {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		l, err := newSemaphore(t, c, name, permits).AcquireN(wctx, n)
		if err != nil {
			return err
		}
		now := held.Add(int32(n))
		for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
		}
		time.Sleep(2 * time.Millisecond)
		held.Add(-int32(n))
		return l.Release(ctx)
	}
	var wg sync.WaitGroup
	deadline := time.Now().Add(4 * time.Second)
	for g := range 8 {
		c := newClient(t, redis.NewClient(rdb.Options()))
		wg.Go(func() {
			for i := 0; i < 15 && time.Now().Before(deadline); i++ {
				if err := take(c, 1+(g+i)%4); err != nil {
					t.Errorf("AcquireN: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	if most.Load() > permits {
		t.Errorf("%d permits held at once, N is %d", most.Load(), permits)
	}

	// All ten, against a stream of singles.
	stop := make(chan struct{})
	var singles sync.WaitGroup
	for range 4 {
		c := newClient(t, redis.NewClient(rdb.Options()))
		singles.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := take(c, 1); err != nil && ctx.Err() == nil {
					t.Errorf("a single permit: %v", err)
					return
				}
			}
		})
	}
	time.Sleep(50 * time.Millisecond)
	all := make(chan error, 1)
	go func() { all <- take(newClient(t, rdb), permits) }()
	select {
	case err := <-all:
		if err != nil {
			t.Errorf("AcquireN(all) among singles: %v", err)
		}
	case <-time.After(8 * time.Second):
		t.Error("AcquireN(all) starved by a stream of single permits for 8s")
	}
	close(stop)
	singles.Wait()
	if most.Load() > permits {
		t.Errorf("%d permits held at once, N is %d", most.Load(), permits)
	}
}
