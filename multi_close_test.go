package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/redistest"
)

// A multi acquisition that fails after the Client of a part it took was
// closed still releases that part (a Release after Close is sent): the
// call returns with the part free, not held for nobody until its TTL.
// Over two Clients, the other part's wait runs out; on one Client, Close
// ends the wait.
func TestMultiAcquisitionFailedAfterCloseReleasesThePartsItTook(t *testing.T) {
	t.Parallel()
	for _, two := range []bool{true, false} {
		t.Run(map[bool]string{true: "parts", false: "one Client"}[two], func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			rdbA := redistest.Start(t).Client(t)
			rdbB := rdbA
			if two {
				rdbB = redistest.Start(t).Client(t)
			}
			cA, cB := newClient(t, rdbA), newClient(t, rdbB)
			held, err := newClient(t, rdbB).TryAcquire(ctx, "b")
			if err != nil {
				t.Fatal(err)
			}
			defer held.Release(ctx)
			errc := make(chan error, 1)
			go func() {
				var err error
				if two {
					_, err = dlock.AcquireParts(ctx, []dlock.Part{{Client: cA, Name: "a"}, {Client: cB, Name: "b"}}, dlock.MaxWait(time.Second))
				} else {
					_, err = cA.AcquireAll(ctx, []string{"a", "b"})
				}
				errc <- err
			}()
			if !waitFor(5*time.Second, func() bool { return liveKeys(ctx, rdbA, "dlock:{a}") == 1 }) {
				t.Fatal("part a was never taken")
			}
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			if err := cA.Close(cctx); err != nil {
				t.Fatal(err)
			}
			if err := <-errc; !errors.Is(err, dlock.ErrNotAcquired) && !errors.Is(err, dlock.ErrClosed) {
				t.Fatalf("the acquisition = %v, want it failed", err)
			}
			if n := liveKeys(ctx, rdbA, "dlock:{a}"); n != 0 {
				t.Errorf("the failed acquisition returned with part a still held (PTTL %v)", rdbA.PTTL(ctx, "dlock:{a}").Val())
			}
		})
	}
}
