package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlockio/dlock"
)

// A waiter holds a and waits for b, whose holder has a record written by
// hand (its wait since, wait ID and renewals given by record from the
// waiter's own, and the count of writes so far), renewed every few ms. The
// walk follows the record as it follows any waiter's: it reports the
// cycle it closes only if the record is well formed, renewed, and of a
// wait that began before the waiter's (ties broken by the greater wait
// ID), and only through a name the waiter itself holds: by the Do it waits
// in, an outer Do, or the Lock whose Context it waits under.
func TestDeadlockWalkReadsHandWrittenRecordsAsWaitersRecords(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	c := newClient(t, rdb, dlock.DeadlockCheck(fastCheck))
	other := newClient(t, rdb)
	renewing := func(since func(own int64) int64, id func(own string) string) func(int64, string, string, int) string {
		return func(ownSince int64, ownID, next string, n int) string {
			return fmt.Sprintf("%d %s %d one %s", since(ownSince), id(ownID), n, next)
		}
	}
	older := func(own int64) int64 { return own - 60_000 }
	same := func(own int64) int64 { return own }
	later := func(own int64) int64 { return own + 60_000 }
	hand := func(string) string { return "handwritten" }
	tests := []struct {
		name     string
		third    bool                                    // the record waits for a name a third holder holds (no record), not for a
		record   func(int64, string, string, int) string // the hand-written record: from the waiter's since and ID, the name it waits for, the writes so far
		reported bool
		hold     string // how the waiter holds a: "" a Do of it, "nested" a Do of another name inside that Do, "context" under an acquired Lock's Context
	}{
		{"renewed, older wait", false, renewing(older, hand), true, ""},
		{"never renewed", false, func(_ int64, _, next string, _ int) string { return "1 handwritten 7 one " + next }, false, ""},
		{"renewed, later wait", false, renewing(later, hand), false, ""},
		{"renewed, same start, greater wait ID", false, renewing(same, func(string) string { return "zzzzzzzzzzzz" }), false, ""},
		{"renewed, same start, smaller wait ID", false, renewing(same, func(string) string { return "-" }), true, ""},
		{"renewed, older wait, for a name held by a holder that waits for nothing", true, renewing(older, hand), false, ""},
		{"renewed, older wait, through an outer Do's hold", false, renewing(older, hand), true, "nested"},
		{"renewed, older wait, through a Lock's Context", false, renewing(older, hand), true, "context"},
		{"garbage", false, func(int64, string, string, int) string { return "not a record" }, false, ""},
		{"renewals not a number", false, func(_ int64, _, next string, _ int) string { return "1 handwritten x one " + next }, false, ""},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a, b, x := "hand-a-"+strconv.Itoa(i), "hand-b-"+strconv.Itoa(i), "hand-x-"+strconv.Itoa(i)
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			lb, err := other.Acquire(ctx, b)
			if err != nil {
				t.Fatal(err)
			}
			defer lb.Release(ctx)
			next := a
			if tt.third {
				lx, err := other.Acquire(ctx, x)
				if err != nil {
					t.Fatal(err)
				}
				defer lx.Release(ctx)
				next = x
			}
			tokens, done := make(chan string, 1), make(chan error, 1)
			wait := func(ctx context.Context) error {
				return c.Do(ctx, b, func(context.Context, *dlock.Lock) error { return nil })
			}
			go func() {
				if tt.hold == "context" {
					la, err := c.Acquire(ctx, a)
					if err != nil {
						done <- err
						return
					}
					tokens <- la.Token()
					err = wait(la.Context())
					done <- errors.Join(err, la.Release(ctx))
					return
				}
				done <- c.Do(ctx, a, func(ctx context.Context, la *dlock.Lock) error {
					tokens <- la.Token()
					if tt.hold == "nested" {
						return c.Do(ctx, x+"-inner", func(ctx context.Context, _ *dlock.Lock) error { return wait(ctx) })
					}
					return wait(ctx)
				})
			}()
			var ta string
			select {
			case ta = <-tokens:
			case err := <-done:
				t.Fatalf("the Do of %s ended before holding it: %v", a, err)
			}
			own := func() (since int64, id string, renewals int) { // the waiter's record, as it wrote it
				v, _ := rdb.Get(ctx, dlock.DefaultPrefix+"waits:"+ta).Result()
				f := strings.Fields(v)
				if len(f) < 3 {
					return 0, "", 0
				}
				since, _ = strconv.ParseInt(f[0], 10, 64)
				renewals, _ = strconv.Atoi(f[2])
				return since, f[1], renewals
			}
			if !waitFor(30*time.Second, func() bool { _, _, n := own(); return n > 0 }) {
				t.Fatal("the waiter wrote no record")
			}
			since, id, _ := own()
			key := dlock.DefaultPrefix + "waits:" + lb.Token()
			defer rdb.Del(context.Background(), key)
			var (
				err2  error
				ended bool
			)
			// Renewed until the wait ends (a deadlock reported) or, where none
			// is to be, the waiter has checked 6 times more.
			for n := 1; !ended && ctx.Err() == nil; n++ {
				if err := rdb.Set(ctx, key, tt.record(since, id, next, n), 5*time.Second).Err(); err != nil {
					t.Fatal(err)
				}
				if _, _, r := own(); !tt.reported && r >= 7 {
					break
				}
				select {
				case err2 = <-done:
					ended = true
				case <-time.After(20 * time.Millisecond):
				}
			}
			if !ended {
				if err := lb.Release(ctx); err != nil {
					t.Fatal(err)
				}
				select {
				case err2 = <-done:
				case <-ctx.Done():
					t.Fatal("the wait did not end once b was released")
				}
			}
			d, isDeadlock := errors.AsType[*dlock.DeadlockError](err2)
			switch {
			case !tt.reported && err2 != nil:
				t.Fatalf("the wait = %v; want it to take %s once released (no deadlock)", err2, b)
			case tt.reported && (!isDeadlock || !errors.Is(err2, dlock.ErrDeadlock)):
				t.Fatalf("the wait = %v; want a deadlock", err2)
			case tt.reported:
				want := []dlock.Wait{{Name: b, Holder: lb.Token()}, {Name: a, Holder: ta}}
				if d.Name != b || fmt.Sprint(d.Cycle) != fmt.Sprint(want) {
					t.Errorf("the deadlock %#v; want of %s, cycle %v", d, b, want)
				}
			}
		})
	}
}

