package backend

import "testing"

// A quorum and a backend without scripts carry plain locks and no other
// kind, each refusing the others with its own reason; a Node carries every
// kind. A kind built on the plain lock's type (the fair lock, the
// campaign) is refused as the others are.
func TestOnlyPlainLocksAreCarriedOverAQuorumAndWithoutScripts(t *testing.T) {
	for _, tc := range []struct {
		what string
		k    Kind
	}{
		{"a plain lock", PlainLock}, {"a fair lock", FairLock}, {"a reentrant lock", ReentrantLock},
		{"a campaign", Campaign}, {"a read", Read}, {"a write", Write}, {"a downgrading hold", Downgrading},
		{"a permit", Permits(3, 1)}, {"a permit of the kept size", Permits(0, 1)},
	} {
		var over, free error
		if tc.k != PlainLock {
			over, free = ErrOverQuorum, ErrNeedsScripts
		}
		if err := (&Quorum{}).Carries(tc.k); err != over {
			t.Errorf("a quorum's Carries(%s) = %v, want %v", tc.what, err, over)
		}
		if err := (NoScripts{}).Carries(tc.k); err != free {
			t.Errorf("Carries(%s) without scripts = %v, want %v", tc.what, err, free)
		}
		if err := (Node{}).Carries(tc.k); err != nil {
			t.Errorf("a Node's Carries(%s) = %v, want nil", tc.what, err)
		}
	}
}
