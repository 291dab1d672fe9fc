package dlock_test

import (
	"math"
	"testing"
	"time"

	"github.com/dlockio/dlock"
)

// A max hold that ends where a lease of the longest TTL a Duration holds
// would end (its validity: the TTL less its drift margin) is acquired like
// any other: the shortest lease reaching that cap, rounded up to whole
// milliseconds, is within a Duration, not counted up from far below zero.
func TestMaxHoldAtTheValidityOfTheLongestTTLIsAcquired(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	c := newClient(t, rdb)
	const ttl = time.Duration(math.MaxInt64)
	hold := ttl - (ttl/100 + 2*time.Millisecond) // (the default drift margin)
	type result struct {
		l   *dlock.Lock
		err error
	}
	done := make(chan result, 1)
	go func() {
		l, err := c.TryAcquire(t.Context(), "held-for-centuries", dlock.LeaseTTL(ttl), dlock.MaxHold(hold))
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
		t.Fatal("TryAcquire with a max hold at the validity of the longest TTL did not return within 10s")
	}
}
