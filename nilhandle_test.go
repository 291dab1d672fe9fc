package dlock_test

import (
	"errors"
	"testing"

	"github.com/dlockio/dlock"
)

// A handle that was never acquired (nil: its acquisition failed, and a
// deferred Release ran before the error was checked; or a zero value)
// holds nothing: its Release and Err report ErrNotHeld, and ErrInvalid,
// rather than panic.
func TestNilHandlesReleaseReportsNotHeld(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	var l *dlock.Lock
	var m *dlock.MultiLock
	var ld *dlock.Leadership
	for name, call := range map[string]func() error{
		"Lock.Release":              func() error { return l.Release(ctx) },
		"Lock.Err":                  l.Err,
		"MultiLock.Release":         func() error { return m.Release(ctx) },
		"Leadership.Resign":         func() error { return ld.Resign(ctx) },
		"MultiLock.Err":             m.Err,
		"Leadership.Err":            ld.Err,
		"Leadership.Lock().Release": func() error { return ld.Lock().Release(ctx) },
		"zero Lock.Release":         func() error { return new(dlock.Lock).Release(ctx) },
		"zero Lock.Err":             new(dlock.Lock).Err,
		"zero MultiLock.Release":    func() error { return new(dlock.MultiLock).Release(ctx) },
		"zero MultiLock.Err":        new(dlock.MultiLock).Err,
		"zero Leadership.Resign":    func() error { return new(dlock.Leadership).Resign(ctx) },
		"zero Leadership.Err":       new(dlock.Leadership).Err,
	} {
		if err := call(); !errors.Is(err, dlock.ErrNotHeld) || !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("%s of nil = %v, want ErrNotHeld and ErrInvalid", name, err)
		}
	}
}

// A nil Client (New failed, and a deferred Close ran before its error was
// checked), or a zero one, closes nothing: its Close reports ErrInvalid, as a nil
// *os.File's does, rather than panic.
func TestNilClientsCloseReportsInvalid(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]*dlock.Client{"nil": nil, "zero": new(dlock.Client)} {
		if err := c.Close(t.Context()); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("Close of a %s Client = %v, want ErrInvalid", name, err)
		}
	}
}
