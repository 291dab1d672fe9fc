package torture

import (
	"testing"
	"time"
)

// The Lost hook check (n) on hand-made histories: calls that got the loss
// in time, a Fence that returned the fence issued before, and a Release
// that repeated the worker's own pass; a call that returned long after its
// context ended, or that reported the lost lease held, is reported.
// (A Release waits for one under way: the worker's, or Do's once its fn
// returned, which it then repeats.)
func TestLostCallCheckReportsHangsAndHeldLeases(t *testing.T) {
	ms := int64(time.Millisecond)
	call := func(cs, note, res string, ret, fence int64) Event {
		return Event{W: "g0", Name: "n0", Op: OpLostCall, CS: cs, Note: note, Res: res, Inv: 10 * ms, Ret: ret * ms,
			DL: 500 * ms, Bound: 2000 * ms, Fence: 7, Arg: fence}
	}
	release := Event{W: "g0", Name: "n0", Op: OpRelease, CS: "c", Inv: 5 * ms, Ret: 30 * ms, Res: "notheld"}
	for _, c := range []struct {
		what  string
		h     []Event
		fails bool
	}{
		{"the loss at once", []Event{call("c", "release", "notheld", 20, 0), call("c", "extend", "notheld", 20, 0),
			call("c", "err", "notheld", 20, 0), call("c", "downgrade", "notheld", 20, 0), call("c", "proclaim", "notheld", 20, 0)}, false},
		{"the fence issued before", []Event{call("c", "fence", "ok", 20, 7)}, false},
		{"a repeated Release", []Event{release, call("c", "release", "ok", 40, 0)}, false},
		{"a repeat of Do's release", []Event{{W: "g0", Name: "n0", Op: OpFnRet, CS: "c", Inv: 15 * ms}, call("c", "release", "ok", 40, 0)}, false},
		{"a wait within the bound", []Event{call("c", "fence", "err", 2400, 0)}, false},
		{"a hang", []Event{call("c", "release", "err", 2600, 0)}, true},
		{"a Release as if held", []Event{call("c", "release", "ok", 20, 0)}, true},
		{"a Release before the worker's", []Event{call("c", "release", "ok", 4, 0), release}, true},
		{"an Extend granted", []Event{call("c", "extend", "ok", 20, 0)}, true},
		{"Err nil", []Event{call("c", "err", "ok", 20, 0)}, true},
		{"a Downgrade granted", []Event{call("c", "downgrade", "ok", 20, 0)}, true},
		{"a Proclaim granted", []Event{call("c", "proclaim", "ok", 20, 0)}, true},
		{"a new fence", []Event{call("c", "fence", "ok", 20, 8)}, true},
	} {
		r := Check(c.h, Params{TTL: time.Second})
		if got := r.Count("n") > 0; got != c.fails {
			t.Errorf("%s: (n) violated %v, want %v: %+v", c.what, got, c.fails, r.Violations)
		}
	}
}

// A worker's Release that returned nil after a Lost hook's Release of the
// same lease was called (before it, or inside it) is a repeat: (g) does
// not hold it to the lease, as it holds a first Release.
func TestReleaseAfterALostHooksReleaseIsARepeat(t *testing.T) {
	ms := int64(time.Millisecond)
	h := []Event{
		{W: "g0", Name: "n0", Op: OpAcquire, CS: "c1", Tok: "t1", Fence: 1, Inv: 0, Ret: 1 * ms, Res: "ok"},
		{W: "g1", Name: "n0", Op: OpAcquire, CS: "c2", Tok: "t2", Fence: 2, Inv: 0, Ret: 50 * ms, Res: "ok"},
		{W: "g0", Name: "n0", Op: OpRelease, CS: "c1", Tok: "t1", Fence: 1, Inv: 100 * ms, Ret: 130 * ms, Res: "ok"},
	}
	if r := Check(h, Params{TTL: time.Second}); r.Count("g") != 1 {
		t.Errorf("a first Release nil after a later lease: (g) violations %d, want 1: %+v", r.Count("g"), r.Violations)
	}
	hook := Event{W: "g0", Name: "n0", Op: OpLostCall, CS: "c1", Tok: "t1", Fence: 1, Note: "release",
		Inv: 110 * ms, Ret: 120 * ms, DL: 500 * ms, Bound: 2000 * ms, Res: "notheld"}
	if r := Check(append(h, hook), Params{TTL: time.Second}); len(r.Violations) > 0 {
		t.Errorf("after the Lost hook's Release: %+v, want none", r.Violations)
	}
}

// An Extend that reports the lease lost while it was valid is spurious
// (g), unless a Resume of the same handle failed before it: a resume's
// extension can land although the call fails, and the old Lock is then
// driven out by the resumed one, or its lease undone.
func TestNotHeldAfterAFailedResumeIsNotSpurious(t *testing.T) {
	ms := int64(time.Millisecond)
	extend := Event{W: "g0", Name: "n0", Op: OpExtend, CS: "c1", Tok: "t1", Inv: 100 * ms, Ret: 110 * ms, Res: "notheld",
		Held: true, VU0: 900 * ms}
	h := []Event{{W: "g0", Name: "n0", Op: OpAcquire, CS: "c1", Tok: "t1", Fence: 1, Inv: 0, Ret: 1 * ms, Res: "ok"}, extend}
	if r := Check(h, Params{TTL: time.Second}); r.Count("g") != 1 {
		t.Errorf("ErrNotHeld within the lease: (g) violations %d, want 1: %+v", r.Count("g"), r.Violations)
	}
	resume := Event{W: "g0", Name: "n0", Op: OpResume, CS: "c1", Tok: "t1", Inv: 50 * ms, Ret: 60 * ms, Res: "err",
		Arg: int64(time.Second)}
	if r := Check([]Event{h[0], resume, extend}, Params{TTL: time.Second}); r.Count("g") != 0 {
		t.Errorf("ErrNotHeld after a failed Resume: %+v, want none", r.Violations)
	}
}
