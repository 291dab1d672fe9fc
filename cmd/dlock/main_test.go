package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/redistest"
)

// childArg makes the test binary act as the command run under the lock, in
// the mode $DLOCK_TEST_CHILD.
const childArg = "dlock-test-child"

// The test binary doubles as the dlock binary (DLOCK_TEST_MAIN=1, or the
// demo's scheduler command, or the guardian of dlock run, which the
// in-process run also starts) and as the command run under the lock
// (childArg; it inherits dlock's environment).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == childArg {
		os.Exit(child(os.Getenv("DLOCK_TEST_CHILD")))
	}
	if os.Getenv("DLOCK_TEST_MAIN") == "1" || (len(os.Args) > 1 && (os.Args[1] == demoSchedulerCmd || os.Args[1] == runGuardianCmd)) {
		main()
	}
	redis.SetLogger(quietLogger{})
	// The parallel tests mostly wait on processes and servers, not on the
	// CPU: run four at a time unless -parallel says otherwise.
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		flag.Set("test.parallel", "4")
	}
	os.Exit(m.Run())
}

// child is a command run under `dlock run`. Modes:
//
//	env:        print the DLOCK_ variables and exit 7
//	exclusive:  fail (exit 9) if the file $MARK exists, else create it,
//	            sleep $SLEEP, remove it
//	stubborn:   print "started", ignore SIGTERM, sleep a minute
//	polite:     print "started", exit 0 on SIGTERM, else sleep a minute
//	counted:    create a file of its own in $DIR, print "seen=K" with K the
//	            files there (the commands running), sleep $SLEEP, count
//	            again, remove its file; fail (exit 9) if K ever exceeds $N
func child(mode string) int {
	switch mode {
	case "counted":
		return countedChild()
	case "env":
		for _, k := range []string{"DLOCK_NAME", "DLOCK_KEY", "DLOCK_TOKEN", "DLOCK_FENCE"} {
			fmt.Printf("%s=%s\n", k, os.Getenv(k))
		}
		return 7
	case "exclusive":
		mark := os.Getenv("MARK")
		f, err := os.OpenFile(mark, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err != nil {
			fmt.Fprintln(os.Stderr, "another holder is inside:", err)
			return 9
		}
		f.Close()
		d, _ := time.ParseDuration(os.Getenv("SLEEP"))
		time.Sleep(d)
		os.Remove(mark)
		return 0
	case "stubborn":
		signal.Ignore(syscall.SIGTERM)
		fmt.Println("started")
		time.Sleep(time.Minute)
		return 0
	case "polite":
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM)
		fmt.Println("started")
		select {
		case <-sig:
			if mark := os.Getenv("MARK"); mark != "" {
				os.WriteFile(mark, []byte("terminated"), 0o600)
			}
			return 0
		case <-time.After(time.Minute):
			return 1
		}
	}
	return 100
}

// countedChild is the child mode "counted".
func countedChild() int {
	dir, limit := os.Getenv("DIR"), os.Getenv("N")
	mine := filepath.Join(dir, strconv.Itoa(os.Getpid()))
	if err := os.WriteFile(mine, nil, 0o600); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.Remove(mine)
	n, _ := strconv.Atoi(limit)
	seen := 0
	count := func() {
		entries, _ := os.ReadDir(dir)
		seen = max(seen, len(entries))
	}
	// Stay until N commands were seen at once, or for SLEEP at most: on a
	// loaded machine the commands let in together can take a while to start.
	d, _ := time.ParseDuration(os.Getenv("SLEEP"))
	for end := time.Now().Add(d); ; time.Sleep(10 * time.Millisecond) {
		if count(); seen >= n || time.Now().After(end) {
			break
		}
	}
	time.Sleep(50 * time.Millisecond) // let one more in, if the semaphore would
	count()
	fmt.Printf("seen=%d\n", seen)
	if seen > n {
		fmt.Fprintf(os.Stderr, "%d commands running at once, want at most %d\n", seen, n)
		return 9
	}
	return 0
}

// dlockCmd returns the dlock binary (this test binary) run with args. The
// race detector's runtime would sleep a second as each such process exits
// with goroutines left (a connection pool's): GORACE turns that off, which
// roughly quarters the time of a test that runs a dozen of them; races are
// still reported as they happen.
func dlockCmd(t *testing.T, env []string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	gorace := "GORACE=" + strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0")
	cmd.Env = append(append(os.Environ(), "DLOCK_TEST_MAIN=1", gorace), env...)
	return cmd
}

// startUntilChildRuns starts a `dlock run` whose child says "started" on
// stdout when it runs, and returns once it has said so.
func startUntilChildRuns(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line := make([]byte, 8)
	if n, _ := stdout.Read(line); string(line[:n]) != "started\n" {
		cmd.Process.Kill()
		cmd.Wait()
		var errOut string
		if b, ok := cmd.Stderr.(*bytes.Buffer); ok {
			errOut = b.String()
		}
		t.Fatalf("child said %q, want started; dlock: %v, stderr %q", line[:n], cmd.ProcessState, errOut)
	}
}

// result runs cmd to completion (bounded) and returns its exit code and output.
func result(t *testing.T, cmd *exec.Cmd) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if !waitExit(cmd, 2*time.Minute, syscall.SIGQUIT) {
		t.Fatalf("%v still running after 2 minutes; its goroutines then (SIGQUIT) and output:\nstdout:\n%s\nstderr:\n%s",
			cmd.Args, lastLines(stdout.String()), lastLines(stderr.String()))
	}
	return cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()
}

