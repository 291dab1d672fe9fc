package dlock_test

import (
	"testing"
	"time"

	"github.com/dlockio/dlock"
)

// A max hold of years under a longer TTL is a lease like any other: the
// acquisition computes its terms and returns, its validity ends at the cap.
// (The shortest lease reaching a cap of more than about 2.9 years was
// computed through an overflow, and then counted up a millisecond at a time
// from far below zero: the call did not return.)
func TestMaxHoldOfYearsUnderALongerTTLIsAcquired(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	c := newClient(t, rdb)
	const year = 365 * 24 * time.Hour
	type result struct {
		l   *dlock.Lock
		err error
	}
	done := make(chan result, 1)
	go func() {
		l, err := c.TryAcquire(t.Context(), "held-for-years", dlock.LeaseTTL(10*year), dlock.MaxHold(5*year))
		done <- result{l, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatal(r.err)
		}
		defer r.l.Release(t.Context())
		if capAt, ok := r.l.Deadline(); !ok || !r.l.ValidUntil().Equal(capAt) {
			t.Errorf("ValidUntil %v, Deadline %v %v; want the validity to end at the cap", r.l.ValidUntil(), capAt, ok)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("TryAcquire with a max hold of 5 years under a 10-year TTL did not return within 10s")
	}
}
