package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/leakcheck"
	"github.com/dlockio/dlock/internal/redisserver"
	"github.com/dlockio/dlock/internal/redistest"
)

// groupScript is the command of the process-group tests: a shell that says
// its process ID (its group's ID) and waits for a child, so that the group
// holds two processes, only one of them dlock's grandchild.
const groupScript = `echo $$; sleep 60 & wait`

// shChild holds the shell forms of the child modes polite and stubborn, for
// tests that time the command: a shell starts in milliseconds where the
// race-instrumented test binary can take a second on a loaded machine.
var shChild = map[string]string{
	"polite":   `trap 'kill $! 2>/dev/null; printf terminated > "$MARK"; exit 0' TERM; echo started; sleep 60 & wait`,
	"stubborn": `trap '' TERM; echo started; sleep 60`,
}

// procStat returns the state, parent and process group of pid, from /proc.
func procStat(pid int) (state byte, ppid, pgrp int, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, 0, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')') // the command name may hold spaces
	if i < 0 || i+2 >= len(s) {
		return 0, 0, 0, false
	}
	f := strings.Fields(s[i+2:]) // state ppid pgrp ...
	if len(f) < 3 {
		return 0, 0, 0, false
	}
	ppid, _ = strconv.Atoi(f[1])
	pgrp, _ = strconv.Atoi(f[2])
	return f[0][0], ppid, pgrp, true
}

// alive reports whether pid runs (or is stopped): it exists and is no zombie.
func alive(pid int) bool {
	st, _, _, ok := procStat(pid)
	return ok && st != 'Z' && st != 'X'
}

// processes returns the state of every live process for which match (given
// its parent and group) is true.
func processes(match func(ppid, pgrp int) bool) map[int]byte {
	out := map[int]byte{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, ppid, pgrp, ok := procStat(pid); ok && st != 'Z' && st != 'X' && match(ppid, pgrp) {
			out[pid] = st
		}
	}
	return out
}

// group returns the states of the live processes of process group pgid.
func group(pgid int) map[int]byte {
	return processes(func(_, pgrp int) bool { return pgrp == pgid })
}

// allIn reports whether every process of states is in one of the states in
// want ("T": stopped), and there is at least one.
func allIn(states map[int]byte, want string) bool {
	for _, st := range states {
		if !strings.ContainsRune(want, rune(st)) {
			return false
		}
	}
	return len(states) > 0
}

