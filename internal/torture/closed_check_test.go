package torture

import (
	"testing"
	"time"
)

// Check (o) on hand-made histories: after a worker's only (or majority's)
// Redis client was closed, a call that fails otherwise than with
// ErrClosed, or late, and a wait that goes on, are reported; a Release the
// Lock answers from what it knows, a quorum's Release that a node
// confirmed, a call whose context had ended, and a call over a quorum with a
// minority closed that fails otherwise, and a call the checker's own
// refuser failed before it reached the client, are not; a call that reports
// ErrClosed with only a minority closed, and a Close that failed after the
// cut, are.
func TestClosedCheckHoldsCallsToErrClosedAtOnce(t *testing.T) {
	base := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	at := func(ms int) int64 { return base + int64(ms)*int64(time.Millisecond) }
	closed := func(all bool, errText string) Event { // g0's client closed from 100ms to 5s
		return Event{W: "g0", Op: OpClosed, Inv: at(100), Ret: at(5000), Held: all, Note: "node0", Arg: 1, Err: errText}
	}
	majority := closed(true, "")
	majority.Note, majority.Arg = "node0,node2", 3
	call := func(op string, inv, ret int, res string) Event {
		return Event{W: "g0", Name: "n0", Op: op, Inv: at(inv), Ret: at(ret), Res: res, Bound: int64(4 * time.Second)}
	}
	heldRelease := call(OpRelease, 200, 201, "notheld")
	heldRelease.Held = true
	released := call(OpRelease, 200, 201, "ok")
	released.Held = true
	ctxEnded := call(OpDoRet, 200, 201, "notheld")
	ctxEnded.Err = `dlock: acquire "n1": not acquired: context canceled: dlock: not held: "n0"`
	refused := call(OpTry, 200, 201, "err")
	refused.Err = `dlock: acquire "n0": not sent: torture: evalsha hold_acquire refused`
	for _, c := range []struct {
		name string
		h    []Event
		fail bool
	}{
		{"failed with ErrClosed", []Event{closed(true, ""), call(OpAcquire, 200, 201, "closed"), call(OpInspect, 300, 301, "closed")}, false},
		{"another sentinel", []Event{closed(true, ""), call(OpTry, 200, 201, "notacq")}, true},
		{"a held lease's Release not failing with ErrClosed", []Event{closed(true, ""), heldRelease}, true},
		{"a lost lease's Release", []Event{closed(true, ""), call(OpRelease, 200, 201, "released")}, false},
		{"a held lease's Release returning nil", []Event{closed(true, ""), released}, true},
		{"a quorum's Release returning nil", []Event{majority, released}, false},
		{"a quorum's acquisition not failing with ErrClosed", []Event{majority, call(OpAcquire, 200, 201, "notacq")}, true},
		{"its context ended", []Event{closed(true, ""), ctxEnded}, false},
		{"refused by the checker before its client", []Event{closed(true, ""), refused}, false},
		{"late", []Event{closed(true, ""), call(OpAcquire, 200, 2500, "closed")}, true},
		{"a wait going on", []Event{call(OpAcquire, 50, 6000, "closed"), closed(true, "")}, true},
		{"a wait ending", []Event{call(OpAcquire, 50, 1000, "closed"), closed(true, "")}, false},
		{"another worker's call", []Event{closed(true, ""), {W: "g1", Op: OpTry, Inv: at(200), Ret: at(201), Res: "notacq"}}, false},
		{"a minority closed", []Event{closed(false, ""), call(OpTry, 200, 201, "notacq")}, false},
		{"ErrClosed with a minority closed", []Event{closed(false, ""), call(OpTry, 200, 201, "closed")}, true},
		{"ErrClosed under way as a minority closed", []Event{call(OpAcquire, 50, 201, "closed"), closed(false, "")}, false},
		{"Close failed", []Event{closed(false, "Client.Close: context deadline exceeded")}, true},
	} {
		r := Check(c.h, Params{TTL: time.Second})
		if got := r.Count("o") > 0; got != c.fail {
			t.Errorf("%s: (o) violated %v, want %v: %+v", c.name, got, c.fail, r.Violations)
		}
	}
}
