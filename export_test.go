package dlock

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// TimerLag starts a probe that sleeps 5ms at a time; the func it returns
// stops it and tells the longest it overslept: how late this machine ran a
// timer's goroutine meanwhile.
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

// LostToLag reports whether err, a watched lease's, is the loss that a
// machine running timers lag late explains: its validity ran out before an
// extension was answered, while timers ran more than a tenth of its ttl
// late (a watchdog's round, TTL/3 after the last, has about two thirds of
// the TTL to be answered, through several goroutines' wake-ups).
func LostToLag(t *testing.T, err error, lag, ttl time.Duration) bool {
	t.Helper()
	if !errors.Is(err, ErrNotHeld) || !strings.Contains(err.Error(), "the lease's validity ran out before it was extended") || lag <= ttl/10 {
		return false
	}
	t.Logf("a %v lease lost while timers ran up to %v late: %v", ttl, lag, err)
	return true
}
