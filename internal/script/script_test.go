package script

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/dlockio/dlock/internal/redistest"
)

// Every script, with the lib functions withLib gave it, compiles on a real
// server, and every lib function it calls is defined in it.
func TestScriptsCompileWithTheirLib(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	calls := regexp.MustCompile(`\b(\w+)\(`)
	defined := map[string]bool{}
	for _, m := range libFunc.FindAllStringSubmatch(lib, -1) {
		defined[m[1]] = true
	}
	for name, s := range map[string]interface{ Hash() string }{
		"acquire": Acquire, "release": Release, "extend": Extend, "inspect": Inspect, "guard": Guard,
		"force_release": ForceRelease, "acquire_fair": AcquireFair, "release_fair": ReleaseFair,
		"acquire_reentrant": AcquireReentrant, "release_reentrant": ReleaseReentrant,
		"extend_reentrant": ExtendReentrant, "raise_fence": RaiseFence, "fence": Fence,
	} {
		src := sources[s.Hash()]
		if err := rdb.ScriptLoad(t.Context(), src).Err(); err != nil {
			t.Errorf("%s: SCRIPT LOAD = %v", name, err)
		}
		for _, m := range calls.FindAllStringSubmatch(src, -1) {
			if defined[m[1]] && !strings.Contains(src, "local function "+m[1]+"(") {
				t.Errorf("%s calls %s but its text does not define it", name, m[1])
			}
		}
	}
}

// The ended leases a lock's value records stay bounded however many
// attempts are undone on it, whether it is free (a tombstone) or held, and
// they pass on to the next holder.
func TestEndedEntriesStayBounded(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	ctx := t.Context()
	token := func(i int) string { return fmt.Sprintf("%022d", i) } // 22 characters, as dlock's
	const max = len("~ +") + 7*23                                  // one "+" entry and six "!" entries
	undo := func(i int) {
		if err := Release.Run(ctx, rdb, []string{"l"}, token(i), "l:ch", "PUBLISH", 60000).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 50 { // free: each undo is added to the tombstone
		undo(i)
	}
	if v := rdb.Get(ctx, "l").Val(); len(v) > max || !strings.Contains(v, token(49)) || strings.Contains(v, token(43)) {
		t.Errorf("tombstone after 50 undos = %q (%d bytes), want the latest six, at most %d bytes", v, len(v), max)
	}
	if n, err := Acquire.Run(ctx, rdb, []string{"l"}, token(100), 60000).Int(); err != nil || n != 0 {
		t.Fatalf("acquire over the tombstone = %d, %v", n, err)
	}
	if n, err := Acquire.Run(ctx, rdb, []string{"l"}, token(49), 60000).Int(); err != nil || n >= 0 {
		t.Errorf("acquire of an undone lease while another holds the lock = %d, %v, want it refused", n, err)
	}
	for i := 200; i < 250; i++ { // held: each undo is added to the holder's value
		undo(i)
	}
	v := rdb.Get(ctx, "l").Val()
	if len(v) > len(token(100))+7*23 || !strings.HasPrefix(v, token(100)+" ") || !strings.Contains(v, token(249)) {
		t.Errorf("held value after 50 undos = %q (%d bytes), want the holder's token and the latest six", v, len(v))
	}
	if n, err := Release.Run(ctx, rdb, []string{"l"}, token(100), "l:ch", "PUBLISH", 60000).Int(); err != nil || n != 1 {
		t.Errorf("the holder's release = %d, %v, want 1", n, err)
	}
	if err := Acquire.Run(ctx, rdb, []string{"l"}, token(249), 60000).Err(); err == nil || !strings.HasPrefix(err.Error(), "REVOKED") {
		t.Errorf("acquire of an undone lease after the holder's release = %v, want REVOKED (its entry passed on)", err)
	}
}