// waitExit waits up to d for a started cmd to exit. If it has not, it sends
// the process first (a SIGQUIT makes a Go program print its goroutines and
// exit), kills the process and its process group, reaps it and returns
// false.
func waitExit(cmd *exec.Cmd, d time.Duration, first ...syscall.Signal) bool {
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
		return true
	case <-time.After(d):
		for _, sig := range first {
			cmd.Process.Signal(sig)
			select {
			case <-done:
				return false
			case <-time.After(5 * time.Second):
			}
		}
		cmd.Process.Kill()
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		return false
	}
}

// lastLines returns the last 200 lines of out.
func lastLines(out string) string {
	lines := strings.Split(out, "\n")
	return strings.Join(lines[max(0, len(lines)-200):], "\n")
}

// lockHeld reports whether the plain lock at key holds a lease: a released
// lock leaves a tombstone ("~…") for a while, which is free.
func lockHeld(rdb *redis.Client, key string) bool {
	v, err := rdb.Get(context.Background(), key).Result()
	return err == nil && !strings.HasPrefix(v, "~")
}

func childEnv(mode string, extra ...string) []string {
	return append([]string{"DLOCK_TEST_CHILD=" + mode}, extra...)
}

// semaphore returns the semaphore name of n permits over rdb, for a
// Client made with opts.
func semaphore(t *testing.T, rdb *redis.Client, name string, n int, opts ...dlock.Option) *dlock.Semaphore {
	t.Helper()
	c, err := dlock.New(rdb, opts...)
	if err != nil {
		t.Fatal(err)
	}
	sem, err := c.Semaphore(name, n)
	if err != nil {
		t.Fatal(err)
	}
	return sem
}

// acquireToken runs dlock acquire with args and returns the token it
// printed, failing the test unless it exited 0.
func acquireToken(t *testing.T, env []string, args ...string) string {
	t.Helper()
	code, out, errOut := result(t, dlockCmd(t, env, append([]string{"acquire"}, args...)...))
	if code != exitOK {
		t.Fatalf("dlock acquire %q: exit %d, stdout %q, stderr %q", args, code, out, errOut)
	}
	return strings.TrimSpace(out)
}

