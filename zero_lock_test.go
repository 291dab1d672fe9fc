package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dlockio/dlock"
)

// A zero Lock (never acquired) answers every call at once, without a panic
// or a wait: its calls that return an error say nothing was acquired
// (ErrNotHeld and ErrInvalid), its names are empty, Done and Jeopardy are
// closed, and a call after any other still answers.
func TestZeroLockAnswersEveryCallAsNeverAcquired(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	never := func(err error) string {
		if !errors.Is(err, dlock.ErrNotHeld) || !errors.Is(err, dlock.ErrInvalid) {
			return fmt.Sprintf("%v, want ErrNotHeld and ErrInvalid", err)
		}
		return ""
	}
	closed := func(ch <-chan struct{}) string {
		select {
		case <-ch:
			return ""
		default:
			return "open, want closed"
		}
	}
	empty := func(s string) string {
		if s != "" {
			return fmt.Sprintf("%q, want empty", s)
		}
		return ""
	}
	calls := map[string]func(l *dlock.Lock) string{
		"Name":  func(l *dlock.Lock) string { return empty(l.Name()) },
		"Key":   func(l *dlock.Lock) string { return empty(l.Key()) },
		"Token": func(l *dlock.Lock) string { return empty(l.Token()) },
		"Meta":  func(l *dlock.Lock) string { return empty(l.Meta()) },
		"Deadline": func(l *dlock.Lock) string {
			_, ok := l.Deadline()
			return map[bool]string{true: "a deadline, want none"}[ok]
		},
		"ValidUntil": func(l *dlock.Lock) string {
			return map[bool]string{false: "a validity, want none"}[l.ValidUntil().IsZero()]
		},
		"Fence":    func(l *dlock.Lock) string { _, err := l.Fence(ctx); return never(err) },
		"TTL":      func(l *dlock.Lock) string { _, err := l.TTL(ctx); return never(err) },
		"Extend":   func(l *dlock.Lock) string { return never(l.Extend(ctx, time.Second)) },
		"Err":      func(l *dlock.Lock) string { return never(l.Err()) },
		"Release":  func(l *dlock.Lock) string { return never(l.Release(ctx)) },
		"Done":     func(l *dlock.Lock) string { return closed(l.Done()) },
		"Jeopardy": func(l *dlock.Lock) string { return closed(l.Jeopardy()) },
		"Context":  func(l *dlock.Lock) string { return never(context.Cause(l.Context())) },
		"ReleaseRequests": func(l *dlock.Lock) string {
			select {
			case <-l.ReleaseRequests():
				return "a request, want none"
			default:
				return ""
			}
		},
	}
	for first := range calls {
		l := &dlock.Lock{}
		for _, name := range []string{first, "Err", "Release", first} {
			got := make(chan string, 1)
			go func() {
				defer func() {
					if r := recover(); r != nil {
						got <- fmt.Sprintf("panicked: %v", r)
					}
				}()
				got <- calls[name](l)
			}()
			select {
			case s := <-got:
				if s != "" {
					t.Errorf("%s of a zero Lock (after %s): %s", name, first, s)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("%s of a zero Lock (after %s) did not return within 5s", name, first)
			}
		}
	}
}
