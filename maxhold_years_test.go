package dlock_test

import (
	"math"
	"testing"
	"time"

	"github.com/dlockio/dlock"
)

// A max hold of years under a longer TTL, up to the longest TTL a Duration
// holds with a cap at its validity (the TTL less its drift margin) or
// past it, with the default drift or a fixed one, is a lease like any
// other: the acquisition computes the shortest lease reaching the cap
// within a Duration and returns, its validity ending at the cap. (From a
// cap of about 2.9 years, the lease was computed through an overflow and
// counted up a millisecond at a time from far below zero: the call did not
// return.)
func TestMaxHoldOfYearsUpToTheLongestTTLIsAcquired(t *testing.T) {
	const year, longest = 365 * 24 * time.Hour, time.Duration(math.MaxInt64)
	for _, tc := range []struct {
		name      string
		ttl, hold time.Duration
		opts      []dlock.Option
	}{
		{"5 years under 10", 10 * year, 5 * year, nil},
		{"at the longest TTL's validity", longest, longest - (longest/100 + 2*time.Millisecond), nil}, // (the default drift margin)
		{"past the longest TTL's validity", longest, longest - time.Second, nil},
		{"past the longest TTL's validity, a fixed drift", longest, longest - time.Second, []dlock.Option{dlock.LeaseTTL(longest), dlock.WithDrift(time.Hour)}},
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
				l, err := c.TryAcquire(t.Context(), "held-for-years", dlock.LeaseTTL(tc.ttl), dlock.MaxHold(tc.hold))
				done <- result{l, err}
			}()
			select {
			case r := <-done:
				if r.err != nil {
					t.Fatal(r.err)
				}
				defer r.l.Release(t.Context())
				if capAt, ok := r.l.Deadline(); !ok || r.l.ValidUntil().After(capAt) || tc.hold < longest/2 && !r.l.ValidUntil().Equal(capAt) {
					t.Errorf("ValidUntil %v, Deadline %v %v; want the validity to end at the cap", r.l.ValidUntil(), capAt, ok)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("TryAcquire with a max hold of %v under a TTL of %v did not return within 10s", tc.hold, tc.ttl)
			}
		})
	}
}
