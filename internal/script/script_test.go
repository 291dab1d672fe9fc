package script

import (
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
