package dlock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockio/dlock"
)

// hookedCalls are the calls of its Lock a Lost hook makes below, each
// under a context of its own that ends after hookWait: every one that
// sends the Lock's claim, and so takes a turn of it.
var hookedCalls = []string{"Fence", "Extend", "Downgrade", "Release"}

// hookWait bounds each call a Lost hook makes: one that waits for a turn
// its caller holds ends with its context, past which a test gives up.
const hookWait = 3 * time.Second

// lossHook is a write hold's Lost hook that calls the Lock it is told of
// (Fence, Extend, Downgrade and Release, in that order) and records each
// call's error; told counts the losses told.
type lossHook struct {
	rw    *dlock.RWMutex
	w     *dlock.Lock
	ready chan struct{} // closed once w is set
	told  atomic.Int32
	errs  chan map[string]error // the calls' errors, once all returned
}

func newLossHook(rw *dlock.RWMutex) *lossHook {
	return &lossHook{rw: rw, ready: make(chan struct{}), errs: make(chan map[string]error, 1)}
}

func (h *lossHook) lost(_ context.Context, e *dlock.Event) {
	if e.Name != h.rw.Name() || h.told.Add(1) > 1 {
		return
	}
	<-h.ready
	errs := map[string]error{}
	for _, call := range hookedCalls {
		ctx, cancel := context.WithTimeout(context.Background(), hookWait)
		switch call {
		case "Fence":
			_, errs[call] = h.w.Fence(ctx)
		case "Extend":
			errs[call] = h.w.Extend(ctx, 5*time.Second)
		case "Downgrade":
			errs[call] = h.rw.Downgrade(ctx, h.w)
		case "Release":
			errs[call] = h.w.Release(ctx)
		}
		cancel()
	}
	h.errs <- errs
}

// check reports a call of the hook that did not get the loss: one that
// waited for its turn until its context ended above all.
func (h *lossHook) check(t *testing.T, errs map[string]error) {
	t.Helper()
	for _, call := range hookedCalls {
		if err := errs[call]; !errors.Is(err, dlock.ErrNotHeld) || errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("in the Lost hook: %s = %v, want the loss (ErrNotHeld), at once", call, err)
		}
	}
}

// A Lost hook may call the Lock it is told of (Fence, Extend, Downgrade,
// Release: each call that takes a turn) when the loss was found by a call
// that holds a turn of it (a Downgrade holds all three, a Fence its own,
// an extension, Extend's or the watchdog's, its own): the loss is told
// once that call has given its turns back, so the hook's calls get the
// loss at once instead of waiting for a turn their own caller holds, and
// the call that found the loss returns it, with the loss told once and
// Done closed by then.
func TestALostHookThatCallsItsLockDoesNotWaitForTheCallThatFoundTheLoss(t *testing.T) {
	t.Parallel()
	for _, finder := range []string{"Downgrade", "Fence", "Extend", "watchdog"} {
		t.Run(finder, func(t *testing.T) {
			t.Parallel()
			_, rdb := setup(t)
			ctx := t.Context()
			name := "lost-hook-" + finder
			var h *lossHook
			opts := []dlock.Option{dlock.WithAutoExtend(finder == "watchdog"),
				dlock.WithObserver(dlock.Observer{Lost: func(ctx context.Context, e *dlock.Event) { h.lost(ctx, e) }})}
			if finder == "watchdog" {
				opts = append(opts, dlock.LeaseTTL(3*time.Second)) // the watchdog's extension (after 1s) finds the loss, long before the validity ends
			}
			c := newClient(t, rdb, opts...)
			rw := newRW(t, c, name)
			h = newLossHook(rw)
			w, err := rw.Writer().TryAcquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			h.w = w
			close(h.ready)
			if err := rdb.Del(ctx, w.Key(), semKey(name)).Err(); err != nil { // the lease is gone
				t.Fatal(err)
			}
			if finder == "watchdog" {
				select {
				case errs := <-h.errs:
					h.check(t, errs)
				case <-time.After(10*time.Second + time.Duration(len(hookedCalls))*hookWait):
					t.Fatal("the watchdog's extension did not tell the loss, or the Lost hook's calls did not return")
				}
				if !closedWithin(w.Done(), 0) || !errors.Is(w.Err(), dlock.ErrNotHeld) {
					t.Errorf("after the Lost hook: Done closed %v, Err() = %v; want closed, the loss", closedWithin(w.Done(), 0), w.Err())
				}
			} else {
				found := make(chan error, 1)
				go func() {
					switch finder {
					case "Downgrade":
						found <- rw.Downgrade(ctx, w)
					case "Fence":
						_, err := w.Fence(ctx)
						found <- err
					default:
						found <- w.Extend(ctx, 5*time.Second)
					}
				}()
				start := time.Now()
				err := returned(t, found, finder+" that found the loss")
				if !errors.Is(err, dlock.ErrNotHeld) {
					t.Errorf("%s once the lease was gone = %v, want the loss (ErrNotHeld)", finder, err)
				}
				if took := time.Since(start); took >= hookWait {
					t.Errorf("%s that found the loss returned after %v, held by its Lost hook", finder, took)
				}
				if !closedWithin(w.Done(), 0) {
					t.Errorf("Done open once %s returned the loss, want closed", finder)
				}
				select {
				case errs := <-h.errs:
					h.check(t, errs)
				default:
					t.Errorf("the Lost hook was not told, or had not returned, by the time %s returned the loss", finder)
				}
			}
			if n := h.told.Load(); n != 1 {
				t.Errorf("the loss was told %d times, want once", n)
			}
		})
	}
}

// A Release that finds the lease gone from Redis returns the loss, and a
// Lost hook, told of no loss (the Lock was released as Release began),
// is not called: nothing waits for Release's turn.
func TestAReleaseThatFindsTheLeaseGoneDoesNotWaitForALostHook(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	name := "lost-hook-Release"
	var h *lossHook
	c := newClient(t, rdb, dlock.WithAutoExtend(false),
		dlock.WithObserver(dlock.Observer{Lost: func(ctx context.Context, e *dlock.Event) { h.lost(ctx, e) }}))
	rw := newRW(t, c, name)
	h = newLossHook(rw)
	w, err := rw.Writer().TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h.w = w
	close(h.ready)
	if err := rdb.Del(ctx, w.Key(), semKey(name)).Err(); err != nil {
		t.Fatal(err)
	}
	found := make(chan error, 1)
	go func() { found <- w.Release(ctx) }()
	if err := returned(t, found, "Release that found the lease gone"); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Release once the lease was gone = %v, want ErrNotHeld", err)
	}
	if !closedWithin(w.Done(), 0) {
		t.Error("Done open once Release returned, want closed")
	}
	if n := h.told.Load(); n != 0 {
		t.Errorf("a loss was told %d times, want none (the Lock was released)", n)
	}
	if err := w.Release(ctx); err != nil {
		t.Errorf("Release again = %v, want nil (a repeat)", err)
	}
}
