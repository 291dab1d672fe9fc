package dlock_test

// Adversarial tests: attacks on the lock's seams by delayed, re-sent and
// cancelled requests, error replies, and concurrency. Each comment says
// how the attack goes and, for those that broke the lock before it was
// fixed, what happened and what the fix is.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/leakcheck"
)

// The batcher under heavy cancellation.
// 48 goroutines, each on its own free name, TryAcquire with random 0-4ms
// deadlines through a proxy that delays replies 1-3ms (so calls are
// abandoned queued and in flight), under -race. Every success must own the
// key; every failure must be ctx-caused and match ErrNotAcquired+ctx.Err;
// nothing may be left behind once the background undos are done.
func TestBatcherUnderACancellationStorm(t *testing.T) {
	if testing.Short() {
		t.Skip("a long fault/timing scenario; run without -short")
	}
	leakcheck.Check(t)
	p, rdb, direct := proxied(t, -1, 5*time.Second)
	for _, m := range modes(t, rdb, false) {
		t.Run(m.name, func(t *testing.T) {
			c := m.new(t, dlock.LeaseTTL(5*time.Second))
			p.Delay(0, 2*time.Millisecond)
			defer p.Delay(0, 0)
			var wg sync.WaitGroup
			var bad atomic.Int32
			var got atomic.Int32
			deadline := time.Now().Add(8 * time.Second)
			for g := range 48 {
				wg.Go(func() {
					name := fmt.Sprintf("storm-%s-%d", m.name, g)
					rnd := rand.New(rand.NewPCG(uint64(g), 7))
					for i := 0; i < 60 && time.Now().Before(deadline); i++ {
						ctx, cancel := context.WithTimeout(m.ctx(t.Context()), time.Duration(rnd.IntN(4000))*time.Microsecond)
						l, err := c.TryAcquire(ctx, name)
						ctxErr := ctx.Err()
						cancel()
						if err != nil {
							if ctxErr == nil || !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, ctxErr) {
								if bad.Add(1) < 5 {
									t.Errorf("%s: TryAcquire on a free name = %v (ctx err %v)", name, err, ctxErr)
								}
							}
							continue
						}
						got.Add(1)
						key := "dlock:{" + name + "}"
						owned := false
						if m.name == "reentrant" { // Token() is the owner id
							owned = direct.HGet(t.Context(), key, "owner").Val() == l.Token()
						} else {
							owned = holderOf(direct.Get(t.Context(), key).Val()) == l.Token()
						}
						if _, err := l.TTL(t.Context()); err != nil {
							owned = false
						}
						if !owned && bad.Add(1) < 5 {
							t.Errorf("%s: TryAcquire succeeded but the key does not hold it: %v / %v", name,
								direct.HGetAll(t.Context(), key).Val(), direct.Get(t.Context(), key).Val())
						}
						if err := l.Release(context.Background()); err != nil && bad.Add(1) < 5 {
							t.Errorf("%s: Release = %v", name, err)
						}
					}
				})
			}
			wg.Wait()
			t.Logf("%d acquisitions succeeded", got.Load())
			time.Sleep(2500 * time.Millisecond) // background undos (bounded by 2s)
			var left []string
			iter := direct.Scan(t.Context(), 0, "dlock:{storm-"+m.name+"-*}", 1000).Iterator()
			for iter.Next(t.Context()) {
				if liveKeys(t.Context(), direct, iter.Val()) == 1 {
					left = append(left, iter.Val())
				}
			}
			if len(left) > 0 {
				t.Errorf("lock keys left behind after the storm: %v", left)
			}
			for g := range 48 {
				if n := direct.LLen(t.Context(), fmt.Sprintf("dlock:{storm-%s-%d}:q", m.name, g)).Val(); n != 0 {
					t.Errorf("queue entries left behind for storm-%s-%d", m.name, g)
				}
			}
		})
	}
}

// Every Lock method from many goroutines at
// once, with a fast watchdog, shorter and longer Extends, Release in the
// middle, under -race; in every mode (quorum included).
func TestLockMethodsConcurrently(t *testing.T) {
	_, rdb := setup(t)
	for _, m := range modes(t, rdb, true) {
		t.Run(m.name, func(t *testing.T) {
			c := m.new(t, dlock.LeaseTTL(150*time.Millisecond)) // watchdog every 50ms
			ctx := m.ctx(t.Context())
			for round := range 5 {
				l, err := c.Acquire(ctx, fmt.Sprintf("conc-%s-%d", m.name, round))
				if err != nil {
					t.Fatal(err)
				}
				var wg sync.WaitGroup
				stop := time.Now().Add(300 * time.Millisecond)
				for g := range 6 {
					wg.Go(func() {
						for i := 0; i < 200 && time.Now().Before(stop); i++ {
							switch (g + i) % 7 {
							case 0:
								l.Extend(ctx, time.Duration(60+20*(i%5))*time.Millisecond)
							case 1:
								l.Err()
							case 2:
								l.ValidUntil()
							case 3:
								<-closedOrNot(l.Done())
							case 4:
								l.TTL(ctx)
							case 5:
								_ = l.Token() + l.Key() + l.Name()
							case 6:
								if g == 0 && i > 30 {
									l.Release(ctx)
								}
							}
						}
					})
				}
				wg.Wait()
				if err := l.Release(ctx); err != nil && !errors.Is(err, dlock.ErrNotHeld) {
					t.Errorf("Release = %v", err)
				}
				if err := l.Err(); err == nil {
					t.Errorf("Err() nil after Release")
				}
			}
		})
	}
}

func closedOrNot(ch <-chan struct{}) <-chan struct{} {
	out := make(chan struct{})
	close(out)
	select {
	case <-ch:
	default:
	}
	return out
}
