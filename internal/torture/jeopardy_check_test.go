package torture

import "testing"

// The jeopardy check (l) on hand-made histories: a jeopardy told with no
// automatic extension in flight or failed, and a loss found with the
// Jeopardy channel open, are reported; a founded jeopardy is not.
func TestJeopardyCheckReportsUnfoundedAndMissed(t *testing.T) {
	for _, c := range []struct {
		res   string
		fails bool
	}{{"founded", false}, {"unfounded", true}, {"missed", true}} {
		r := Check([]Event{{W: "g1", Name: "n0", Op: OpJeopardy, CS: "c", Inv: 10, Res: c.res}}, Params{})
		if got := r.Count("l") > 0; got != c.fails {
			t.Errorf("%s: (l) violated %v, want %v: %+v", c.res, got, c.fails, r.Violations)
		}
	}
}