// eventually polls cond every 10ms for up to d and reports whether it held.
func eventually(d time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(d); ; time.Sleep(10 * time.Millisecond) {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// startGroup starts cmd, a `dlock run` of sh -c groupScript, and returns
// the command's process group (sh's ID) and the guardian's process ID once
// the group holds both sh and its sleep. Whatever the test does, its
// cleanup kills dlock, the guardian and the group.
func startGroup(t *testing.T, cmd *exec.Cmd) (pgid, guardian int) {
	t.Helper()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	dlockPID := cmd.Process.Pid
	t.Cleanup(func() {
		syscall.Kill(dlockPID, syscall.SIGKILL)
		for pid := range processes(func(ppid, pgrp int) bool {
			return (pgid > 0 && pgrp == pgid) || (guardian > 0 && pgrp == guardian)
		}) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		if cmd.ProcessState == nil {
			waitExit(cmd, 10*time.Second)
		}
	})
	line := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(stdout).ReadString('\n')
		line <- l
	}()
	select {
	case l := <-line:
		if pgid, err = strconv.Atoi(strings.TrimSpace(l)); err != nil || pgid <= 1 {
			t.Fatalf("the command said %q, want its process ID", l)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the command did not start within 20s")
	}
	if !eventually(10*time.Second, func() bool { return len(group(pgid)) == 2 }) {
		t.Fatalf("process group %d = %v, want sh and sleep", pgid, group(pgid))
	}
	for pid := range processes(func(ppid, _ int) bool { return ppid == dlockPID }) {
		guardian = pid
	}
	if guardian == 0 {
		t.Fatal("no guardian process under dlock")
	}
	return pgid, guardian
}

// Whatever kills dlock, the command's whole process group (not only its
// leader) is gone before the lease ends: a SIGKILLed dlock extends it no
// more, and another dlock may take the lock then.
func TestRunKilledDlockTakesGroupAlong(t *testing.T) {
	// Serial: bounds how soon the group dies after dlock is killed, within a 3s lease.
	for _, tt := range []struct {
		name, script string
		within       time.Duration
	}{
		// sh and sleep die of the SIGTERM at once.
		{"polite", groupScript, 3 * time.Second},
		// Both ignore SIGTERM: SIGKILL must come well before --grace (a
		// minute), before the lease (3s) runs out.
		{"stubborn", `trap "" TERM; ` + groupScript, 6 * time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := redistest.Start(t)
			rdb := s.Client(t)
			cmd := dlockCmd(t, []string{"REDIS_URL=" + s.URL()}, "run", "--ttl", "3s", "--grace", "1m", "k9", "--", "sh", "-c", tt.script)
			pgid, guardian := startGroup(t, cmd)

			cmd.Process.Kill()
			cmd.Wait()
			var heldWhenGone bool
			if !eventually(tt.within, func() bool {
				held := lockHeld(rdb, "dlock:{k9}") // read first: the group must die while it is held
				if len(group(pgid)) > 0 {
					return false
				}
				heldWhenGone = held
				return true
			}) {
				t.Fatalf("%v after dlock was killed, its command's process group still holds %v", tt.within, group(pgid))
			}
			if !heldWhenGone {
				t.Error("the command's process group outlived the lease")
			}
			if !eventually(5*time.Second, func() bool { return !alive(guardian) }) {
				t.Error("the guardian process outlived the command")
			}
		})
	}
}

// The command's process group runs under the lock until it has all
// exited, not only its leader: a job the command left running in the
// background (here a sleep that sh started and did not wait for) keeps the
// lock held, and dlock run exits, releasing it, once the job has ended.
func TestRunHoldsTheLockUntilTheCommandsWholeGroupHasExited(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	rdb := s.Client(t)
	cmd := dlockCmd(t, []string{"REDIS_URL=" + s.URL()}, "run", "--ttl", "3s", "left", "--", "sh", "-c", "echo $$; exec >/dev/null 2>&1; sleep 2 &")
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	pgid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || pgid <= 1 {
		t.Fatalf("the command said %q, want its process ID", line)
	}
	t.Cleanup(func() {
		for pid := range group(pgid) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	seen := false // the job seen running with its leader gone
	deadline := time.After(30 * time.Second)
	for {
		select {
		case err := <-exited:
			if err != nil {
				t.Fatalf("dlock run: %v", err)
			}
			if left := group(pgid); len(left) > 0 {
				t.Errorf("dlock run exited, releasing the lock, while the command's process group still runs: %v", left)
			}
			if lockHeld(rdb, "dlock:{left}") {
				t.Error("dlock run exited and left the lock held")
			}
			if !seen {
				t.Error("the background job was never seen running under the lock after its leader exited")
			}
			return
		case <-deadline:
			t.Fatal("dlock run did not exit within 30s of a 2s job")
		case <-time.After(20 * time.Millisecond):
			// Read the lock before the group: a group seen running after
			// the lock was seen free is a job that outlived the lock.
			held := lockHeld(rdb, "dlock:{left}")
			members := group(pgid)
			if _, leader := members[pgid]; len(members) > 0 && !leader {
				seen = true
				if !held {
					t.Fatalf("the lock is free while the command's background job runs: %v", members)
				}
			}
		}
	}
}

// Ctrl-Z stops the command with dlock: SIGTSTP does not reach the
// command's own process group from the terminal, and a stopped dlock
// cannot extend the lease. SIGCONT continues both.
func TestRunSuspendStopsCommand(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	errFile := filepath.Join(t.TempDir(), "stderr")
	stderr, err := os.Create(errFile)
	if err != nil {
		t.Fatal(err)
	}
	defer stderr.Close()
	// A long lease: the guardian's own stop, 54s on, must not be what the
	// test sees.
	cmd := dlockCmd(t, []string{"REDIS_URL=" + s.URL()}, "run", "--ttl", "1m", "tstp", "--", "sh", "-c", groupScript)
	cmd.Stderr = stderr
	pgid, guardian := startGroup(t, cmd)
	dlockPID := cmd.Process.Pid
	state := func(pid int) byte { st, _, _, _ := procStat(pid); return st }

	cmd.Process.Signal(syscall.SIGTSTP)
	if !eventually(10*time.Second, func() bool { return state(dlockPID) == 'T' && allIn(group(pgid), "T") }) {
		t.Fatalf("after SIGTSTP: dlock in state %c, the command's group %v; want all stopped (T)", state(dlockPID), group(pgid))
	}
	if state(guardian) == 'T' {
		t.Error("the guardian was stopped too; it must keep watching dlock")
	}

	cmd.Process.Signal(syscall.SIGCONT)
	if !eventually(10*time.Second, func() bool {
		return state(dlockPID) != 'T' && len(group(pgid)) == 2 && allIn(group(pgid), "RSD")
	}) {
		t.Fatalf("after SIGCONT: dlock in state %c, the command's group %v; want all running", state(dlockPID), group(pgid))
	}

	cmd.Process.Signal(syscall.SIGTERM) // forwarded: sh dies of it
	if !waitExit(cmd, 20*time.Second) {
		t.Fatal("dlock run still running 20s after SIGTERM")
	}
	if code := cmd.ProcessState.ExitCode(); code != 128+int(syscall.SIGTERM) {
		out, _ := os.ReadFile(errFile)
		t.Errorf("exit = %d, want the command's %d (stderr %q)", code, 128+int(syscall.SIGTERM), out)
	}
	if lockHeld(s.Client(t), "dlock:{tstp}") {
		t.Error("lock still held after dlock run exited")
	}
}

// A dlock stopped by a signal it cannot catch (SIGSTOP) extends the lease
// no more: the guardian stops the command before the lease ends, and once
// dlock continues, the lost lock is handled as any loss.
func TestRunFrozenDlockStopsCommand(t *testing.T) {
	// Serial: the guardian must stop the command within a 2s lease.
	s := redistest.Start(t)
	rdb := s.Client(t)
	errFile := filepath.Join(t.TempDir(), "stderr")
	stderr, err := os.Create(errFile)
	if err != nil {
		t.Fatal(err)
	}
	defer stderr.Close()
	cmd := dlockCmd(t, []string{"REDIS_URL=" + s.URL()}, "run", "--ttl", "2s", "--grace", "5s", "frozen", "--", "sh", "-c", groupScript)
	cmd.Stderr = stderr
	pgid, _ := startGroup(t, cmd)

	cmd.Process.Signal(syscall.SIGSTOP)
	t.Cleanup(func() { cmd.Process.Signal(syscall.SIGCONT) })
	var heldWhenStopped bool
	if !eventually(10*time.Second, func() bool {
		held := lockHeld(rdb, "dlock:{frozen}")
		if !allIn(group(pgid), "T") {
			return false
		}
		heldWhenStopped = held
		return true
	}) {
		t.Fatalf("dlock stopped for 10s (TTL 2s) and its command's group is %v, want stopped (T)", group(pgid))
	}
	if !heldWhenStopped {
		t.Error("the command was stopped only after the lease had ended")
	}

	// Let the lease end, then continue dlock: it finds the lock lost.
	if !eventually(10*time.Second, func() bool { return !lockHeld(rdb, "dlock:{frozen}") }) {
		t.Fatal("the lock key outlived its TTL")
	}
	cmd.Process.Signal(syscall.SIGCONT)
	if !waitExit(cmd, 20*time.Second) {
		t.Fatal("dlock run still running 20s after it was continued with its lock lost")
	}
	out, _ := os.ReadFile(errFile)
	if code := cmd.ProcessState.ExitCode(); code != exitLost || !strings.Contains(string(out), "lost") {
		t.Errorf("exit = %d, stderr %q; want %d (lock lost)", code, out, exitLost)
	}
	if !eventually(5*time.Second, func() bool { return len(group(pgid)) == 0 }) {
		t.Errorf("the command's group %v outlived dlock run", group(pgid))
	}
}

// quorumArgs starts n TCP servers with opts and returns them and their
// --redis flags.
func quorumArgs(t *testing.T, n int, opts ...redistest.Option) ([]*redistest.Server, []string) {
	t.Helper()
	var srvs []*redistest.Server
	var args []string
	for range n {
		s := redistest.Start(t, append([]redistest.Option{redistest.TCP()}, opts...)...)
		srvs = append(srvs, s)
		args = append(args, "--redis", s.URL())
	}
	return srvs, args
}

// requirePass makes s require a password (set once it runs: redistest
// waits for a PING that a password would refuse).
func requirePass(t *testing.T, s *redistest.Server) {
	t.Helper()
	if _, err := s.Do(t.Context(), "CONFIG", "SET", "requirepass", "x"); err != nil {
		t.Fatal(err)
	}
}

// checkRedisExit checks that a dlock run over a failing quorum exits 4 with
// one line naming each failed node and the reason, never "held by another
// owner".
func checkRedisExit(t *testing.T, code int, errOut string, failed []*redistest.Server, reason string) {
	t.Helper()
	if code != exitRedis {
		t.Errorf("exit %d, want %d (Redis unreachable); stderr %q", code, exitRedis, errOut)
	}
	if strings.Count(errOut, "\n") != 1 || strings.Contains(errOut, "held by another holder") || !strings.Contains(errOut, reason) {
		t.Errorf("stderr = %q, want one line saying %q", errOut, reason)
	}
	for _, s := range failed {
		if !strings.Contains(errOut, s.URL()) {
			t.Errorf("stderr = %q, does not name the failed node %s", errOut, s.URL())
		}
	}
}

// Redis nodes that fail are no lock held by another holder: a quorum that
// cannot reach a majority exits 4 and names the nodes.
func TestRunQuorumFailures(t *testing.T) {
	t.Parallel()
	run := func(t *testing.T, args ...string) (int, string) {
		t.Helper()
		args = append(append([]string{"run"}, args...), "q", "--", os.Args[0], childArg)
		code, _, errOut := result(t, dlockCmd(t, childEnv("env"), args...))
		return code, errOut
	}
	t.Run("two of three dead", func(t *testing.T) {
		t.Parallel()
		srvs, args := quorumArgs(t, 3)
		srvs[0].Kill()
		srvs[2].Kill()
		for _, wait := range []string{"0", "-1s"} {
			code, errOut := run(t, append(args, "--wait", wait)...)
			checkRedisExit(t, code, errOut, []*redistest.Server{srvs[0], srvs[2]}, "refused")
		}
	})
	t.Run("two of three want a password", func(t *testing.T) {
		t.Parallel()
		srvs, args := quorumArgs(t, 3)
		requirePass(t, srvs[1])
		requirePass(t, srvs[2])
		code, errOut := run(t, append(args, "--wait", "0")...)
		checkRedisExit(t, code, errOut, srvs[1:], "NOAUTH")
	})
	t.Run("one of three wants a password", func(t *testing.T) { // a minority is tolerated
		t.Parallel()
		srvs, args := quorumArgs(t, 3)
		requirePass(t, srvs[0])
		if code, errOut := run(t, args...); code != 7 {
			t.Errorf("exit %d, want the command's 7; stderr %q", code, errOut)
		}
	})
	t.Run("two of three refuse writes", func(t *testing.T) {
		t.Parallel()
		// They answer PING, so only the acquisition finds them failing.
		good, args := quorumArgs(t, 1)
		bad, badArgs := quorumArgs(t, 2, redistest.Args("--min-replicas-to-write", "1"))
		args = append(args, badArgs...)
		for _, wait := range []string{"0", "500ms"} {
			code, errOut := run(t, append(args, "--wait", wait)...)
			checkRedisExit(t, code, errOut, bad, "NOREPLICAS")
			if strings.Contains(errOut, good[0].URL()) {
				t.Errorf("stderr = %q names the node that worked", errOut)
			}
		}
	})
}

// acquireFor over a quorum built directly, whose nodes are not checked
// first: node failures are exit 4, a refusal among them is still exit 5.
func TestAcquireForQuorumErrors(t *testing.T) {
	t.Parallel()
	srvs, _ := quorumArgs(t, 3)
	var nodes []redis.UniversalClient
	var names []string
	for _, s := range srvs {
		nodes = append(nodes, s.Client(t))
		names = append(names, s.URL())
	}
	// A node timeout of a second, not TTL/50 (100ms): a loaded machine can
	// take that long to answer, and nodes that fail or refuse are tested, not slow ones.
	c, err := dlock.NewRedlock(nodes, time.Second, dlock.LeaseTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()

	requirePass(t, srvs[2])
	srvs[1].Kill()
	for _, wait := range []time.Duration{0, 300 * time.Millisecond} {
		l, err := acquireFor(ctx, holdable{c: c, name: "q"}, wait, names)
		if l != nil {
			t.Fatal("acquired with 2 of 3 nodes failing")
		}
		ce, ok := err.(*cliError)
		if !ok || ce.code != exitRedis || !strings.Contains(err.Error(), names[1]) || !strings.Contains(err.Error(), names[2]+": NOAUTH") || strings.Contains(err.Error(), names[0]) {
			t.Errorf("acquireFor (wait %v) with a dead and an unauthorised node = %v, want exit %d naming both", wait, err, exitRedis)
		}
	}

	// One node held by another holder, one failing, one granting: the lock
	// may be held (a split vote at worst). That is "held by another holder".
	srvs[1].Restart()
	srvs[1].Do(ctx, "SET", "dlock:{q}", "someone-else", "PX", 60000)
	_, err = acquireFor(ctx, holdable{c: c, name: "q"}, 0, names)
	if ce, ok := err.(*cliError); !ok || ce.code != exitNotAcquired {
		t.Errorf("acquireFor with one node held by another holder and one failing = %v, want exit %d", err, exitNotAcquired)
	}
}

// A fence that cannot be issued for the lock just acquired ends dlock run as
// a failed acquire would: 5 if the lease was lost, 130 if interrupted, 4 if
// Redis failed.
func TestFenceError(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	rdb := s.Client(t)
	c, err := dlock.New(rdb, dlock.WithAutoExtend(false))
	if err != nil {
		t.Fatal(err)
	}
	check := func(ctx context.Context, name string, before func(), want int) {
		t.Helper()
		l, err := c.TryAcquire(t.Context(), name)
		if err != nil {
			t.Fatal(err)
		}
		before()
		_, err = l.Fence(ctx)
		if ce, ok := fenceError(ctx, name, err, nil).(*cliError); !ok || ce.code != want {
			t.Errorf("fence of %q: %v, want exit %d", name, err, want)
		}
	}
	check(t.Context(), "gone", func() { rdb.Del(t.Context(), "dlock:{gone}") }, exitNotAcquired)
	ctx, cancel := context.WithCancel(t.Context())
	check(ctx, "interrupted", cancel, exitInterrupted)
	check(t.Context(), "down", s.Kill, exitRedis)
}

// An interrupted wait is no lock held by another holder: it exits 130 for a
// plain cancellation or SIGINT, 128+N for signal N.
func TestRunInterruptedWait(t *testing.T) {
	t.Parallel()
	leakcheck.Check(t) // labels the in-process runs' goroutines, for leakcheck.Count
	s := redistest.Start(t)
	rdb := s.Client(t)
	rdb.Set(t.Context(), "dlock:{busy}", "someone-else", time.Minute)
	args := []string{"run", "--redis", s.URL(), "busy", "--", "true"}

	check := func(t *testing.T, code int, errOut string, wantCode int, wantMsg string) {
		t.Helper()
		if code != wantCode {
			t.Errorf("exit %d, want %d; stderr %q", code, wantCode, errOut)
		}
		if strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, wantMsg) || strings.Contains(errOut, "held by another holder") {
			t.Errorf("stderr = %q, want one line saying %q", errOut, wantMsg)
		}
	}
	// inProcess runs dlock in this process and cancels its context with
	// cause once a goroutine of the run is in the function at (acquireFor:
	// waiting, or about to; connectVia: connecting).
	inProcess := func(t *testing.T, args []string, at string, cause error) (int, string) {
		t.Helper()
		ctx, cancel := context.WithCancelCause(context.Background())
		defer cancel(nil)
		var stdout, stderr bytes.Buffer
		done := make(chan int, 1)
		go func() { done <- run(ctx, args, &stdout, &stderr) }()
		if !eventually(20*time.Second, func() bool { return leakcheck.Count(t, at) > 0 }) {
			t.Fatalf("run not in %s within 20s", at)
		}
		cancel(cause)
		select {
		case code := <-done:
			return code, stderr.String()
		case <-time.After(20 * time.Second):
			t.Fatal("run still waiting 20s after its context was cancelled")
			return 0, ""
		}
	}
	t.Run("cancelled", func(t *testing.T) {
		code, errOut := inProcess(t, args, "cmd/dlock.acquireFor", nil)
		check(t, code, errOut, exitInterrupted, `interrupted while waiting for lock "busy"`)
	})
	t.Run("cancelled by SIGTERM", func(t *testing.T) {
		code, errOut := inProcess(t, args, "cmd/dlock.acquireFor", interruption{syscall.SIGTERM})
		check(t, code, errOut, 128+int(syscall.SIGTERM), `interrupted by SIGTERM while waiting for lock "busy"`)
	})
	t.Run("while connecting", func(t *testing.T) {
		frozen := redistest.Start(t)
		frozen.Pause() // PING hangs (for up to 5s) instead of failing
		code, errOut := inProcess(t, []string{"run", "--redis", frozen.URL(), "busy", "--", "true"}, "cmd/dlock.connectVia", interruption{syscall.SIGINT})
		check(t, code, errOut, exitInterrupted, "interrupted by SIGINT while connecting to Redis")
	})
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run(signalName(sig), func(t *testing.T) {
			before := clients(t, rdb)
			cmd := dlockCmd(t, nil, args...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			// Once dlock has connected (or is connecting), it handles the
			// signal; either way it was interrupted.
			if !eventually(20*time.Second, func() bool { return clients(t, rdb) > before }) {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatal("dlock did not connect to Redis within 20s")
			}
			cmd.Process.Signal(sig)
			if !waitExit(cmd, 20*time.Second) {
				t.Fatalf("dlock run still waiting 20s after %v", sig)
			}
			check(t, cmd.ProcessState.ExitCode(), stderr.String(), 128+int(sig), "interrupted by "+signalName(sig))
		})
	}
}

// clients counts the connections to the Redis of rdb.
func clients(t *testing.T, rdb *redis.Client) int {
	list, err := rdb.ClientList(t.Context()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(list, "\n")
}

// --wait reads a duration or "forever", and says "forever" for its
// default rather than a negative duration.
func TestWaitFlag(t *testing.T) {
	t.Parallel()
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	w := waitFlag(fs)
	if got := fs.Lookup("wait").DefValue; got != "forever" || *w >= 0 {
		t.Errorf("default --wait = %q (%v), want forever (negative)", got, *w)
	}
	for in, want := range map[string]time.Duration{"30s": 30 * time.Second, "0": 0, "forever": -1, "-1s": -time.Second} {
		if err := fs.Set("wait", in); err != nil || *w != want {
			t.Errorf("--wait %s = %v, %v, want %v", in, *w, err, want)
		}
	}
	if err := fs.Set("wait", "soon"); err == nil {
		t.Error("--wait soon accepted, want an error")
	}
}

// A Redis URL that does not parse is reported with the shape it should
// have, and without the password it may hold.
func TestBadRedisURL(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{"127.0.0.1:7777", "u:secret@127.0.0.1:7777", "redis//:secret@host"} {
		_, err := connect(t.Context(), raw)
		if err == nil {
			t.Fatalf("connect(%q) = nil error", raw)
		}
		msg := err.Error()
		if strings.Contains(msg, "secret") || !strings.Contains(msg, "redis://") {
			t.Errorf("connect(%q) = %q: want the URL's expected shape, and no password", raw, msg)
		}
	}
	if got := redact("redis://u:secret@host:6379/0"); strings.Contains(got, "secret") {
		t.Errorf("redact = %q, shows the password", got)
	}
}

// The CLI reaches a Sentinel-managed master (redis+sentinel://…
// ?master_name=NAME) and a Cluster (redis+cluster://), takes the password
// from REDIS_PASSWORD_FILE, and refuses a Sentinel URL without a master
// name or an unknown scheme with the shapes it takes.
func TestSentinelAndClusterURLs(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds a Sentinel and a Cluster")
	}
	t.Run("sentinel", func(t *testing.T) {
		t.Parallel()
		master := redistest.Start(t, redistest.TCP())
		if _, err := master.Do(t.Context(), "CONFIG", "SET", "requirepass", "s3cret"); err != nil {
			t.Fatal(err)
		}
		pwFile := filepath.Join(t.TempDir(), "pw")
		os.WriteFile(pwFile, []byte("s3cret\n"), 0o600)
		sentinel := redistest.Start(t, redistest.Sentinel("dlockmaster", master.Port(), 1, 5*time.Second, 10*time.Second))
		sentinel.Do(t.Context(), "SENTINEL", "SET", "dlockmaster", "auth-pass", "s3cret")
		for _, url := range []string{
			"redis+sentinel://" + sentinel.Addr() + "?master_name=dlockmaster",
			"redis://" + sentinel.Addr() + "?master_name=dlockmaster",
		} {
			checkURL(t, []string{"REDIS_URL=" + url, "REDIS_PASSWORD_FILE=" + pwFile}, url)
		}
		for _, url := range []string{"redis+sentinel://" + sentinel.Addr(), "redis+bogus://127.0.0.1:1"} {
			code, _, errOut := result(t, dlockCmd(t, []string{"REDIS_URL=" + url}, "inspect", "a"))
			if code != exitConfig || !strings.Contains(errOut, "redis+sentinel://") {
				t.Errorf("dlock inspect over %s: exit %d, stderr %q; want %d and the URL shapes", url, code, errOut, exitConfig)
			}
		}
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		cluster := redistest.StartCluster(t, 3, 0)
		var more []string
		for _, n := range cluster[1:] {
			more = append(more, "addr="+n.Addr())
		}
		url := "redis+cluster://" + cluster[0].Addr() + "?" + strings.Join(more, "&")
		checkURL(t, []string{"REDIS_URL=" + url}, url)
	})
}

// checkURL checks that dlock run, inspect and watch work over url (env
// names it): runs of names in several slots, each given a fence.
func checkURL(t *testing.T, env []string, url string) {
	t.Helper()
	for _, name := range []string{"a", "b", "c", "d"} { // names in several slots
		code, out, errOut := result(t, dlockCmd(t, env, "run", "--wait", "0", name, "--", "sh", "-c", "echo $DLOCK_FENCE"))
		if code != 0 || strings.TrimSpace(out) == "" {
			t.Fatalf("dlock run %s over %s: exit %d, stdout %q, stderr %q", name, url, code, out, errOut)
		}
	}
	if code, out, errOut := result(t, dlockCmd(t, env, "inspect", "--json", "a")); code != 0 || !strings.Contains(out, `"held":false`) {
		t.Errorf("dlock inspect over %s: exit %d, %q %q", url, code, out, errOut)
	}
	watchSeesRun(t, env, url)
}

// dlock run -n N runs at most N commands at once: seven runs of a command
// that counts the commands running (files in a directory), with -n 3,
// never see more than 3 and do see 3; all succeed, and the semaphore is
// empty afterwards.
func TestRunSemaphoreRunsAtMostN(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	rdb := s.Client(t)
	ctx := t.Context()
	dir := t.TempDir()
	const permits, runs = 3, 7
	env := childEnv("counted", "REDIS_URL="+s.URL(), "DIR="+dir, "N="+strconv.Itoa(permits), "SLEEP=3s")
	type res struct {
		code        int
		out, stderr string
	}
	results := make(chan res, runs)
	for range runs {
		cmd := dlockCmd(t, env, "run", "-n", strconv.Itoa(permits), "--wait", "30s", "pool", "--", os.Args[0], childArg)
		go func() {
			code, out, e := result(t, cmd)
			results <- res{code, out, e}
		}()
	}
	most := 0
	for range runs {
		r := <-results
		if r.code != 0 {
			t.Errorf("dlock run -n %d: exit %d, want 0 (stdout %q, stderr %q)", permits, r.code, r.out, r.stderr)
		}
		var seen int
		fmt.Sscanf(r.out, "seen=%d", &seen)
		most = max(most, seen)
	}
	if most != permits {
		t.Errorf("at most %d commands seen running at once, want %d (the semaphore's N)", most, permits)
	}
	if n := rdb.Exists(ctx, "dlock:{pool}", "dlock:{pool}:q", "dlock:{pool}:qw").Val(); n != 0 {
		t.Errorf("%d semaphore or queue keys left after every run ended", n)
	}
}

// With every permit of a semaphore held, dlock run -n --wait 0 exits 5,
// naming the semaphore; -n below 1, -n over a quorum, and a name held as
// the other kind are refused.
func TestRunSemaphoreRefusals(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	rdb := s.Client(t)
	ctx := t.Context()
	env := childEnv("env", "REDIS_URL="+s.URL())
	sem := semaphore(t, rdb, "pool", 2)
	for range 2 {
		l, err := sem.TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(ctx)
	}
	code, out, errOut := result(t, dlockCmd(t, env, "inspect", "--json", "pool"))
	var in infoJSON
	if err := json.Unmarshal([]byte(out), &in); code != 0 || err != nil || in.Type != "zset" || len(in.Permits) != 2 {
		t.Errorf("inspect --json of a semaphore with 2 permits held = %d, %q, %q", code, out, errOut)
	}
	code, _, errOut = result(t, dlockCmd(t, env, "run", "-n", "2", "--wait", "0", "pool", "--", os.Args[0], childArg))
	if code != exitNotAcquired || !strings.Contains(errOut, `all 2 permits of semaphore "pool" are held`) {
		t.Errorf("dlock run -n 2 --wait 0 with both permits held: exit %d, stderr %q; want %d naming the semaphore", code, errOut, exitNotAcquired)
	}
	// The same name as a lock, and a lock's name as a semaphore.
	code, _, errOut = result(t, dlockCmd(t, env, "run", "--wait", "0", "pool", "--", os.Args[0], childArg))
	if code != exitConfig || !strings.Contains(errOut, "not a semaphore") && !strings.Contains(errOut, "another type") {
		t.Errorf("dlock run (a lock) on a semaphore's name: exit %d, stderr %q; want %d", code, errOut, exitConfig)
	}
	rdb.Set(ctx, "dlock:{plain}", "someone-else", time.Minute)
	code, _, errOut = result(t, dlockCmd(t, env, "run", "-n", "2", "plain", "--", os.Args[0], childArg))
	if code != exitConfig || !strings.Contains(errOut, "not a semaphore") {
		t.Errorf("dlock run -n 2 on a lock's name: exit %d, stderr %q; want %d", code, errOut, exitConfig)
	}

	_, args := quorumArgs(t, 3)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "-n", "0", "x", "--", "true"}, "-n 0: must be at least 1"},
		{[]string{"run", "-n", "-2", "x", "--", "true"}, "-n -2: must be at least 1"},
		{append(append([]string{"run"}, args...), "-n", "2", "x", "--", "true"), "not available over a quorum"},
	} {
		code, _, errOut := result(t, dlockCmd(t, env, tc.args...))
		if code != exitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("dlock %q: exit %d, stderr %q; want %d, %q", tc.args, code, errOut, exitUsage, tc.want)
		}
	}
}

