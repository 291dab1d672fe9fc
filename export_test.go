package dlock

import (
	"errors"
	"strings"
	"testing"
	"time"
)

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
