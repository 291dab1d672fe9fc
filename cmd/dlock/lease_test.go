package main

import (
	"strings"
	"testing"
	"time"

	"github.com/dlockio/dlock/internal/redistest"
)

// The shell's lock across steps, each step its own dlock process: acquire
// prints a token and leaves the lease (held after dlock exits, to its TTL,
// unextended); a second acquire is refused (5); extend with the token sets
// the lease's end; release with it frees the lock; a release or extend of
// the ended lease exits 6.
func TestAcquireExtendReleaseAcrossProcesses(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	rdb := s.Client(t)
	ctx := t.Context()
	env := []string{"REDIS_URL=" + s.URL()}

	token := acquireToken(t, env, "--ttl", "2m", "--meta", "step-1", "nightly")
	if len(token) < 22 || strings.ContainsAny(token, " \n") {
		t.Fatalf("acquire printed %q, want one token", token)
	}
	if got := rdb.Get(ctx, "dlock:{nightly}").Val(); got != token {
		t.Fatalf("the lock after acquire exited holds %q, want the printed token %q", got, token)
	}
	if pttl := rdb.PTTL(ctx, "dlock:{nightly}").Val(); pttl <= time.Minute || pttl > 2*time.Minute {
		t.Errorf("the lease left by acquire lives %v, want its --ttl of 2m", pttl)
	}
	if code, _, errOut := result(t, dlockCmd(t, env, "acquire", "--wait", "0", "nightly")); code != exitNotAcquired || !strings.Contains(errOut, "step-1") {
		t.Errorf("a second acquire: exit %d, stderr %q; want %d naming step-1", code, errOut, exitNotAcquired)
	}

	if code, _, errOut := result(t, dlockCmd(t, env, "extend", "--token", token, "--ttl", "10m", "nightly")); code != exitOK {
		t.Fatalf("extend: exit %d, stderr %q", code, errOut)
	}
	if pttl := rdb.PTTL(ctx, "dlock:{nightly}").Val(); pttl <= 5*time.Minute {
		t.Errorf("after extend --ttl 10m the lease lives %v", pttl)
	}
	if code, _, _ := result(t, dlockCmd(t, env, "extend", "--token", token, "--ttl", "10m", "other")); code != exitLost {
		t.Errorf("extend of the token on another name: exit %d, want %d", code, exitLost)
	}
	if code, out, errOut := result(t, dlockCmd(t, env, "release", "--token", token, "nightly")); code != exitOK || !strings.Contains(out, "released") {
		t.Fatalf("release --token: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if lockHeld(rdb, "dlock:{nightly}") {
		t.Fatal("the lock is still held after release --token")
	}
	for _, args := range [][]string{
		{"release", "--token", token, "nightly"},
		{"extend", "--token", token, "nightly"},
	} {
		if code, _, errOut := result(t, dlockCmd(t, env, args...)); code != exitLost || !strings.Contains(errOut, "ended") {
			t.Errorf("%s of the released lease: exit %d, stderr %q; want %d", args[0], code, errOut, exitLost)
		}
	}
}

// The kind flags: a permit of a semaphore and a read hold are acquired,
// extended and released by token the same way; a token given with the
// wrong kind's flag finds no lease of that kind.
func TestAcquireReleaseKinds(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	rdb := s.Client(t)
	ctx := t.Context()
	env := []string{"REDIS_URL=" + s.URL()}

	tokens := []string{acquireToken(t, env, "-n", "2", "--ttl", "2m", "pool"), acquireToken(t, env, "-n", "2", "--ttl", "2m", "pool")}
	if code, _, _ := result(t, dlockCmd(t, env, "acquire", "-n", "2", "--wait", "0", "pool")); code != exitNotAcquired {
		t.Errorf("a third permit of 2: exit %d, want %d", code, exitNotAcquired)
	}
	if code, _, _ := result(t, dlockCmd(t, env, "release", "--token", tokens[0], "pool")); code != exitConfig {
		t.Errorf("release of a permit's token as a lock: exit %d, want %d (the name is a semaphore)", code, exitConfig)
	}
	if code, _, errOut := result(t, dlockCmd(t, env, "extend", "-n", "2", "--token", tokens[1], "--ttl", "10m", "pool")); code != exitOK {
		t.Errorf("extend -n 2: exit %d, stderr %q", code, errOut)
	}
	for _, tok := range tokens {
		if code, _, errOut := result(t, dlockCmd(t, env, "release", "-n", "2", "--token", tok, "pool")); code != exitOK {
			t.Errorf("release -n 2: exit %d, stderr %q", code, errOut)
		}
	}
	if n := rdb.ZCard(ctx, "dlock:{pool}").Val(); n != 0 {
		t.Errorf("%d permits left after both were released by token", n)
	}

	read := acquireToken(t, env, "--read", "--ttl", "2m", "doc")
	if code, _, _ := result(t, dlockCmd(t, env, "release", "--write", "--token", read, "doc")); code != exitLost {
		t.Errorf("release --write of a read's token: exit %d, want %d", code, exitLost)
	}
	if code, _, errOut := result(t, dlockCmd(t, env, "release", "--read", "--token", read, "doc")); code != exitOK {
		t.Errorf("release --read: exit %d, stderr %q", code, errOut)
	}
	if lockHeld(rdb, "dlock:{doc}") {
		t.Error("the read-write lock is still held")
	}
}

// Bad input is a usage error (2) that sends nothing.
func TestAcquireExtendReleaseUsage(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	rdb := s.Client(t)
	env := []string{"REDIS_URL=" + s.URL()}
	for _, args := range [][]string{
		{"acquire"},
		{"acquire", "a", "b"},
		{"acquire", "--ttl", "1ms", "a"},
		{"acquire", "-n", "0", "a"},
		{"acquire", "--read", "--write", "a"},
		{"extend", "a"},
		{"extend", "--token", "not-a-token", "a"},
		{"extend", "--token", "AAAAAAAAAAAAAAAAAAAAAA", "--ttl", "1ms", "a"},
		{"release", "a"},
		{"release", "--force", "--token", "AAAAAAAAAAAAAAAAAAAAAA", "a"},
		{"release", "--token", "x y", "a"},
	} {
		if code, _, errOut := result(t, dlockCmd(t, env, args...)); code != exitUsage || errOut == "" {
			t.Errorf("dlock %s: exit %d, stderr %q; want %d with a message", strings.Join(args, " "), code, errOut, exitUsage)
		}
	}
	if n := rdb.DBSize(t.Context()).Val(); n != 0 {
		t.Errorf("%d keys written by refused commands", n)
	}
}

// An error of extend or release --token names that step, the lock and the
// flag at fault, not the acquisition by which the CLI resumes the lease
// (the library's "acquire" and Resume(TOKEN)): a token that is none, a
// token given without the flag of its kind, a lease that has ended.
func TestExtendAndReleaseByTokenErrorsNameTheStep(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	env := []string{"REDIS_URL=" + s.URL()}
	permit := acquireToken(t, env, "-n", "2", "--ttl", "1m", "pool")
	for _, cmd := range []string{"release", "extend"} {
		for _, c := range []struct {
			token, name string
			code        int
			want        string // what stderr says
		}{
			{"garbage", "nightly", exitUsage, cmd + ` "nightly": --token "garbage": not a lease token`},
			{permit, "pool", exitConfig, cmd + ` "pool": lock key holds a value of another type`},
			{permit, "nightly", exitLost, cmd + ` "nightly": the lease of that token has ended`},
		} {
			code, _, errOut := result(t, dlockCmd(t, env, cmd, "--token", c.token, c.name))
			if code != c.code || !strings.Contains(errOut, c.want) || strings.Contains(errOut, `acquire "`) || strings.Contains(errOut, "Resume") {
				t.Errorf("%s --token %.10s… %s: exit %d, stderr %q; want %d and %q, with no acquire NAME or Resume", cmd, c.token, c.name, code, errOut, c.code, c.want)
			}
		}
	}
}

// A semaphore's permit of 3 and a read-write lock's write, each held across
// processes: a release --token with the wrong kind flag does not end the
// lease (exit 6, or 3 when the name is held as another kind) and leaves it
// held; with the right flag it ends it; a malformed token is a usage error
// (2) that sends nothing.
func TestReleaseByTokenOfWrongKindKeepsLease(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	rdb := s.Client(t)
	ctx := t.Context()
	env := []string{"REDIS_URL=" + s.URL()}

	tok := acquireToken(t, env, "--ttl", "2m", "-n", "3", "k:sem")
	if code, _, errOut := result(t, dlockCmd(t, env, "extend", "--token", tok, "--ttl", "10m", "-n", "3", "k:sem")); code != exitOK {
		t.Fatalf("extend -n 3: exit %d, %q", code, errOut)
	}
	if pttl := rdb.PTTL(ctx, "dlock:{k:sem}").Val(); pttl < 5*time.Minute {
		t.Errorf("after extend --ttl 10m the permit lives %v", pttl)
	}
	if code, _, errOut := result(t, dlockCmd(t, env, "release", "--token", tok, "k:sem")); code != exitLost && code != exitConfig {
		t.Errorf("release of a permit as a plain lock: exit %d, %q; want %d or %d", code, errOut, exitLost, exitConfig)
	}
	if n := rdb.ZCard(ctx, "dlock:{k:sem}").Val(); n != 1 {
		t.Errorf("after a refused release the semaphore has %d members, want 1", n)
	}
	if code, _, errOut := result(t, dlockCmd(t, env, "release", "--token", tok, "-n", "3", "k:sem")); code != exitOK {
		t.Errorf("release -n 3: exit %d, %q", code, errOut)
	}
	if n := rdb.Exists(ctx, "dlock:{k:sem}").Val(); n != 0 {
		t.Errorf("the semaphore key is still there after release")
	}

	wtok := acquireToken(t, env, "--ttl", "2m", "--write", "k:rw")
	if code, _, errOut := result(t, dlockCmd(t, env, "release", "--token", wtok, "--read", "k:rw")); code != exitLost {
		t.Errorf("release of a write as a read: exit %d, %q; want %d", code, errOut, exitLost)
	}
	if code, _, _ := result(t, dlockCmd(t, env, "acquire", "--wait", "0", "--read", "k:rw")); code != exitNotAcquired {
		t.Errorf("a read while the write is held: exit %d, want %d", code, exitNotAcquired)
	}
	if code, _, errOut := result(t, dlockCmd(t, env, "release", "--token", wtok, "--write", "k:rw")); code != exitOK {
		t.Errorf("release --write: exit %d, %q", code, errOut)
	}
	if code, _, errOut := result(t, dlockCmd(t, env, "extend", "--token", "not-a-token", "k:rw")); code != exitUsage {
		t.Errorf("extend of a malformed token: exit %d, %q; want %d", code, errOut, exitUsage)
	}
}