// With --max-hold, the command is terminated as on a lost lock (SIGTERM,
// then SIGKILL after --grace for one that ignores it) when the lock
// reaches its max hold, dlock says why and exits 6, and the lock is
// released (when the command exits, or a tenth of the TTL later): a
// waiting dlock run takes it at once.
func TestRunMaxHold(t *testing.T) {
	// Serial: a 600ms lease, which a loaded machine can fail to extend.
	for _, mode := range []string{"polite", "stubborn"} {
		t.Run(mode, func(t *testing.T) {
			s := redistest.Start(t)
			rdb := s.Client(t)
			mark := filepath.Join(t.TempDir(), "mark")
			cmd := dlockCmd(t, childEnv(mode, "REDIS_URL="+s.URL(), "MARK="+mark),
				"run", "--ttl", "600ms", "--max-hold", "1500ms", "--grace", "300ms", "capped", "--", "sh", "-c", shChild[mode])
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			start := time.Now()
			startUntilChildRuns(t, cmd)
			// A second run waits for the lock; it must get it once the
			// first reaches its max hold, long before the first's child
			// would have ended by itself (a minute).
			waiter := dlockCmd(t, childEnv("env", "REDIS_URL="+s.URL()), "run", "--wait", "30s", "capped", "--", os.Args[0], childArg)
			waited := make(chan int, 1)
			go func() {
				code, _, _ := result(t, waiter)
				waited <- code
			}()
			if !waitExit(cmd, 20*time.Second) {
				t.Fatal("dlock run --max-hold 1500ms still running 20s on")
			}
			if code := cmd.ProcessState.ExitCode(); code != exitLost {
				t.Errorf("exit = %d, want %d; stderr %q", code, exitLost, stderr.String())
			}
			if !strings.Contains(stderr.String(), "max hold") {
				t.Errorf("stderr %q does not say the max hold was reached", stderr.String())
			}
			if held := time.Since(start); held < 1500*time.Millisecond {
				t.Errorf("the command was ended %v after dlock run started, before its max hold", held)
			}
			if b, _ := os.ReadFile(mark); mode == "polite" && string(b) != "terminated" {
				t.Errorf("the polite child did not get SIGTERM (mark %q)", b)
			}
			select {
			case code := <-waited:
				if code != 7 {
					t.Errorf("the waiting dlock run exited %d, want its child's 7", code)
				}
			case <-time.After(20 * time.Second):
				t.Error("the waiting dlock run did not get the lock within 20s of the max hold")
			}
			if lockHeld(rdb, "dlock:{capped}") {
				t.Error("lock still held after both runs")
			}
		})
	}
}

