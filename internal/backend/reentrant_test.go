package backend

import (
	"testing"
	"time"

	"github.com/dlockio/dlock/internal/redistest"
)

// A reentrant lock's holds of one owner are each granted with the fence of
// the owner's first hold, and the lock names the owner as their holder.
func TestReentrantHoldsOfAnOwnerShareTheFirstHoldsFence(t *testing.T) {
	t.Parallel()
	node := NewNode(redistest.Start(t).Client(t), Config{})
	ctx := t.Context()
	k := KeysFor("dlock:", "reentrant-fence")
	outer, inner := &Claim{Keys: k, Kind: ReentrantLock, Holder: "client/a"}, &Claim{Keys: k, Kind: ReentrantLock, Holder: "client/a"}
	outer.SetToken("tok-outer")
	inner.SetToken("tok-inner")
	first, err := node.Acquire(ctx, outer, time.Minute, false)
	if err != nil || !first.Held || first.Fence <= 0 {
		t.Fatalf("Acquire(outer) = %+v, %v; want held with a fence", first, err)
	}
	if g, err := node.Acquire(ctx, inner, time.Minute, false); err != nil || !g.Held || g.Fence != first.Fence {
		t.Errorf("Acquire(inner) = %+v, %v; want held with the outer hold's fence %d", g, err, first.Fence)
	}
	if h := inner.HolderID(); h != "client/a" {
		t.Errorf("inner.HolderID() = %q, want the owner %q", h, "client/a")
	}
}
