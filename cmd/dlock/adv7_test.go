package main

import (
	"strings"
	"testing"
	"time"

	"github.com/dlockio/dlock/internal/redistest"
)

// HELD (adv7): the shell's lease of a semaphore permit and of a read-write
// lock's write across processes. A release --token with the wrong kind
// flag does not end the lease (exit 6, or 3 when the name is held as
// another kind) and leaves it held; with the right flag it ends it; a
// malformed token is a usage error (2) that sends nothing.
func TestAdv7CLIKindsAcrossProcesses(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	rdb := s.Client(t)
	ctx := t.Context()
	env := []string{"REDIS_URL=" + s.URL()}

	code, out, errOut := result(t, dlockCmd(t, env, "acquire", "--ttl", "5s", "-n", "3", "adv7sem"))
	tok := strings.TrimSpace(out)
	if code != exitOK {
		t.Fatalf("acquire -n 3: exit %d, %q", code, errOut)
	}
	if code, _, errOut := result(t, dlockCmd(t, env, "extend", "--token", tok, "--ttl", "20s", "-n", "3", "adv7sem")); code != exitOK {
		t.Fatalf("extend -n 3: exit %d, %q", code, errOut)
	}
	if pttl := rdb.PTTL(ctx, "dlock:{adv7sem}").Val(); pttl < 15*time.Second {
		t.Errorf("after extend --ttl 20s the permit lives %v", pttl)
	}
	if code, _, errOut := result(t, dlockCmd(t, env, "release", "--token", tok, "adv7sem")); code != exitLost && code != exitConfig {
		t.Errorf("release of a permit as a plain lock: exit %d, %q; want %d or %d", code, errOut, exitLost, exitConfig)
	}
	if n := rdb.ZCard(ctx, "dlock:{adv7sem}").Val(); n != 1 {
		t.Errorf("after a refused release the semaphore has %d members, want 1", n)
	}
	if code, _, errOut := result(t, dlockCmd(t, env, "release", "--token", tok, "-n", "3", "adv7sem")); code != exitOK {
		t.Errorf("release -n 3: exit %d, %q", code, errOut)
	}
	if n := rdb.Exists(ctx, "dlock:{adv7sem}").Val(); n != 0 {
		t.Errorf("the semaphore key is still there after release")
	}

	code, out, errOut = result(t, dlockCmd(t, env, "acquire", "--ttl", "5s", "--write", "adv7rw"))
	wtok := strings.TrimSpace(out)
	if code != exitOK {
		t.Fatalf("acquire --write: exit %d, %q", code, errOut)
	}
	if code, _, errOut := result(t, dlockCmd(t, env, "release", "--token", wtok, "--read", "adv7rw")); code != exitLost {
		t.Errorf("release of a write as a read: exit %d, %q; want %d", code, errOut, exitLost)
	}
	if code, _, _ := result(t, dlockCmd(t, env, "acquire", "--wait", "0", "--read", "adv7rw")); code != exitNotAcquired {
		t.Errorf("a read while the write is held: exit %d, want %d", code, exitNotAcquired)
	}
	if code, _, errOut := result(t, dlockCmd(t, env, "release", "--token", wtok, "--write", "adv7rw")); code != exitOK {
		t.Errorf("release --write: exit %d, %q", code, errOut)
	}
	if code, _, errOut := result(t, dlockCmd(t, env, "extend", "--token", "not-a-token", "adv7rw")); code != exitUsage {
		t.Errorf("extend of a malformed token: exit %d, %q; want %d", code, errOut, exitUsage)
	}
}