// --max-hold D gives the command the whole of D: it gets SIGTERM once the
// lock has been held for D, not a tenth of the TTL before (with the
// default TTL of 10s, --max-hold 2s terminated it at 1s), and the lock is
// held until then (3s here). A max hold within a tenth of the TTL was
// refused; it works too (1.8s of a 20s TTL here: a shorter one can end
// before a loaded machine has started the child). One below the shortest
// lease is refused with a message that names the flag and what to pass
// instead.
func TestRunMaxHoldGivesTheWholeHold(t *testing.T) {
	// Serial: times the SIGTERM against the max hold on the wall clock.
	s := redistest.Start(t)
	rdb := s.Client(t)
	for _, tc := range []struct{ d, ttl time.Duration }{{3 * time.Second, 10 * time.Second}, {1800 * time.Millisecond, 20 * time.Second}} {
		d := tc.d
		mark := filepath.Join(t.TempDir(), "mark")
		cmd := dlockCmd(t, []string{"REDIS_URL=" + s.URL(), "MARK=" + mark},
			"run", "--ttl", tc.ttl.String(), "--max-hold", d.String(), "--grace", "5s", "whole", "--", "sh", "-c", shChild["polite"])
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		start := time.Now() // before the lock is taken: its hold ends D after a later moment
		startUntilChildRuns(t, cmd)
		if early := d - 200*time.Millisecond; early > 0 {
			time.Sleep(early - time.Since(start))
			if _, err := os.Stat(mark); err == nil {
				t.Errorf("--max-hold %v: the command was terminated before %v", d, early)
			}
			if !lockHeld(rdb, "dlock:{whole}") {
				t.Errorf("--max-hold %v: the lock is not held %v after dlock run started", d, early)
			}
		}
		if !waitExit(cmd, 20*time.Second) {
			t.Fatalf("dlock run --max-hold %v still running 20s on", d)
		}
		took := time.Since(start)
		if code := cmd.ProcessState.ExitCode(); code != exitLost || !strings.Contains(stderr.String(), "max hold") {
			t.Errorf("--max-hold %v: exit %d, stderr %q; want %d and the max hold named", d, code, stderr.String(), exitLost)
		}
		if b, _ := os.ReadFile(mark); string(b) != "terminated" {
			t.Errorf("--max-hold %v: the command did not get SIGTERM (mark %q)", d, b)
		}
		if took < d {
			t.Errorf("--max-hold %v: the command was terminated %v after dlock run started", d, took.Round(time.Millisecond))
		}
		if lockHeld(rdb, "dlock:{whole}") {
			t.Errorf("--max-hold %v: lock still held after dlock run exited", d)
		}
	}
	code, _, errOut := result(t, dlockCmd(t, []string{"REDIS_URL=" + s.URL()}, "run", "--max-hold", "10ms", "x", "--", "true"))
	if want := "dlock run: --max-hold 10ms: must be 0 (no limit) or at least 30ms\n"; code != exitUsage || errOut != want {
		t.Errorf("dlock run --max-hold 10ms: exit %d, stderr %q; want %d, %q", code, errOut, exitUsage, want)
	}
}

