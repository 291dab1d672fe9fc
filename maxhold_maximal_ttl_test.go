package dlock_test

import (
	"math"
	"testing"
	"time"

	"github.com/dlockio/dlock"
)

// A max hold that ends where a lease of the longest TTL a Duration holds
// would end (its validity: the TTL less its drift margin), or later, with
// the default drift or a fixed one, is acquired like any other: the
// shortest lease reaching that cap is within a Duration, not summed past
// it and counted up from far below zero.
func TestMaxHoldAtTheValidityOfTheLongestTTLIsAcquired(t *testing.T) {
	const ttl = time.Duration(math.MaxInt64)
	for _, tc := range []struct {
		name string
		hold time.Duration
		opts []dlock.Option
	}{
		{"at the validity", ttl - (ttl/100 + 2*time.Millisecond), nil}, // (the default drift margin)
		{"past the validity", ttl - time.Second, nil},
		{"past the validity, a fixed drift", ttl - time.Second, []dlock.Option{dlock.LeaseTTL(ttl), dlock.WithDrift(time.Hour)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, rdb := setup(t)
			c := newClient(t, rdb, tc.opts...)
			type result struct {
				l   *dlock.Lock
				err error
			}
			done := make(chan result, 1)
			go func() {
				l, err := c.TryAcquire(t.Context(), "held-for-centuries", dlock.LeaseTTL(ttl), dlock.MaxHold(tc.hold))
				done <- result{l, err}
			}()
			select {
			case r := <-done:
				if r.err != nil {
					t.Fatal(r.err)
				}
				defer r.l.Release(t.Context())
				if capAt, ok := r.l.Deadline(); !ok || r.l.ValidUntil().After(capAt) {
					t.Errorf("ValidUntil %v, Deadline %v %v; want the validity to end at the cap at the latest", r.l.ValidUntil(), capAt, ok)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("TryAcquire with a max hold of %v under the longest TTL did not return within 10s", tc.hold)
			}
		})
	}
}
