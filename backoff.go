package dlock

import (
	"math/rand/v2"
	"time"
)

// Backoff returns how long an unfair waiter sleeps before attempt (from 1),
// unless a release wakes it (≤ 0: DefaultMinBackoff); safe for concurrent use.
type Backoff func(attempt int) time.Duration

// ExponentialBackoff doubles the wait from minWait (≥ 1ms) up to maxWait (≥
// minWait), each drawn uniformly from [d/2, d] so that waiters drift apart.
func ExponentialBackoff(minWait, maxWait time.Duration) Backoff {
	if minWait <= 0 {
		minWait = time.Millisecond
	}
	maxWait = max(maxWait, minWait)
	return func(attempt int) time.Duration {
		// minWait doubled attempt-1 times, if that does not pass maxWait
		// (compared by shifting maxWait down, which cannot overflow).
		d, n := maxWait, max(attempt-1, 0)
		if minWait <= maxWait>>n {
			d = minWait << n
		}
		half := d / 2
		return half + rand.N(d-half+1)
	}
}