// A --max-hold up to the longest duration runs the command: the guardian's
// margin that the lease keeps past it does not overflow into a negative max
// hold, which the library refused with a message naming neither the flag nor
// the value given.
func TestRunLongestMaxHoldRunsTheCommand(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	for _, d := range []string{"2562047h47m16s", "2562047h47m14s"} {
		code, _, errOut := result(t, dlockCmd(t, []string{"REDIS_URL=" + s.URL()}, "run", "--max-hold", d, "longest", "--", "true"))
		if code != exitOK {
			t.Errorf("dlock run --max-hold %s: exit %d, stderr %q; want %d", d, code, errOut, exitOK)
		}
	}
}

// dlock inspect shows the holder metadata, the default hostname:pid of
// the dlock that holds the lock or the one --meta sets, in text and JSON;
// a run that finds the lock held names the holder by it.
func TestInspectShowsHolderMeta(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	env := []string{"REDIS_URL=" + s.URL()}
	host, _ := os.Hostname()
	for _, tc := range []struct {
		flags []string
		want  func(pid int) string
	}{
		{nil, func(pid int) string { return host + ":" + strconv.Itoa(pid) }},
		{[]string{"--meta", "nightly report #7"}, func(int) string { return "nightly report #7" }},
	} {
		args := append(append([]string{"run"}, tc.flags...), "meta", "--", os.Args[0], childArg)
		cmd := dlockCmd(t, childEnv("polite", env...), args...)
		startUntilChildRuns(t, cmd)
		want := tc.want(cmd.Process.Pid)

		code, out, errOut := result(t, dlockCmd(t, env, "inspect", "--json", "meta"))
		var in infoJSON
		if err := json.Unmarshal([]byte(out), &in); code != 0 || err != nil || in.Meta != want || !strings.Contains(in.Token, ".") {
			t.Errorf("inspect --json = %d, %q (stderr %q); want meta %q", code, out, errOut, want)
		}
		code, out, _ = result(t, dlockCmd(t, env, "inspect", "meta"))
		if code != 0 || !strings.Contains(out, "META") || !strings.Contains(out, metaColumn(want)) {
			t.Errorf("inspect = %d, %q; want a META column showing %s", code, out, metaColumn(want))
		}
		code, _, errOut = result(t, dlockCmd(t, env, "run", "--wait", "0", "meta", "--", "true"))
		if code != exitNotAcquired || !strings.Contains(errOut, strconv.Quote(want)) {
			t.Errorf("run --wait 0 on the held lock = %d, %q; want %d naming the holder %q", code, errOut, exitNotAcquired, want)
		}
		cmd.Process.Signal(syscall.SIGTERM) // forwarded: the child exits 0
		if !waitExit(cmd, 20*time.Second) {
			t.Fatal("dlock run did not end 20s after SIGTERM")
		}
	}
}

