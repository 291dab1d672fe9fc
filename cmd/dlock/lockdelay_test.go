package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/redistest"
)

// dlock inspect --lock-delay shows a lock whose lease outlived its
// holder's validity as HELD delay (JSON in_delay), and a live one as yes.
func TestInspectShowsLockInLockDelay(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	ctx := t.Context()
	c, err := dlock.New(s.Client(t), dlock.WithAutoExtend(false), dlock.LockDelay(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	live, err := c.TryAcquire(ctx, "live")
	if err != nil {
		t.Fatal(err)
	}
	defer live.Release(ctx)
	lapsed, err := c.TryAcquire(ctx, "lapsed", dlock.LeaseTTL(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer lapsed.Release(ctx)
	inspect := func(args ...string) string {
		t.Helper()
		var stdout, stderr bytes.Buffer
		if code := run(ctx, append([]string{"inspect", "--redis", s.URL()}, args...), &stdout, &stderr); code != exitOK {
			t.Fatalf("inspect %q: exit %d, stderr %q", args, code, stderr.String())
		}
		return stdout.String()
	}
	var out string
	ok := false
	for deadline := time.Now().Add(10 * time.Second); !ok && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		out = inspect("--lock-delay", "1m", "lapsed", "live")
		ok = strings.Contains(out, "lapsed  delay") // the lease has ended: only the delay is left
	}
	if !ok || !strings.Contains(out, "live    yes") {
		t.Errorf("inspect --lock-delay 1m lapsed live =\n%s\nwant lapsed HELD delay, live HELD yes", out)
	}
	if out := inspect("lapsed"); !strings.Contains(out, "lapsed  yes") {
		t.Errorf("inspect lapsed (no --lock-delay) =\n%s\nwant HELD yes", out)
	}
	var in struct {
		InDelay bool `json:"in_delay"`
	}
	if err := json.Unmarshal([]byte(inspect("--json", "--lock-delay", "1m", "lapsed")), &in); err != nil || !in.InDelay {
		t.Errorf("inspect --json --lock-delay 1m lapsed: in_delay = %v (%v), want true", in.InDelay, err)
	}
	var stdout, stderr bytes.Buffer
	if code := run(ctx, []string{"inspect", "--redis", s.URL(), "--lock-delay", "-1s", "lapsed"}, &stdout, &stderr); code != exitUsage {
		t.Errorf("inspect --lock-delay -1s: exit %d, want %d (usage)", code, exitUsage)
	}
}
