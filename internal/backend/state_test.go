package backend

import (
	"errors"
	"strings"
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
	backends := map[string]Backend{"node": n, "no scripts": NoScripts{n}, "quorum": NewQuorum([]Node{n}, time.Second, new(Tracker))}
	for name, b := range backends {
		for _, value := range []string{"tok", ""} {
			k := KeysFor("dlock:", name+"-"+value)
			if err := rdb.Set(ctx, k.Lock, value, 5*time.Second).Err(); err != nil {
				t.Fatal(err)
			}
			st, err := b.Inspect(ctx, &k)
			hs := st.Leases
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
// and the lease.
//
// Serial: it counts the process's allocations.
func TestAPlainLocksStateAndLeasesCostTwoAllocations(t *testing.T) {
	k := KeysFor("dlock:", "allocs")
	var (
		hs       []Hold
		contents any = "tok" // (as inspect.lua's reply carries it)
	)
	n := testing.AllocsPerRun(100, func() {
		hs = stateOf(&k, "string", "tok", contents, 5000, 7, 1000, 0, "").Leases
	})
	if n > 2 || len(hs) != 1 || hs[0].Token != "tok" || hs[0].Left != 5*time.Second {
		t.Errorf("stateOf(a string).Leases = %+v with %v allocations, want its one lease with at most 2", hs, n)
	}
}

// A reentrant lock's hash that names no owner (its owner field gone, its
// holds and fence still there) holds no lease any backend can name: with
// scripts or without, Inspect reads it held as a hash with no owner and no
// holding, and Force deletes nothing and says the key holds a hash.
func TestAReentrantHashWithNoOwnerHoldsNothingToForce(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	ctx := t.Context()
	n := NewNode(rdb, Config{})
	for name, b := range map[string]Backend{"node": n, "no scripts": NoScripts{n}} {
		k := KeysFor("dlock:", "ownerless-"+name)
		c := &Claim{Keys: k, Kind: ReentrantLock, Holder: "client/a"}
		c.SetToken("tok")
		if g, err := n.Acquire(ctx, c, time.Minute, false); err != nil || !g.Held { // (a reentrant lock needs scripts)
			t.Fatalf("%s: Acquire = %+v, %v; want held", name, g, err)
		}
		if err := rdb.HDel(ctx, k.Lock, "owner").Err(); err != nil {
			t.Fatal(err)
		}
		st, err := b.Inspect(ctx, &k)
		if err != nil || !st.Held || st.Type != "hash" || st.Extra != nil || st.Holding != "" || len(st.Leases) != 0 {
			t.Errorf("%s: Inspect(a hash with no owner) = %+v, %v; want held as a hash, no owner, no holding, no leases", name, st, err)
		}
		ok, err := b.Force(ctx, &k)
		if ok || !errors.Is(err, ErrWrongType) || !strings.Contains(err.Error(), "a hash") {
			t.Errorf("%s: Force(a hash with no owner) = %v, %v; want false and ErrWrongType naming a hash", name, ok, err)
		}
		if fields := rdb.HLen(ctx, k.Lock).Val(); fields == 0 {
			t.Errorf("%s: Force deleted the hash it may not name", name)
		}
	}
}
