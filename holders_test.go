package dlock

import (
	"testing"

	"github.com/dlockio/dlock/internal/backend"
)

// Every kind's leases belong to their tokens, as they always did, but a
// reentrant lock's, which belong to owners: its claims name its Client's
// owner, Lock.Token gives the owner, the deadlock records key the owner's
// hold of the name, its leases are not resumed, and its Client carries no
// other kind; and each of these is refused in the words it always was.
func TestOnlyAReentrantLocksLeasesBelongToOwners(t *testing.T) {
	c, re := undialled(t), undialled(t, WithReentrant(true))
	job, err := re.Owner("job")
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.Semaphore("s", 3)
	if err != nil {
		t.Fatal(err)
	}
	cl := &backend.Claim{Token: "tok", Holder: "own"}
	for _, k := range []*kind{&unfairLocks, &fairLocks, &quorumLocks, &campaigns, &readHolds, &writeHolds, &s.k} {
		h := k.holders
		if h == nil {
			t.Errorf("the %s kind says nothing of whom its leases belong to", k.mode())
			continue
		}
		if got := h.ownerOf(job); got != "" {
			t.Errorf("a %s claim names the owner %q, want none", k.mode(), got)
		}
		if got, rec := h.tokenOf(cl), h.recordOf(cl, "n"); got != "tok" || rec != "tok" {
			t.Errorf("a %s lease's token is %q, its record %q, want its token %q", k.mode(), got, rec, "tok")
		}
		if err := h.resumes(k.acquireOp, "n"); err != nil {
			t.Errorf("a %s lease refuses Resume: %v", k.mode(), err)
		}
		if err := h.carries("Semaphore(\"s\", 2)", words{one: "a semaphore", verb: "keep"}); err != nil {
			t.Errorf("a Client of %s locks refuses other kinds: %v", k.mode(), err)
		}
	}
	h := reentrantLocks.holders
	if got, want := h.ownerOf(job), re.id+"/job"; got != want {
		t.Errorf("an owner's reentrant claim names %q, want %q", got, want)
	}
	if a, b := h.ownerOf(re), h.ownerOf(re); a == b || len(a) <= len(re.id)+1 || a[:len(re.id)+1] != re.id+"/" {
		t.Errorf("a reentrant Client's claims without an owner name %q and %q, want each its own owner of the Client", a, b)
	}
	if got, rec := h.tokenOf(cl), h.recordOf(cl, "n"); got != "own" || rec != ownerHold("own", "n") {
		t.Errorf("a reentrant lease's token is %q, its record %q, want its owner %q and its hold %q", got, rec, "own", ownerHold("own", "n"))
	}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{reentrantLocks.resumes("n", leaseToken("", "")), `dlock: invalid argument: acquire "n": Resume: a reentrant Client's holds belong to its owners, not to a token`},
		{re.carries(&s.k, `Semaphore("s", 3)`, words{one: "a semaphore", verb: "keep"}), `dlock: invalid argument: Semaphore("s", 3): a reentrant Client (WithReentrant) cannot keep a semaphore`},
		{c.carries(&s.k, `Semaphore("s", 3)`, words{one: "a semaphore", verb: "keep"}), ""},
		{func() error { _, err := c.Owner("job"); return err }(), `dlock: invalid argument: Owner("job"): the Client's locks are not reentrant (WithReentrant)`},
		{func() error { _, err := re.Owner(""); return err }(), `dlock: invalid argument: Owner(""): empty owner`},
	} {
		if got := errText(tc.err); got != tc.want {
			t.Errorf("refused with %q, want %q", got, tc.want)
		}
	}
}

// errText is err's text, "" if nil.
func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
