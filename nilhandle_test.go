package dlock_test

import (
	"errors"
	"testing"

	"github.com/dlockio/dlock"
)

// A handle that was never acquired (nil: its acquisition failed, and a
// deferred Release ran before the error was checked) holds nothing: its
// Release and Err report ErrNotHeld, and ErrInvalid, rather than panic.
func TestNilHandlesReleaseReportsNotHeld(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	var l *dlock.Lock
	var m *dlock.MultiLock
	var ld *dlock.Leadership
	for name, call := range map[string]func() error{
		"Lock.Release":      func() error { return l.Release(ctx) },
		"Lock.Err":          l.Err,
		"MultiLock.Release": func() error { return m.Release(ctx) },
		"Leadership.Resign": func() error { return ld.Resign(ctx) },
	} {
		if err := call(); !errors.Is(err, dlock.ErrNotHeld) || !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("%s of nil = %v, want ErrNotHeld and ErrInvalid", name, err)
		}
	}
}
