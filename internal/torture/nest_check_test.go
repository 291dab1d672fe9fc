package torture

import "testing"

// The deadlock check (m) on hand-made histories: a Do or an acquisition
// that returned ErrDeadlock is reported; one that waited out its context is
// not.
func TestNoDeadlockCheckReportsDeadlocks(t *testing.T) {
	for _, c := range []struct {
		op, res string
		fails   bool
	}{{OpDoRet, "deadlock", true}, {OpAcquire, "deadlock", true}, {OpDoRet, "notacq", false}, {OpDoRet, "ok", false}} {
		r := Check([]Event{{W: "g1", Name: "n1", Op: c.op, Inv: 10, Ret: 20, Res: c.res}}, Params{})
		if got := r.Count("m") > 0; got != c.fails {
			t.Errorf("%s %s: (m) violated %v, want %v: %+v", c.op, c.res, got, c.fails, r.Violations)
		}
	}
}
