package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockio/dlock"
)

// A Proclaim that finds the term lost (the lease gone from Redis, or its
// validity run out) returns the loss, and tells it once it has unlocked
// the Leadership: a Lost hook that Proclaims, reads Value, or calls the
// leader's Lock (Fence, its term's fence still, Extend, TTL, Release) gets the loss at once
// instead of waiting, without bound, for the Proclaim that found it.
// Done is closed and the loss told once by the time Proclaim returns.
func TestALostHookThatProclaimsGetsTheLossAProclaimFound(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"lease gone", "validity ran out"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			_, rdb := setup(t)
			ctx := t.Context()
			var (
				ld    *dlock.Leadership
				ready = make(chan struct{})
				told  atomic.Int32
				errs  = make(chan map[string]error, 1)
			)
			name := "lost-hook-proclaim-" + map[string]string{"lease gone": "gone", "validity ran out": "lapsed"}[how]
			hook := func(_ context.Context, e *dlock.Event) {
				if e.Name != name || told.Add(1) > 1 {
					return
				}
				<-ready
				got := map[string]error{}
				hctx, cancel := context.WithTimeout(context.Background(), hookWait)
				defer cancel()
				got["Proclaim"] = ld.Proclaim(hctx, "from the hook")
				if v := ld.Value(); v != "v" {
					got["Value"] = errors.New("Value = " + v + ", want the campaign's")
				}
				if f, err := ld.Lock().Fence(hctx); err != nil || f != ld.Fence() {
					got["Fence"] = fmt.Errorf("Fence = %d, %v; want the term's, %d (a fence issued stays the lease's)", f, err, ld.Fence())
				}
				got["Extend"] = ld.Lock().Extend(hctx, 5*time.Second)
				if _, err := ld.Lock().TTL(hctx); errors.Is(err, context.DeadlineExceeded) {
					got["TTL"] = fmt.Errorf("TTL = %v, waited", err)
				}
				got["Release"] = ld.Lock().Release(hctx)
				got["Err"] = ld.Err()
				errs <- got
			}
			ttl := 5 * time.Second
			if how == "validity ran out" {
				ttl = 300 * time.Millisecond
			}
			c := newClient(t, rdb, dlock.WithAutoExtend(false), dlock.LeaseTTL(ttl),
				dlock.WithObserver(dlock.Observer{Lost: hook}))
			e := newElection(t, c, name)
			var err error
			if ld, err = e.Campaign(ctx, "v"); err != nil {
				t.Fatal(err)
			}
			close(ready)
			if how == "lease gone" {
				if err := rdb.Del(ctx, ld.Lock().Key()).Err(); err != nil {
					t.Fatal(err)
				}
			} else {
				time.Sleep(time.Until(ld.ValidUntil()) + 50*time.Millisecond)
			}
			found := make(chan error, 1)
			start := time.Now()
			go func() { found <- ld.Proclaim(ctx, "late") }()
			err = returned(t, found, "Proclaim that found the loss")
			if !errors.Is(err, dlock.ErrNotHeld) {
				t.Errorf("Proclaim once the term was lost = %v, want the loss (ErrNotHeld)", err)
			}
			if took := time.Since(start); took >= hookWait {
				t.Errorf("Proclaim that found the loss returned after %v, held by its Lost hook", took)
			}
			if !closedWithin(ld.Done(), 0) {
				t.Error("Done open once Proclaim returned the loss, want closed")
			}
			select {
			case got := <-errs:
				for _, call := range []string{"Proclaim", "Extend", "Release", "Err"} {
					if err := got[call]; !errors.Is(err, dlock.ErrNotHeld) || errors.Is(err, context.DeadlineExceeded) {
						t.Errorf("in the Lost hook: %s = %v, want the loss (ErrNotHeld), at once", call, err)
					}
				}
				for _, call := range []string{"Value", "Fence", "TTL"} {
					if err := got[call]; err != nil {
						t.Errorf("in the Lost hook: %v", err)
					}
				}
			default:
				t.Error("the Lost hook was not told, or had not returned, by the time Proclaim returned the loss")
			}
			if n := told.Load(); n != 1 {
				t.Errorf("the loss was told %d times, want once", n)
			}
		})
	}
}
