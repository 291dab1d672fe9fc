package backend

import (
	"testing"
	"time"

	"github.com/dlockio/dlock/internal/redistest"
)

// A string at the lock key holds one lease, its holder's, for the key's
// TTL; another program's empty string holds none. Every backend reads it
// so, and its Leases are what Inspect and a Lock's TTL read.
func TestAStringHoldsItsHoldersLeaseOnly(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	ctx := t.Context()
	n := NewNode(rdb, Config{})
	backends := map[string]Backend{"node": n, "no scripts": NoScripts{n}, "quorum": NewQuorum([]Node{n}, time.Second)}
	for name, b := range backends {
		for _, value := range []string{"tok", ""} {
			k := KeysFor("dlock:", name+"-"+value)
			if err := rdb.Set(ctx, k.Lock, value, 5*time.Second).Err(); err != nil {
				t.Fatal(err)
			}
			st, err := b.Inspect(ctx, &k)
			hs := st.Leases()
			switch {
			case err != nil || !st.Held || st.Type != "string" || st.Token != value:
				t.Errorf("%s: Inspect(a string %q) = %+v, %v; want held, its token", name, value, st, err)
			case value == "" && len(hs) != 0:
				t.Errorf("%s: Leases of an empty string = %+v, want none", name, hs)
			case value != "" && (len(hs) != 1 || hs[0].Token != value || hs[0].Left <= 0 || hs[0].Left > 5*time.Second):
				t.Errorf("%s: Leases of a string %q = %+v, want its one lease, the key's TTL", name, value, hs)
			}
		}
	}
}

// Reading a plain lock's state and its Leases (Inspect's, a Lock's TTL)
// costs two allocations, the state (its shape's read takes it by pointer)
// and the lease: Leases makes no copy of a plain lock's one lease.
//
// Serial: it counts the process's allocations.
func TestAPlainLocksStateAndLeasesCostTwoAllocations(t *testing.T) {
	k := KeysFor("dlock:", "allocs")
	var (
		hs       []Hold
		contents any = "tok" // (as inspect.lua's reply carries it)
	)
	n := testing.AllocsPerRun(100, func() {
		hs = stateOf(&k, "string", "tok", contents, 5000, 7, 1000, 0, "").Leases()
	})
	if n > 2 || len(hs) != 1 || hs[0].Token != "tok" || hs[0].Left != 5*time.Second {
		t.Errorf("stateOf(a string).Leases() = %+v with %v allocations, want its one lease with at most 2", hs, n)
	}
}
