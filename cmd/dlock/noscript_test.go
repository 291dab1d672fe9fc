package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/dlockio/dlock/internal/redistest"
)

// As a Redis user denied scripting, dlock run says so and names
// --no-scripts' option; with --no-scripts, run and inspect work, and a
// semaphore (-n) is refused as needing scripts.
func TestNoScriptsFlag(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t, redistest.TCP())
	if _, err := s.Do(t.Context(), "ACL", "SETUSER", "noscript", "on", ">pw", "~*", "&*", "+@all", "-@scripting"); err != nil {
		t.Fatal(err)
	}
	env := []string{fmt.Sprintf("REDIS_URL=redis://noscript:pw@%s", s.Addr())}
	code, _, errOut := result(t, dlockCmd(t, env, "run", "jobs", "--", "true"))
	if code == 0 || !strings.Contains(errOut, "scripting is denied") || !strings.Contains(errOut, "WithoutScripts()") {
		t.Errorf("run as a user denied scripting = %d, %q; want a failure that says so", code, errOut)
	}
	code, out, errOut := result(t, dlockCmd(t, env, "run", "--no-scripts", "jobs", "--", "sh", "-c", "echo fence=$DLOCK_FENCE"))
	if code != 0 || !strings.Contains(out, "fence=") || strings.Contains(out, "fence=\n") {
		t.Errorf("run --no-scripts = %d, %q, %q; want 0 and a fence", code, out, errOut)
	}
	code, out, errOut = result(t, dlockCmd(t, env, "inspect", "--no-scripts", "jobs"))
	if code != 0 {
		t.Errorf("inspect --no-scripts = %d, %q, %q", code, out, errOut)
	}
	code, _, errOut = result(t, dlockCmd(t, env, "run", "--no-scripts", "-n", "3", "pool", "--", "true"))
	if code == 0 || !strings.Contains(errOut, "WithoutScripts()") {
		t.Errorf("run --no-scripts -n 3 = %d, %q; want a failure naming WithoutScripts", code, errOut)
	}
}