// dlock run --read shares NAME with other readers (the child, which exits
// 7, runs), --write has it alone; a
// hold it may not have now is exit 5 with --wait 0; both flags at once, or
// with -n, is a usage error; a name held as a lock is exit 3.
func TestRunReadWrite(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	ctx := t.Context()
	env := childEnv("env", "REDIS_URL="+s.URL())
	c, err := dlock.New(s.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	rw, err := c.RWMutex("doc")
	if err != nil {
		t.Fatal(err)
	}
	r, err := rw.Reader().TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (int, string) {
		code, _, errOut := result(t, dlockCmd(t, env, append(append([]string{"run"}, args...), "doc", "--", os.Args[0], childArg)...))
		return code, errOut
	}
	if code, errOut := run("--read", "--wait", "0"); code != 7 {
		t.Errorf("dlock run --read beside a read: exit %d (%q), want 7 (the child's)", code, errOut)
	}
	if code, errOut := run("--write", "--wait", "0"); code != exitNotAcquired || !strings.Contains(errOut, `read-write lock "doc" is held`) {
		t.Errorf("dlock run --write beside a read: exit %d (%q), want %d", code, errOut, exitNotAcquired)
	}
	r.Release(ctx)
	w, err := rw.Writer().TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if code, errOut := run("--read", "--wait", "0"); code != exitNotAcquired || !strings.Contains(errOut, "held by a writer") {
		t.Errorf("dlock run --read beside a write: exit %d (%q), want %d", code, errOut, exitNotAcquired)
	}
	w.Release(ctx)
	if code, errOut := run("--write", "--wait", "5s"); code != 7 {
		t.Errorf("dlock run --write on a free name: exit %d (%q), want 7 (the child's)", code, errOut)
	}
	for _, args := range [][]string{{"--read", "--write"}, {"--read", "-n", "2"}} {
		if code, _ := run(args...); code != exitUsage {
			t.Errorf("dlock run %v: exit %d, want %d", args, code, exitUsage)
		}
	}
	l, err := c.TryAcquire(ctx, "doc")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if code, errOut := run("--read", "--wait", "0"); code != exitConfig {
		t.Errorf("dlock run --read on a name held as a lock: exit %d (%q), want %d", code, errOut, exitConfig)
	}
}

// watchSeesRun checks that dlock watch over url (env names it) shows a
// lock that a dlock run holds, with the run's metadata.
func watchSeesRun(t *testing.T, env []string, url string) {
	t.Helper()
	holder := dlockCmd(t, childEnv("polite", env...), "run", "--meta", "watched", "w", "--", os.Args[0], childArg)
	startUntilChildRuns(t, holder)
	code, out, errOut := result(t, dlockCmd(t, env, "watch", "--count", "2", "--interval", "100ms", "--json", "w"))
	holder.Process.Signal(syscall.SIGTERM) // forwarded: the child exits 0
	if !waitExit(holder, 20*time.Second) {
		t.Error("dlock run did not end 20s after SIGTERM")
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != exitOK || len(lines) != 2 {
		t.Errorf("dlock watch over %s: exit %d, stdout %q, stderr %q; want 2 refreshes", url, code, out, errOut)
		return
	}
	for _, line := range lines {
		var r watchRefresh
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("refresh %q: %v", line, err)
		}
		if l := r.lock("w"); l == nil || !l.Held || l.Meta != "watched" {
			t.Errorf("dlock watch over %s: refresh %q, want w held with metadata watched", url, line)
		}
	}
}

// With --max-hold D, the command gets SIGTERM at D and SIGKILL only after
// --grace; one that ignores SIGTERM keeps running past D + ttl/10, and the
// lock stays held until it has exited: a second dlock run does not take the
// lock and run its own command beside it.
func TestRunMaxHoldKeepsLockUntilCommandExits(t *testing.T) {
	// Serial: the command must start within its 2s max hold.
	s := redistest.Start(t)
	rdb := s.Client(t)
	a := dlockCmd(t, []string{"REDIS_URL=" + s.URL()},
		"run", "--ttl", "2s", "--max-hold", "2s", "--grace", "4s", "capped-stubborn", "--", "sh", "-c", shChild["stubborn"])
	var aErr bytes.Buffer
	a.Stderr = &aErr
	start := time.Now()
	startUntilChildRuns(t, a)
	exited := make(chan struct{})
	go func() { a.Wait(); close(exited) }()
	defer func() {
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			a.Process.Kill()
			<-exited
		}
	}()
	// The lease ends at 2.2s at the latest; the stubborn command is killed
	// only at 2s + 4s. (A max hold long enough for dlock's guardian and the
	// command to start on a loaded machine: at 1s it was sometimes stopped
	// first.)
	time.Sleep(time.Until(start.Add(3500 * time.Millisecond)))
	if lockHeld(rdb, "dlock:{capped-stubborn}") {
		t.Log("lock still held at 3.5s")
	}
	code, _, errOut := result(t, dlockCmd(t, []string{"REDIS_URL=" + s.URL()}, "run", "--wait", "0", "capped-stubborn", "--", "true"))
	running := true
	select {
	case <-exited:
		running = false
	default:
	}
	if code == 0 && running {
		t.Errorf("a second dlock run took the lock and ran its command %v after the first started, while the first's command (SIGTERM at its 2s max hold, SIGKILL only after --grace 4s) still ran: two commands under one lock (second's stderr %q)",
			time.Since(start).Round(time.Millisecond), errOut)
	}
}

