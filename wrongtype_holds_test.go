package dlock_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/dlockio/dlock"
)

// A semaphore's permit, its size and a read-write lock's hold asked for at
// a key of another kind are refused with ErrWrongType, in words that name
// what the key holds (a lock, a reentrant lock, the other kind of sorted
// set, another program's value) and what was asked for, behind one
// "dlock:" prefix.
func TestSemaphoreAndRWMutexRefusalsNameWhatTheKeyHolds(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb)
	held := map[string]func(name string) error{
		"a lock (a string), or another program's value": func(name string) error {
			_, err := c.TryAcquire(ctx, name)
			return err
		},
		"a reentrant lock (a hash), or another program's value": func(name string) error {
			_, err := newClient(t, rdb, dlock.WithReentrant(true)).TryAcquire(ctx, name)
			return err
		},
		"a read-write lock (a sorted set)": func(name string) error {
			rw, err := c.RWMutex(name)
			if err == nil {
				_, err = rw.Reader().TryAcquire(ctx)
			}
			return err
		},
		"a semaphore (a sorted set), or another program's value": func(name string) error {
			_, err := newSemaphore(t, c, name, 2).TryAcquire(ctx)
			return err
		},
		"a set, another program's value": func(name string) error {
			return rdb.SAdd(ctx, semKey(name), "x").Err()
		},
	}
	asked := []struct {
		name, what string
		ask        func(name string) error
	}{
		{"Semaphore.TryAcquire", "a semaphore", func(name string) error {
			_, err := newSemaphore(t, c, name, 2).TryAcquire(ctx)
			return err
		}},
		{"Semaphore.TrySetPermits", "a semaphore", func(name string) error {
			_, err := newSemaphore(t, c, name, 2).TrySetPermits(ctx, 3)
			return err
		}},
		{"RWMutex.Writer().TryAcquire", "a read-write lock", func(name string) error {
			rw, err := c.RWMutex(name)
			if err == nil {
				_, err = rw.Writer().TryAcquire(ctx)
			}
			return err
		}},
	}
	i := 0
	for holds, hold := range held {
		for _, a := range asked {
			if strings.Contains(holds, a.what) {
				continue // (the same kind)
			}
			i++
			name := fmt.Sprintf("words-%d", i)
			if err := hold(name); err != nil {
				t.Fatal(err)
			}
			err := a.ask(name)
			want := "the key holds " + holds + ", not " + a.what
			if !errors.Is(err, dlock.ErrWrongType) || !strings.Contains(err.Error(), want) || prefixes(err.Error()) != 1 {
				t.Errorf("%s at a key that holds %s = %v; want ErrWrongType saying %q, one dlock: prefix", a.name, holds, err, want)
			}
		}
	}
}
