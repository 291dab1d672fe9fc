package torture

import (
	"slices"
	"testing"
	"time"
)

// leftovers sorts the keys a round left by what the docs allow; a key it
// reports bad carries the lock name and lease token the report looks up.
func TestLeftoversSortsKeys(t *testing.T) {
	const p = "t7:"
	ttl := 2 * time.Second
	keys := []scanKey{
		{node: 0, key: p + "{a}:fence", kind: "string", pttl: time.Hour},            // fence window: allowed
		{node: 0, key: p + "{a}:r:tok", kind: "string", pttl: ttl},                  // marker within a lease: allowed
		{node: 0, key: p + "{a}:r:tok", kind: "string", pttl: 0},                    // expiring this millisecond: allowed
		{node: 0, key: p + "{a}", kind: "string", pttl: ttl, val: "lease-a"},        // a lock left behind
		{node: 1, key: p + "{b}", kind: "string", pttl: ttl, val: "lease-b"},        // on a node restarted empty
		{node: 1, key: p + "{c}:r:tok", kind: "string", pttl: -1, val: "1"},         // a marker with no expiry
		{node: 0, key: p + "{d}", kind: "string", pttl: 10 * ttl, val: "lease-d"},   // beyond any lease
		{node: 0, key: p + "{e}:w", kind: "string", pttl: ttl, val: "1"},            // a wake key within a lease: allowed
		{node: 0, key: p + "{f}:w", kind: "string", pttl: -1, val: "1"},             // a wake key with no expiry
		{node: 0, key: p + "{g}", kind: "zset", pttl: ttl, set: "r:tok -5ms"},       // holds that all lapsed: allowed
		{node: 0, key: p + "{h}", kind: "zset", pttl: ttl, live: 1, val: "zset-h"},  // a live hold left behind
		{node: 0, key: p + "{i}", kind: "zset", pttl: -1, val: "zset-i"},            // lapsed holds that never expire
		{node: 0, key: p + "{j}", kind: "zset", pttl: ttl, live: -1, val: "zset-j"}, // unread
	}
	bad, excused := leftovers(keys, p, ttl, 0, map[int]bool{1: true})
	var names []string
	for _, k := range bad {
		names = append(names, k.name(p)+"="+k.val)
	}
	if want := []string{"a=lease-a", "c=1", "d=lease-d", "f=1", "h=zset-h", "i=zset-i", "j=zset-j"}; !slices.Equal(names, want) {
		t.Errorf("bad = %v, want %v", names, want)
	}
	if len(excused) != 1 || excused[0] != "node1 t7:{b} (string, pttl 2s) on a node restarted empty" {
		t.Errorf("excused = %q", excused)
	}
	h := []Event{
		{W: "g0", Name: "a", Op: OpAcquire, CS: "g0-1", Tok: "lease-a"},
		{W: "g1", Name: "a", Op: OpAcquire, CS: "g1-1", Tok: "lease-x"},
		{W: "g0", Name: "a", Op: OpRelease, CS: "g0-1", Tok: "lease-a"},
	}
	if cs := leaseOf(h, "lease-a"); !slices.Equal(cs, []string{"g0-1"}) {
		t.Errorf("leaseOf = %v, want [g0-1]", cs)
	}
	if cs := leaseOf(h, ""); cs != nil {
		t.Errorf("leaseOf(\"\") = %v, want none", cs)
	}
}