// blipper forwards a loopback port to a server; down closes the listener
// and every connection (dials are refused), up listens again on the port.
type blipper struct {
	t      *testing.T
	addr   string
	target string
	mu     sync.Mutex
	ln     net.Listener
	conns  []net.Conn
}

func newBlipper(t *testing.T, target string) *blipper {
	b := &blipper{t: t, target: target}
	ln, err := redisserver.Listen() // (a port no other server of this process is given while it is down)
	if err != nil {
		t.Fatal(err)
	}
	b.addr = ln.Addr().String()
	b.serve(ln)
	t.Cleanup(b.down)
	return b
}

func (b *blipper) serve(ln net.Listener) {
	b.mu.Lock()
	b.ln = ln
	b.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", b.target)
			if err != nil {
				c.Close()
				continue
			}
			b.mu.Lock()
			b.conns = append(b.conns, c, s)
			b.mu.Unlock()
			go func() { io.Copy(s, c); s.Close() }()
			go func() { io.Copy(c, s); c.Close() }()
		}
	}()
}

func (b *blipper) down() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ln != nil {
		b.ln.Close()
		b.ln = nil
	}
	for _, c := range b.conns {
		c.Close()
	}
	b.conns = nil
}

func (b *blipper) up() {
	ln, err := net.Listen("tcp", b.addr)
	if err != nil {
		b.t.Fatal(err)
	}
	b.serve(ln)
}

