package dlock

import (
	"slices"
	"testing"
)

// Every kind registers its mode where it is declared, whatever the order
// the package's files are initialised in: each names the mode it always
// did (Event.Mode, Held), once, and a Client counts every one of them.
func TestEveryKindRegistersTheModeItHadAlways(t *testing.T) {
	c := undialled(t)
	s, err := c.Semaphore("s", 3)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		k    *kind
		want string
	}{
		{&unfairLocks, "unfair"}, {&fairLocks, "fair"}, {&quorumLocks, "quorum"}, {&reentrantLocks, "reentrant"},
		{&campaigns, "election"}, {&readHolds, "read"}, {&writeHolds, "write"}, {&s.k, "semaphore"},
	} {
		if got := tc.k.mode(); got != tc.want {
			t.Errorf("mode of the %q kind = %q", tc.want, got)
		}
	}
	want := []string{"unfair", "fair", "quorum", "reentrant", "election", "read", "write", "semaphore"}
	if got := slices.Sorted(slices.Values(modes)); !slices.Equal(got, slices.Sorted(slices.Values(want))) {
		t.Errorf("modes = %q, want each of %q once", modes, want)
	}
	if len(c.held) != len(modes) {
		t.Errorf("a Client counts %d modes, want %d", len(c.held), len(modes))
	}
}
