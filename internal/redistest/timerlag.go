package redistest

import (
	"sync"
	"time"
)

// TimerLag starts a probe that sleeps 5ms at a time; the func it returns
// stops it and tells the longest it overslept: how late this machine ran a
// timer's goroutine meanwhile. A test of a lease's timing excuses what
// that lag explains.
func TimerLag() func() time.Duration {
	stop, worst := make(chan struct{}), make(chan time.Duration, 1)
	go func() {
		var lag time.Duration
		for {
			at := time.Now()
			select {
			case <-stop:
				worst <- lag
				return
			case <-time.After(5 * time.Millisecond):
				lag = max(lag, time.Since(at)-5*time.Millisecond)
			}
		}
	}()
	return sync.OnceValue(func() time.Duration { close(stop); return <-worst })
}
