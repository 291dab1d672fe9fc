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

// A resumed unfair lock (release.lua, where a fair lock's release is
// release_fair.lua) whose resume missed node 2 (which records the first
// Lock's numbered extension, no resumer id) is released on node 2 too:
// with node 0 down, another Client takes the lock at once.
func TestRedlockResumedUnfairReleaseFreesTheNodeItsResumeMissed(t *testing.T) {
	t.Parallel()
	srvs, direct := startQuorum(t, 3)
	ctx := t.Context()
	_, r := resumedMissingNode2(t, srvs, direct, direct[1], "unfair-left", waiting(false))
	if err := r.Release(ctx); err != nil {
		t.Fatalf("Release of the resumed Lock = %v", err)
	}
	srvs[0].Kill()
	if err := takenWithin(t, direct, "unfair-left", 0); err != nil {
		t.Errorf("TryAcquire after the release, node 0 down = %v; node 2 still holds the released lease's token for %v", err, direct[2].PTTL(ctx, r.Key()).Val())
	}
}
