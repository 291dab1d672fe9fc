package dlock

import (
	"math/rand/v2"
	"time"
)

// Backoff returns how long a waiter sleeps before its next attempt when no
// release message wakes it first. attempt counts from 1. It must be safe for
// concurrent use and should be stateless.
type Backoff func(attempt int) time.Duration

// ExponentialBackoff doubles the wait from minWait at the first attempt up to
// maxWait, and jitters it: each wait is drawn uniformly from [d/2, d], so
// waiters that started together drift apart. It never returns a negative
// duration, nor one above maxWait. A minWait of zero or less is taken as 1ms;
// a maxWait below minWait is raised to minWait.
func ExponentialBackoff(minWait, maxWait time.Duration) Backoff {
	if minWait <= 0 {
		minWait = time.Millisecond
	}
	maxWait = max(maxWait, minWait)
	return func(attempt int) time.Duration {
		d := minWait
		for i := 1; i < attempt && d < maxWait; i++ {
			d *= 2
		}
		d = min(d, maxWait)
		half := d / 2
		return half + rand.N(d-half+1)
	}
}
