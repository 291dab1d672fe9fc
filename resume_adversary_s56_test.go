package dlock_test

import (
	"testing"
	"time"
)

// A resumed Lock whose resume missed node 2 (which still records the
// first Lock's numbered extension, without a resumer id) is held when its
// TTL hears node 2 among the first majority (node 1 answers slowly): the
// TTL reports the lease's time left, and the Lock neither reports nor ends
// itself as lost, then releases. The first Lock's marker does not tell it
// that another Lock resumed the lease, as it tells no script (lib.lua's
// drives).
func TestRedlockResumedTTLWithTheNodeItsResumeMissedIsHeld(t *testing.T) {
	t.Parallel()
	srvs, direct := startQuorum(t, 3)
	ctx := t.Context()
	slow, p1 := proxiedNode(t, srvs[1], 0)
	_, r := resumedMissingNode2(t, srvs, direct, slow, "ttl-laggard")
	p1.Delay(0, 100*time.Millisecond) // (within the node timeout: the TTL's reads of nodes 0 and 2 come first)
	left, err := r.TTL(ctx)
	p1.Delay(0, 0)
	if err != nil || left <= 0 {
		t.Errorf("TTL of the resumed Lock (node 2 missed the resume) = %v, %v; want the time left", left, err)
	}
	if err := r.Err(); err != nil {
		t.Errorf("Err of the resumed Lock after its TTL = %v", err)
	}
	if err := r.Release(ctx); err != nil {
		t.Errorf("Release of the resumed Lock = %v", err)
	}
}
