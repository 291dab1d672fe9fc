package torture

import (
	"errors"
	"fmt"
	"testing"

	"github.com/dlockio/dlock"
)

// A call on a whole multi-lock that fails because a part's Redis client
// was closed is recorded as "closed", as a single Lock's call is: check
// (o) asks that of every call made after the close, and the multi-lock's
// Release returns its parts' errors joined.
func TestSetCallRecordsAClosedClientsErrorAsClosed(t *testing.T) {
	dir := t.TempDir()
	rec, err := NewRecorder(dir+"/g0.jsonl", "g0")
	if err != nil {
		t.Fatal(err)
	}
	w := &Worker{rec: rec}
	hs := []*handle{{l: new(dlock.Lock), id: "g0#1"}, {l: new(dlock.Lock), id: "g0#2"}}
	closed := errors.Join(fmt.Errorf("dlock: release %q: %w", "n0", dlock.ErrClosed), fmt.Errorf("dlock: release %q: %w", "n1", dlock.ErrClosed))
	w.setCall(hs, Event{Op: OpRelease}, func() error { return closed })
	w.setCall(hs, Event{Op: OpRelease}, func() error { return errors.New("a Redis error") })
	rec.Close()
	h, err := LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range h {
		got = append(got, e.Res)
	}
	if want := []string{"closed", "closed", "err", "err"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("the set calls' parts recorded %v, want %v", got, want)
	}
}