// Three Clients each hold a name and wait for the next one's, in a cycle
// of three: exactly one reports it, naming the three names and holders;
// the others complete, and no record is left.
func TestDeadlockOfThreeClientsInACycleIsReportedOnce(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	c1 := newClient(t, rdb, dlock.DeadlockCheck(fastCheck))
	c2 := newClient(t, rdb, dlock.DeadlockCheck(fastCheck))
	c3 := newClient(t, rdb, dlock.DeadlockCheck(fastCheck))
	errs, held := crossing(t,
		part{first: doOf(c1, "three-1"), then: doOf(c1, "three-2")},
		part{first: doOf(c2, "three-2"), then: doOf(c2, "three-3")},
		part{first: doOf(c3, "three-3"), then: doOf(c3, "three-1")})
	ds := deadlocks(t, errs)
	if len(ds) != 1 || slices.ContainsFunc(errs, func(err error) bool { return err != nil && !errors.Is(err, dlock.ErrDeadlock) }) {
		t.Fatalf("errors %v; want exactly one deadlock and two nils", errs)
	}
	if len(ds[0].Cycle) != 3 {
		t.Errorf("the cycle %v; want three steps", ds[0])
	}
	cycleHas(t, ds[0], []string{"three-1", "three-2", "three-3"}, []string{held[0].Token(), held[1].Token(), held[2].Token()})
	if !waitFor(10*time.Second, func() bool { return len(records(t, rdb, dlock.DefaultPrefix)) == 0 }) {
		t.Errorf("records left in Redis: %v", records(t, rdb, dlock.DefaultPrefix))
	}
}