// A single Redis that refuses dials for 2s (a restart, a blip) just as dlock
// run's command exits: the release is retried past the blip and the lock is
// free once dlock has exited. (Behind the dial gate, a refused dial fails
// every dial for the next second at once; the release must still outlast a
// blip of 2s. DLOCK_TEST_BLIP sets another blip; from about 2.5s the
// release, one call bounded by go-redis's retries, gives up.)
func TestRunReleasesAfterRedisBlip(t *testing.T) {
	// Serial: a 2s refused-dial window against go-redis's retry budget.
	blip, _ := time.ParseDuration(os.Getenv("DLOCK_TEST_BLIP"))
	if blip == 0 {
		blip = 2 * time.Second
	}
	s := redistest.Start(t, redistest.TCP())
	rdb := s.Client(t)
	b := newBlipper(t, s.Addr())
	mark := t.TempDir() + "/mark"
	cmd := dlockCmd(t, childEnv("polite", "REDIS_URL=redis://"+b.addr, "MARK="+mark),
		"run", "--ttl", "6s", "blip", "--", os.Args[0], childArg)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	startUntilChildRuns(t, cmd)
	// A blip of 300ms as the command ends: the release's first dial is
	// refused; go-redis dials again (5 dials 100ms apart per attempt, 4
	// attempts), which outlasts the blip, but behind the gate every later
	// dial fails at once.
	b.down()
	cmd.Process.Signal(syscall.SIGTERM) // the command exits at once; dlock releases
	time.Sleep(blip)
	b.up()
	if !waitExit(cmd, 20*time.Second) {
		t.Fatal("dlock run still running 20s after SIGTERM")
	}
	t.Logf("exit %d, stderr %q", cmd.ProcessState.ExitCode(), stderr.String())
	if lockHeld(rdb, "dlock:{blip}") {
		t.Errorf("the lock is still held after dlock run exited (Redis up again since before the release); exit %d, stderr %q",
			cmd.ProcessState.ExitCode(), strings.TrimSpace(stderr.String()))
	}
}