func TestRunPassesEnvAndExitStatus(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	rdb := s.Client(t)
	// A counter ahead of the server's clock (fences are floored by it in
	// µs): the fence must still rise above it.
	const last = 1 << 52
	rdb.Set(t.Context(), "dlock:{jobs}:fence", last, time.Minute)
	code, out, errOut := result(t, dlockCmd(t, childEnv("env", "REDIS_URL="+s.URL()), "run", "--ttl", "5s", "jobs", "--", os.Args[0], childArg))
	if code != 7 {
		t.Fatalf("dlock run exit = %d, want the child's 7 (stderr %q)", code, errOut)
	}
	for _, want := range []string{"DLOCK_NAME=jobs\n", "DLOCK_KEY=dlock:{jobs}\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("child output %q lacks %q", out, want)
		}
	}
	m := regexp.MustCompile(`DLOCK_FENCE=(\d+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("child output %q has no fence", out)
	}
	if fence, _ := strconv.ParseInt(m[1], 10, 64); fence <= last {
		t.Errorf("DLOCK_FENCE=%s, want above the counter's %d", m[1], last)
	}
	// The counter keeps the fence for a minute after it was issued.
	if v, ttl := rdb.Get(t.Context(), "dlock:{jobs}:fence").Val(), rdb.PTTL(t.Context(), "dlock:{jobs}:fence").Val(); v != m[1] || ttl <= 0 || ttl > time.Minute {
		t.Errorf("fence counter = %q, TTL %v; want %s, at most a minute", v, ttl, m[1])
	}
	if m := regexp.MustCompile(`DLOCK_TOKEN=(\S{22,})`).FindStringSubmatch(out); m == nil {
		t.Errorf("child output %q has no token", out)
	}
	if lockHeld(rdb, "dlock:{jobs}") {
		t.Errorf("lock still held after dlock run exited")
	}
	// Released, the lock is free to inspect, and shows the last fence.
	code, out, _ = result(t, dlockCmd(t, []string{"REDIS_URL=" + s.URL()}, "inspect", "--json", "jobs"))
	var in infoJSON
	if err := json.Unmarshal([]byte(out), &in); code != 0 || err != nil || in.Held || in.Type != "none" || strconv.FormatInt(in.Fence, 10) != m[1] {
		t.Errorf("inspect after dlock run = %d, %q; want free, fence %s", code, out, m[1])
	}
}

func TestRunContending(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	mark := filepath.Join(t.TempDir(), "inside")
	env := childEnv("exclusive", "REDIS_URL="+s.URL(), "MARK="+mark, "SLEEP=300ms")

	// Four runs at once, each waiting: they must take turns.
	var cmds []*exec.Cmd
	for range 4 {
		cmds = append(cmds, dlockCmd(t, env, "run", "--wait", "30s", "batch", "--", os.Args[0], childArg))
	}
	type res struct {
		code   int
		stderr string
	}
	results := make(chan res, len(cmds))
	for _, cmd := range cmds {
		go func() {
			code, _, e := result(t, cmd)
			results <- res{code, e}
		}()
	}
	for range cmds {
		if r := <-results; r.code != 0 {
			t.Errorf("contending dlock run exit = %d, want 0 (stderr %q)", r.code, r.stderr)
		}
	}

	// With --wait 0 against a holder: not acquired, its own exit code.
	rdb := s.Client(t)
	rdb.Set(t.Context(), "dlock:{batch}", "someone-else", time.Minute)
	code, _, errOut := result(t, dlockCmd(t, env, "run", "--wait", "0", "batch", "--", os.Args[0], childArg))
	if code != exitNotAcquired {
		t.Errorf("dlock run --wait 0 on a held lock: exit %d, want %d", code, exitNotAcquired)
	}
	if !strings.Contains(errOut, "held by another holder") || strings.Count(errOut, "\n") != 1 {
		t.Errorf("stderr = %q, want one line saying the lock is held", errOut)
	}
	code, _, _ = result(t, dlockCmd(t, env, "run", "--wait", "200ms", "batch", "--", os.Args[0], childArg))
	if code != exitNotAcquired {
		t.Errorf("dlock run --wait 200ms on a held lock: exit %d, want %d", code, exitNotAcquired)
	}
}

// When the lock is lost under it, the command is stopped: SIGTERM, then
// SIGKILL after the grace period for one that ignores SIGTERM.
func TestRunStopsChildWhenLockLost(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"polite", "stubborn"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			s := redistest.Start(t)
			rdb := s.Client(t)
			cmd := dlockCmd(t, childEnv(mode, "REDIS_URL="+s.URL()), "run", "--ttl", "600ms", "--grace", "300ms", "lost", "--", os.Args[0], childArg)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			startUntilChildRuns(t, cmd)
			rdb.Del(t.Context(), "dlock:{lost}") // someone else "steals" the lock
			if !waitExit(cmd, 20*time.Second) {
				t.Fatal("dlock run did not stop its child within 20s of losing the lock")
			}
			if code := cmd.ProcessState.ExitCode(); code != exitLost {
				t.Errorf("exit = %d, want %d (lock lost); stderr %q", code, exitLost, stderr.String())
			}
			if !strings.Contains(stderr.String(), "lost") {
				t.Errorf("stderr %q does not say the lock was lost", stderr.String())
			}
		})
	}
}

// dlock run over a quorum of three nodes, one of them down.
func TestRunQuorum(t *testing.T) {
	t.Parallel()
	var args []string
	var srvs []*redistest.Server
	for range 3 {
		s := redistest.Start(t, redistest.TCP())
		srvs = append(srvs, s)
		args = append(args, "--redis", s.URL())
	}
	srvs[2].Kill()
	code, out, errOut := result(t, dlockCmd(t, childEnv("env"), append(append([]string{"run"}, args...), "q", "--", os.Args[0], childArg)...))
	if code != 7 || !strings.Contains(out, "DLOCK_NAME=q") {
		t.Fatalf("dlock run over a quorum: exit %d (want 7), stdout %q, stderr %q", code, out, errOut)
	}
	for i, s := range srvs[:2] {
		if lockHeld(s.Client(t), "dlock:{q}") {
			t.Errorf("node %d still holds the lock after dlock run exited", i)
		}
	}
}

// A dead minority of a quorum costs the CLI one dial of each dead node, in
// parallel, not seconds. go-redis dials up to 5 times, 100ms apart, for
// each of a command's 4 attempts: with one node refusing connections, a
// dlock run or inspect took about 1.9s and a list 3.4s; with one whose
// dials time out (here after 300ms), 5s and 12s. Each command is timed
// against itself with every node up (the faster of two tries), with a
// generous bound: the dead node may cost its one dial timeout, no more.
func TestQuorumNodeDownCostsOneDial(t *testing.T) {
	// Serial: times each command against itself with every node up.
	srvs, args := quorumArgs(t, 3)
	up := args[len(args)-1]
	refused := srvs[2].URL() // once killed: nothing listens there
	unanswered := "redis://" + unansweredAddr(t) + "?dial_timeout=300ms"
	commands := [][]string{{"run", "q", "--", "true"}, {"inspect", "q"}, {"list"}}
	timed := func(third string, command []string) time.Duration {
		best := time.Duration(0)
		for range 2 {
			cmdArgs := append(append(append([]string{command[0]}, args[:len(args)-1]...), third), command[1:]...)
			start := time.Now() // dlockCmd turns off the race runtime's exit sleep
			code, _, errOut := result(t, dlockCmd(t, nil, cmdArgs...))
			took := time.Since(start)
			if code != 0 {
				t.Fatalf("dlock %q: exit %d, stderr %q", cmdArgs, code, errOut)
			}
			if best == 0 || took < best {
				best = took
			}
		}
		return best
	}
	base := make([]time.Duration, len(commands))
	for i, command := range commands {
		base[i] = timed(up, command)
	}
	srvs[2].Kill()
	for _, dead := range []struct {
		name, url string
		timeout   time.Duration
	}{{"refused", refused, 0}, {"unanswered", unanswered, 300 * time.Millisecond}} {
		for i, command := range commands {
			if extra := timed(dead.url, command) - base[i]; extra > dead.timeout+time.Second {
				t.Errorf("dlock %s with a node %s took %v more than with every node up, want at most its dial timeout (%v) and a second",
					command[0], dead.name, extra.Round(time.Millisecond), dead.timeout)
			}
		}
	}
}

// unansweredAddr returns the address of a TCP port whose dials time out:
// a listener with a backlog of 0, its queue filled by one connection, so
// that the kernel drops every further SYN, as for a host that is down.
func unansweredAddr(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if c2, err := net.DialTimeout("tcp", addr, 200*time.Millisecond); err == nil {
		c2.Close()
		t.Skip("the kernel accepted a connection past a full backlog: no unanswered port here")
	}
	return addr
}

// A child does not outlive a dlock that was killed: nobody would extend
// the lock any more.
func TestRunChildStoppedWhenDlockKilled(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	mark := filepath.Join(t.TempDir(), "terminated")
	cmd := dlockCmd(t, childEnv("polite", "REDIS_URL="+s.URL(), "MARK="+mark), "run", "orphan", "--", os.Args[0], childArg)
	startUntilChildRuns(t, cmd)
	cmd.Process.Kill()
	cmd.Wait()
	if !waitFile(mark, 10*time.Second) {
		t.Error("the child was not sent SIGTERM when dlock was killed")
	}
}

// SIGTERM to dlock reaches the command; dlock exits with its status and
// releases the lock.
func TestRunForwardsSignals(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	mark := filepath.Join(t.TempDir(), "terminated")
	cmd := dlockCmd(t, childEnv("polite", "REDIS_URL="+s.URL(), "MARK="+mark), "run", "sig", "--", os.Args[0], childArg)
	startUntilChildRuns(t, cmd)
	cmd.Process.Signal(syscall.SIGTERM)
	if !waitExit(cmd, 20*time.Second) {
		t.Fatal("dlock run still running 20s after SIGTERM")
	}
	if code := cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("exit = %d, want the command's 0", code)
	}
	if !waitFile(mark, time.Second) {
		t.Error("the command did not get the SIGTERM")
	}
	if lockHeld(s.Client(t), "dlock:{sig}") {
		t.Error("lock still held after dlock run exited")
	}
}

func waitFile(path string, d time.Duration) bool {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(path); err == nil {
			return true
		}
	}
	return false
}

func TestUsageAndConfigErrors(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	dead := "redis://127.0.0.1:1" // nothing listens on port 1
	tests := []struct {
		name string
		env  []string
		args []string
		want int
	}{
		{"no command", nil, nil, exitUsage},
		{"unknown command", nil, []string{"frobnicate"}, exitUsage},
		{"unknown flag", nil, []string{"run", "--frob", "x", "--", "true"}, exitUsage},
		{"missing --", []string{"REDIS_URL=" + s.URL()}, []string{"run", "x", "true"}, exitUsage},
		{"missing command", []string{"REDIS_URL=" + s.URL()}, []string{"run", "x", "--"}, exitUsage},
		{"bad ttl", []string{"REDIS_URL=" + s.URL()}, []string{"run", "--ttl", "-1s", "x", "--", "true"}, exitUsage},
		{"negative max hold", []string{"REDIS_URL=" + s.URL()}, []string{"run", "--max-hold", "-1s", "x", "--", "true"}, exitUsage},
		{"max hold below MinTTL", []string{"REDIS_URL=" + s.URL()}, []string{"run", "--max-hold", "10ms", "x", "--", "true"}, exitUsage},
		{"metadata with a newline", []string{"REDIS_URL=" + s.URL()}, []string{"run", "--meta", "a\nb", "x", "--", "true"}, exitUsage},
		{"metadata too long", []string{"REDIS_URL=" + s.URL()}, []string{"run", "--meta", strings.Repeat("m", 129), "x", "--", "true"}, exitUsage},
		{"no redis", []string{"REDIS_URL="}, []string{"run", "x", "--", "true"}, exitConfig},
		{"bad URL", nil, []string{"run", "--redis", "ftp://nope", "x", "--", "true"}, exitConfig},
		{"unreachable redis", nil, []string{"inspect", "--redis", dead, "x"}, exitRedis},
		{"command not found", []string{"REDIS_URL=" + s.URL()}, []string{"run", "x", "--", "/no/such/command"}, exitNotFound},
		{"release without --force", []string{"REDIS_URL=" + s.URL()}, []string{"release", "x"}, exitUsage},
		{"empty name", []string{"REDIS_URL=" + s.URL()}, []string{"inspect", ""}, exitUsage},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, _, errOut := result(t, dlockCmd(t, tt.env, tt.args...))
			if code != tt.want {
				t.Errorf("dlock %q: exit %d, want %d (stderr %q)", tt.args, code, tt.want, errOut)
			}
			if errOut == "" {
				t.Errorf("dlock %q: nothing on stderr", tt.args)
			}
			if strings.Contains(errOut, "panic") || strings.Contains(errOut, "goroutine ") {
				t.Errorf("dlock %q: stderr %q", tt.args, errOut)
			}
		})
	}
	// A bad --ttl is reported in the flag's own name, before Redis is
	// reached (the URL is dead), as a usage error.
	for _, cmd := range []string{"run", "demo"} {
		args := []string{cmd, "--ttl", "10ms"}
		if cmd == "run" {
			args = append(args, "x", "--", "true")
		}
		code, _, errOut := result(t, dlockCmd(t, []string{"REDIS_URL=" + dead}, args...))
		if want := "dlock " + cmd + ": --ttl 10ms: must be at least 30ms\n"; code != exitUsage || errOut != want {
			t.Errorf("dlock %q: exit %d, stderr %q; want %d, %q", args, code, errOut, exitUsage, want)
		}
	}
	if code, out, _ := result(t, dlockCmd(t, nil, "--version")); code != 0 || !strings.HasPrefix(out, "dlock ") {
		t.Errorf("dlock --version = %d, %q", code, out)
	}
}

// A flag that does not parse is reported on one line that says where the
// help is, not followed by the whole help, for every command.
func TestFlagErrorIsOneLine(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"run", "--frob", "x", "--", "true"},
		{"run", "--ttl", "soon", "x", "--", "true"},
		{"inspect", "x", "--frob"},
		{"list", "--frob"},
		{"watch", "--frob", "x"},
		{"release", "--frob", "x"},
		{"demo", "--frob"},
		{"demo", "seckill", "--frob"},
	} {
		code, out, errOut := result(t, dlockCmd(t, nil, args...))
		name := args[0]
		if args[0] == "demo" && args[1] == "seckill" {
			name = "demo seckill"
		}
		want := regexp.MustCompile(`^dlock ` + name + `: .*-(frob|ttl).* \(see 'dlock ` + name + ` -h'\)\n$`)
		if args[1] == "--ttl" {
			want = regexp.MustCompile(`^dlock run: invalid value "soon" for flag -ttl: invalid duration "soon": a duration is a number with a unit, such as 10s, 500ms or 2m \(see 'dlock run -h'\)\n$`)
		}
		if code != exitUsage || out != "" || !want.MatchString(errOut) {
			t.Errorf("dlock %q: exit %d, stdout %q, stderr %q; want %d and one line on stderr matching %s", args, code, out, tail(errOut), exitUsage, want)
		}
	}
}

// A database index that the server does not have is a configuration error
// (3), not Redis unreachable (4): Redis answered. Over a quorum too, where
// an unreachable node would be tolerated.
func TestMissingDatabaseIsConfigError(t *testing.T) {
	t.Parallel()
	srvs, args := quorumArgs(t, 3)
	bad := srvs[0].URL() + "/99"
	for _, args := range [][]string{
		{"inspect", "--redis", bad, "x"},
		append(append([]string{"run", "--redis", bad}, args[2:]...), "x", "--", "true"),
	} {
		code, _, errOut := result(t, dlockCmd(t, nil, args...))
		if code != exitConfig || !strings.Contains(errOut, "/99: Redis has no such database") || strings.Count(errOut, "\n") != 1 {
			t.Errorf("dlock %q: exit %d, stderr %q; want %d and one line saying the database is missing", args, code, errOut, exitConfig)
		}
	}
}

// A URL's database index -1 is no database Redis has (go-redis would select
// none for it, and database 0 be used): a configuration error (3), as for
// /99, that runs nothing.
func TestNegativeDatabaseIsConfigError(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t, redistest.TCP())
	for _, args := range [][]string{
		{"run", "--redis", s.URL() + "/-1", "x", "--", "true"},
		{"inspect", "--redis", s.URL() + "/-1", "x"},
		{"run", "--redis", "unix://" + redistest.Start(t).Addr() + "?db=-1", "x", "--", "true"},
	} {
		code, _, errOut := result(t, dlockCmd(t, nil, args...))
		if code != exitConfig || strings.Count(errOut, "\n") != 1 {
			t.Errorf("dlock %q: exit %d, stderr %q; want %d and one line", args, code, errOut, exitConfig)
		}
	}
}

func TestInspectListRelease(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	env := []string{"REDIS_URL=" + s.URL()}
	rdb := s.Client(t)
	ctx := t.Context()
	rdb.Set(ctx, "dlock:{jobs:a}", "tok-a", time.Minute)
	rdb.Set(ctx, "dlock:{jobs:a}:fence", "42", time.Minute)
	rdb.Set(ctx, "dlock:{jobs:b}", "tok-b", time.Minute)
	rdb.Set(ctx, "dlock:{other}", "tok-o", time.Minute)
	// A reentrant lock: its owner and one field per hold (deadlines far ahead).
	rdb.HSet(ctx, "dlock:{re}", "owner", "client/flow", "fence", 7, "h:one", 1<<50, "h:two", 1<<50)
	rdb.PExpire(ctx, "dlock:{re}", time.Minute)

	code, out, errOut := result(t, dlockCmd(t, env, "inspect", "--json", "jobs:a", "free"))
	if code != 0 {
		t.Fatalf("inspect: exit %d, stderr %q", code, errOut)
	}
	var got []infoJSON
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var in infoJSON
		if err := json.Unmarshal([]byte(line), &in); err != nil {
			t.Fatalf("inspect --json line %q: %v", line, err)
		}
		got = append(got, in)
	}
	if len(got) != 2 || got[0].Token != "tok-a" || got[0].Fence != 42 || !got[0].Held || got[0].TTLMS == nil || *got[0].TTLMS <= 0 || got[1].Held || got[1].TTLMS != nil {
		t.Errorf("inspect --json = %+v", got)
	}

	code, out, _ = result(t, dlockCmd(t, env, "inspect", "re"))
	if code != 0 || !strings.Contains(out, "client/flow×2") {
		t.Errorf("inspect of a reentrant lock = %d, %q; want its owner and hold count", code, out)
	}
	code, out, _ = result(t, dlockCmd(t, env, "inspect", "--json", "re"))
	if code != 0 || !strings.Contains(out, `"owners":[{"id":"client/flow","holds":2}]`) {
		t.Errorf("inspect --json of a reentrant lock = %d, %q", code, out)
	}

	code, out, _ = result(t, dlockCmd(t, env, "list", "jobs:*"))
	if code != 0 || !strings.Contains(out, "jobs:a") || !strings.Contains(out, "jobs:b") || strings.Contains(out, "other") {
		t.Errorf("list jobs:* = %d, %q; want jobs:a and jobs:b only", code, out)
	}

	code, out, _ = result(t, dlockCmd(t, env, "release", "--force", "jobs:a"))
	if code != 0 || !strings.Contains(out, "released") {
		t.Errorf("release --force = %d, %q", code, out)
	}
	if rdb.Exists(ctx, "dlock:{jobs:a}").Val() != 0 {
		t.Error("lock still there after release --force")
	}
}

func TestDemo(t *testing.T) {
	// Serial: beside the module's other tests one run did not end in two minutes (seconds alone); a timeout dumps its goroutines.
	if testing.Short() {
		t.Skip("runs scheduler processes")
	}
	s := redistest.Start(t)
	code, out, errOut := result(t, dlockCmd(t, []string{"REDIS_URL=" + s.URL()}, "demo", "--tasks", "200"))
	if code != 0 {
		t.Fatalf("dlock demo: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	m := regexp.MustCompile(`duplicate enqueues: (\d+) without a lock, (\d+) with dlock`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("demo output lacks the comparison:\n%s", out)
	}
	without, _ := strconv.Atoi(m[1])
	with, _ := strconv.Atoi(m[2])
	if without == 0 || with != 0 {
		t.Errorf("duplicates: %d without a lock (want > 0), %d with dlock (want 0)", without, with)
	}
	if !strings.Contains(out, "strictly increasing") {
		t.Errorf("demo output lacks the fence check:\n%s", out)
	}
	// Some tasks fail for good by the demo's design; the report says that
	// this is the work failing, not the lock, before the first count of them.
	if legend, count := strings.Index(out, "not failures of the lock"), strings.Index(out, "tasks failed for good "); legend < 0 || count < legend {
		t.Errorf("demo output does not explain \"tasks failed for good\" before it counts them:\n%s", out)
	}
	// The third lesson: no lock, an idempotency key; duplicates enqueued
	// (usually) but none acted on twice.
	m = regexp.MustCompile(`with an idempotency key: (\d+) duplicate enqueues, (\d+) acted on twice`).FindStringSubmatch(out)
	if m == nil || m[2] != "0" {
		t.Errorf("demo output lacks the idempotency key's pass, or it acted on a duplicate: %q\n%s", m, out)
	}
}

func TestDemoChaos(t *testing.T) {
	// Serial: the victim scheduler must find a batch before the others drain the table.
	if testing.Short() {
		t.Skip("runs scheduler processes")
	}
	code, out, errOut := result(t, dlockCmd(t, []string{"REDIS_URL="}, "demo", "--mode", "lock", "--chaos", "--tasks", "150", "--ttl", "1s"))
	if code != 0 {
		t.Fatalf("dlock demo --chaos: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	for _, want := range []string{"started a private redis-server", "duplicate enqueues    0", "tasks done", "killed by SIGKILL"} {
		if !strings.Contains(out, want) {
			t.Errorf("demo --chaos output lacks %q:\n%s", want, out)
		}
	}
	// Into a pipe, progress is a line a second; while the killed
	// scheduler's batch waits to be recovered nothing moves, and the same
	// line must not be printed again and again.
	progress := 0
	lines := strings.Split(errOut, "\n")
	for i, line := range lines {
		if !strings.HasPrefix(line, "pending ") {
			continue
		}
		progress++
		if i > 0 && line == lines[i-1] {
			t.Errorf("demo --chaos printed the progress line %q twice in a row:\n%s", line, errOut)
			break
		}
	}
	if progress == 0 {
		t.Errorf("demo --chaos printed no progress:\n%s", errOut)
	}
}

func TestSeckill(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	code, out, errOut := result(t, dlockCmd(t, []string{"REDIS_URL=" + s.URL()}, "demo", "seckill", "--stock", "20", "--users", "100", "--buyers", "8"))
	if code != 0 {
		t.Fatalf("seckill: exit %d\n%s\n%s", code, out, errOut)
	}
	if strings.Count(out, "no oversell, nobody bought twice") != 2 || !strings.Contains(out, "sold 20, stock left 0, buyers 20") {
		t.Errorf("seckill output:\n%s", out)
	}
}

// --prefix reaches locks taken with WithPrefix, and list works over a
// quorum (it scans every node).
func TestPrefixAndQuorumList(t *testing.T) {
	t.Parallel()
	var urls []string
	var rdbs []*redis.Client
	for range 3 {
		s := redistest.Start(t, redistest.TCP())
		urls = append(urls, s.URL())
		rdbs = append(rdbs, s.Client(t))
	}
	ctx := t.Context()
	for _, r := range rdbs {
		r.Set(ctx, "myapp:{jobs:a}", "tok-a", time.Minute)
	}
	one := []string{"REDIS_URL=" + urls[0]}
	if code, out, errOut := result(t, dlockCmd(t, one, "list", "--prefix", "myapp:")); code != 0 || !strings.Contains(out, "jobs:a") {
		t.Errorf("list --prefix myapp: = %d, %q (stderr %q), want jobs:a", code, out, errOut)
	}
	if code, out, _ := result(t, dlockCmd(t, one, "list")); code != 0 || strings.Contains(out, "jobs:a") {
		t.Errorf("list with the default prefix = %d, %q, want no jobs:a", code, out)
	}
	var quorum []string
	for _, u := range urls {
		quorum = append(quorum, "--redis", u)
	}
	args := append(append([]string{"list"}, quorum...), "--prefix", "myapp:", "--json")
	if code, out, errOut := result(t, dlockCmd(t, nil, args...)); code != 0 || strings.Count(out, `"jobs:a"`) != 1 {
		t.Errorf("list over a quorum = %d, %q (stderr %q), want jobs:a once", code, out, errOut)
	}
	args = append(append([]string{"release", "--force", "--prefix", "myapp:"}, quorum...), "jobs:a")
	if code, _, errOut := result(t, dlockCmd(t, nil, args...)); code != 0 {
		t.Errorf("release --force over a quorum = %d, stderr %q", code, errOut)
	}
	for i, r := range rdbs {
		if r.Exists(ctx, "myapp:{jobs:a}").Val() != 0 {
			t.Errorf("node %d still holds the lock after release --force", i)
		}
	}
}

// Flags may follow the arguments (dlock inspect NAME --json), and "--"
// ends the flags.
func TestFlagsAfterArguments(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	env := []string{"REDIS_URL=" + s.URL()}
	s.Client(t).Set(t.Context(), "dlock:{jobs:a}", "tok-a", time.Minute)
	if code, out, errOut := result(t, dlockCmd(t, env, "inspect", "jobs:a", "--json")); code != 0 || !strings.Contains(out, `"token":"tok-a"`) {
		t.Errorf("inspect NAME --json = %d, %q (stderr %q)", code, out, errOut)
	}
	if code, out, errOut := result(t, dlockCmd(t, env, "list", "jobs:*", "--json")); code != 0 || !strings.Contains(out, `"jobs:a"`) {
		t.Errorf("list PATTERN --json = %d, %q (stderr %q)", code, out, errOut)
	}
	if code, out, _ := result(t, dlockCmd(t, env, "inspect", "--", "--json")); code != 0 || !strings.Contains(out, "--json") {
		t.Errorf(`inspect -- --json = %d, %q, want the lock named "--json" inspected`, code, out)
	}
	if code, _, errOut := result(t, dlockCmd(t, env, "release", "jobs:a", "--force")); code != 0 {
		t.Errorf("release NAME --force = %d (stderr %q)", code, errOut)
	}
}

// Asked-for help goes to stdout, with exit 0, for every command; a usage
// error still goes to stderr.
func TestHelpGoesToStdout(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"run", "-h"}, {"inspect", "--help"}, {"list", "-h"}, {"watch", "-h"}, {"release", "-h"},
		{"demo", "-h"}, {"demo", "seckill", "-h"}} {
		var stdout, stderr bytes.Buffer
		code := run(t.Context(), args, &stdout, &stderr)
		if code != exitOK || !strings.HasPrefix(stdout.String(), "usage: dlock ") || stderr.Len() != 0 {
			t.Errorf("dlock %v: exit %d, stdout %q, stderr %q; want 0 and the usage on stdout", args, code, tail(stdout.String()), stderr.String())
		}
	}
	if !strings.Contains(demoHelp, "\n       dlock demo seckill") {
		t.Errorf("demo's usage names its second form without the command: %q", demoHelp[:60])
	}
	var stdout, stderr bytes.Buffer
	if code := run(t.Context(), []string{"run", "--bogus"}, &stdout, &stderr); code != exitUsage || stdout.Len() != 0 || stderr.Len() == 0 {
		t.Errorf("dlock run --bogus: exit %d, stdout %q, stderr %q; want 2 and the error on stderr", code, stdout.String(), stderr.String())
	}
}

func tail(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

// Ctrl-C during the demo says it was interrupted and exits 130, whatever
// step it was at.
func TestDemoInterrupted(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	for _, after := range []time.Duration{0, 400 * time.Millisecond} {
		ctx, cancel := context.WithCancelCause(t.Context())
		var stdout, stderr bytes.Buffer
		done := make(chan int, 1)
		go func() { done <- run(ctx, []string{"demo", "--redis", s.URL(), "--tasks", "100000"}, &stdout, &stderr) }()
		time.Sleep(after)
		cancel(interruption{syscall.SIGINT})
		select {
		case code := <-done:
			last := strings.TrimSpace(stderr.String())
			last = last[strings.LastIndex(last, "\n")+1:]
			if code != exitInterrupted || last != "dlock: interrupted by SIGINT (the demo stopped)" {
				t.Errorf("demo interrupted after %v: exit %d, last line %q", after, code, last)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("demo still running 30s after SIGINT")
		}
	}
}

// inspect --json tells a free lock (ttl_ms null) from one held with no
// expiry (-1); a name with a newline or tab does not break the table.
func TestInspectJSONAndOddNames(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	rdb := s.Client(t)
	rdb.Set(t.Context(), "dlock:{forever}", "tok", 0)
	rdb.Set(t.Context(), "dlock:{two\nlines}", "tok2", time.Minute)
	var stdout, stderr bytes.Buffer
	if code := run(t.Context(), []string{"inspect", "--redis", s.URL(), "--json", "forever", "free"}, &stdout, &stderr); code != 0 {
		t.Fatalf("inspect: exit %d: %s", code, stderr.String())
	}
	var got []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatal(err)
		}
		got = append(got, m)
	}
	if len(got) != 2 || got[0]["ttl_ms"] != float64(-1) || got[1]["ttl_ms"] != nil || got[1]["held"] != false {
		t.Errorf("inspect --json = %v, want ttl_ms -1 for the lock without expiry and null for the free one", got)
	}
	stdout.Reset()
	if code := run(t.Context(), []string{"list", "--redis", s.URL()}, &stdout, &stderr); code != 0 {
		t.Fatalf("list: exit %d: %s", code, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	if len(lines) != 3 || !strings.Contains(stdout.String(), `"two\nlines"`) {
		t.Errorf("list = %q, want a header and two rows, the odd name quoted", stdout.String())
	}
}

// inspect and list show a read-write lock's holds: its reads, or its write,
// in the table and in JSON.
func TestInspectReadWriteLock(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	ctx := t.Context()
	c, err := dlock.New(s.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	rw, err := c.RWMutex("doc")
	if err != nil {
		t.Fatal(err)
	}
	var reads []*dlock.Lock
	for range 2 {
		l, err := rw.Reader().TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		reads = append(reads, l)
	}
	var stdout, stderr bytes.Buffer
	if code := run(ctx, []string{"inspect", "--redis", s.URL(), "--json", "doc"}, &stdout, &stderr); code != 0 {
		t.Fatalf("inspect: exit %d: %s", code, stderr.String())
	}
	var in infoJSON
	if err := json.Unmarshal(stdout.Bytes(), &in); err != nil || len(in.RWHolds) != 2 || in.RWHolds[0].Write || in.Permits != nil {
		t.Errorf("inspect --json of a read-write lock with 2 reads = %q (%v), want its 2 reads in rw_holds", stdout.String(), err)
	}
	stdout.Reset()
	if code := run(ctx, []string{"list", "--redis", s.URL()}, &stdout, &stderr); code != 0 || !strings.Contains(stdout.String(), "2 reads: ") {
		t.Errorf("list with 2 reads held: exit %d, %q, want \"2 reads: <tokens>\"", code, stdout.String())
	}
	for _, l := range reads {
		l.Release(ctx)
	}
	w, err := rw.Writer().TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Release(ctx)
	stdout.Reset()
	if code := run(ctx, []string{"inspect", "--redis", s.URL(), "doc"}, &stdout, &stderr); code != 0 || !strings.Contains(stdout.String(), "write: "+w.Token()) {
		t.Errorf("inspect with the write held: exit %d, %q, want \"write: %s\"", code, stdout.String(), w.Token())
	}
}

// With --watch-loss, an operator's 'dlock release --force' stops the
// command at once: with a 60s lease, the next extension would come 20s later.
func TestRunWatchLossStopsChildAtOnceOnForceRelease(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	env := childEnv("polite", "REDIS_URL="+s.URL())
	cmd := dlockCmd(t, env, "run", "--watch-loss", "--ttl", "60s", "--grace", "300ms", "forced", "--", os.Args[0], childArg)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	startUntilChildRuns(t, cmd)
	// The holder subscribes once it holds: force-release until it is told.
	start := time.Now()
	for deadline := start.Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if code, _, errOut := result(t, dlockCmd(t, env, "release", "--force", "forced")); code != 0 {
			t.Fatalf("dlock release --force: exit %d, stderr %q", code, errOut)
		}
		if waitExit(cmd, 500*time.Millisecond) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("dlock run --watch-loss did not stop its child within 10s of a forced release (its lease is 60s)")
		}
	}
	if code := cmd.ProcessState.ExitCode(); code != exitLost {
		t.Errorf("exit = %d, want %d (lock lost); stderr %q", code, exitLost, stderr.String())
	}
}

// 'dlock release --ask' reaches a 'dlock run' holding the lock, which sends
// its command SIGTERM (--request-signal's default) and releases nothing
// itself: the command exits, and then the lock is free.
func TestRunPassesAReleaseRequestToItsCommand(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	mark := filepath.Join(t.TempDir(), "mark")
	env := childEnv("polite", "REDIS_URL="+s.URL(), "MARK="+mark)
	cmd := dlockCmd(t, env, "run", "--ttl", "60s", "asked", "--", os.Args[0], childArg)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	startUntilChildRuns(t, cmd)
	for deadline := time.Now().Add(10 * time.Second); ; { // (until the holder's watch is subscribed)
		if code, _, errOut := result(t, dlockCmd(t, env, "release", "--ask", "--reason", "deploy", "asked")); code != 0 {
			t.Fatalf("dlock release --ask: exit %d, stderr %q", code, errOut)
		}
		if waitExit(cmd, 500*time.Millisecond) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("dlock run's command did not exit within 10s of a release request")
		}
	}
	if b, _ := os.ReadFile(mark); string(b) != "terminated" {
		t.Errorf("the command was not sent SIGTERM (mark %q); dlock said %q", b, stderr.String())
	}
	if !strings.Contains(stderr.String(), `release asked for ("deploy")`) {
		t.Errorf("stderr %q does not say the release was asked for", stderr.String())
	}
	if lockHeld(s.Client(t), "dlock:{asked}") {
		t.Error("the lock is still held after the command exited")
	}
}
