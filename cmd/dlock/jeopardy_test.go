package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlockio/dlock/internal/redistest"
)

// With --jeopardy-signal, the command's group gets the signal when an
// extension of the lease fails while the lease is still valid (here the
// Redis server is frozen), and the command runs on under the lock once
// the server answers again; a signal it does not take is refused.
func TestRunJeopardySignalReachesTheCommand(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	if code, _, errOut := result(t, dlockCmd(t, childEnv("env", "REDIS_URL="+s.URL()),
		"run", "--jeopardy-signal", "KILL", "j", "--", "true")); code != exitUsage || !strings.Contains(errOut, "USR1") {
		t.Errorf("--jeopardy-signal KILL: exit %d, stderr %q; want %d naming the signals taken", code, errOut, exitUsage)
	}

	mark := filepath.Join(t.TempDir(), "mark")
	script := `trap 'printf risk >> "$MARK"' USR1; echo started; while :; do sleep 1 & wait; done`
	cmd := dlockCmd(t, childEnv("env", "REDIS_URL="+s.URL(), "MARK="+mark),
		"run", "--ttl", "6s", "--jeopardy-signal", "usr1", "jeopardy", "--", "sh", "-c", script)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	startUntilChildRuns(t, cmd)
	s.Pause()
	told := poll(10*time.Second, func() bool { b, _ := os.ReadFile(mark); return len(b) > 0 })
	s.Resume()
	if !told {
		t.Error("the command got no SIGUSR1 with Redis frozen")
	}
	// The lease recovers: a later extension renews it to its full TTL.
	rdb := s.Client(t)
	if !poll(10*time.Second, func() bool { return rdb.PTTL(t.Context(), "dlock:{jeopardy}").Val() > 5*time.Second }) {
		t.Error("the lease was not extended after Redis came back")
	}
	cmd.Process.Signal(syscall.SIGTERM)
	if !waitExit(cmd, 20*time.Second) {
		t.Fatal("dlock run still running 20s after SIGTERM")
	}
	if out := stderr.String(); !strings.Contains(out, "at risk: an extension failed; sent SIGUSR1") || strings.Contains(out, "lost") {
		t.Errorf("stderr %q: want the risk told, and no loss", out)
	}
}

// poll checks cond every 10ms until it is true or d passes.
func poll(d time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

// --jeopardy-signal takes a signal's name: "SIG" alone, or "sig", names
// none, and is refused rather than taken as no signal at all.
func TestRunJeopardySignalRefusesABareSIGPrefix(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	for _, sig := range []string{"SIG", "sig"} {
		code, _, errOut := result(t, dlockCmd(t, childEnv("env", "REDIS_URL="+s.URL()),
			"run", "--jeopardy-signal", sig, "j", "--", "true"))
		if code != exitUsage || !strings.Contains(errOut, "USR1") {
			t.Errorf("--jeopardy-signal %s: exit %d, stderr %q; want %d naming the signals taken", sig, code, errOut, exitUsage)
		}
	}
}

// --request-signal takes a signal's name or none; it is refused when the
// lease is not watched (--watch-loss=false), where it would never be sent.
func TestRunRequestSignalRefusesWhatItCannotSend(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	for _, args := range [][]string{
		{"--request-signal", "KILL"},
		{"--request-signal", "SIG"},
		{"--request-signal", ""},
		{"--request-signal", "USR1", "--watch-loss=false"},
	} {
		code, _, errOut := result(t, dlockCmd(t, childEnv("env", "REDIS_URL="+s.URL()),
			append(append([]string{"run"}, args...), "r", "--", "true")...))
		if code != exitUsage || !strings.Contains(errOut, "request-signal") {
			t.Errorf("run %q: exit %d, stderr %q; want %d naming --request-signal", args, code, errOut, exitUsage)
		}
	}
	if code, _, errOut := result(t, dlockCmd(t, childEnv("env", "REDIS_URL="+s.URL()),
		"run", "--request-signal", "none", "r", "--", "true")); code != exitOK {
		t.Errorf("run --request-signal none: exit %d, stderr %q; want %d", code, errOut, exitOK)
	}
}
