package script

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

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

// A lock's value names the last three leases that released it, however
// many came and went: a re-sent release of each reports the release, and a
// late acquire of each is refused; older ones are forgotten. An attempt
// undone while another lease holds the lock is refused by its marker.
func TestReleaseHistory(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	ctx := t.Context()
	token := func(i int) string { return fmt.Sprintf("%022d", i) } // 22 characters, as dlock's
	marker := func(i int) string { return "l:r:" + token(i) }
	acquire := func(i int) (int, error) {
		return Acquire.Run(ctx, rdb, []string{"l", marker(i)}, token(i), 60000).Int()
	}
	release := func(i int) int {
		n, err := Release.Run(ctx, rdb, []string{"l", marker(i)}, token(i), "l:ch", "PUBLISH", 60000).Int()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	for i := range 20 {
		if n, err := acquire(i); err != nil || n != 0 {
			t.Fatalf("acquire %d = %d, %v", i, n, err)
		}
		if i%2 == 1 {
			Extend.Run(ctx, rdb, []string{"l"}, token(i), 60000, 1)
		}
		if release(i) != 1 {
			t.Fatalf("release %d = 0", i)
		}
	}
	v := rdb.Get(ctx, "l").Val()
	if len(v) != len("~")+3*24 {
		t.Errorf("tombstone after 20 leases = %q (%d bytes), want the last three leases", v, len(v))
	}
	for i := 17; i < 20; i++ {
		if release(i) != 1 {
			t.Errorf("re-sent release of lease %d (one of the last three) = 0, want 1", i)
		}
		if _, err := acquire(i); err == nil || !strings.HasPrefix(err.Error(), "REVOKED") {
			t.Errorf("late acquire of lease %d = %v, want REVOKED", i, err)
		}
	}
	if n, err := acquire(100); err != nil || n != 0 {
		t.Fatalf("acquire 100 = %d, %v", n, err)
	}
	if release(50) != 0 { // the undo of an attempt while 100 holds the lock
		t.Error("release of a lease that never held the lock = 1")
	}
	if n, err := acquire(50); err != nil || n >= 0 {
		t.Errorf("late acquire of the undone lease while 100 holds = %d, %v, want it refused", n, err)
	}
	release(100)
	if _, err := acquire(50); err == nil || !strings.HasPrefix(err.Error(), "REVOKED") {
		t.Errorf("late acquire of the undone lease after 100 released = %v, want REVOKED (its marker)", err)
	}
	if d := rdb.PTTL(ctx, marker(50)).Val(); d <= 0 || d > time.Minute {
		t.Errorf("the undone lease's marker lives %v, want the revocation window", d)
	}
}
