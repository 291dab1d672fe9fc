package dlock_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/redistest"
)

// helper is a worker process: this test binary re-run in a helper mode.
type helper struct {
	cmd   *exec.Cmd
	lines chan string
	done  chan error
	out   strings.Builder
}

func startHelper(t *testing.T, s *redistest.Server, mode, name string, ttl time.Duration, rounds int, env ...string) *helper {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(),
		helperEnv+"="+mode,
		"DLOCK_NET="+s.Network(), "DLOCK_ADDR="+s.Addr(),
		"DLOCK_NAME="+name, "DLOCK_TTL="+ttl.String(), "DLOCK_ROUNDS="+strconv.Itoa(rounds),
	)
	cmd.Env = append(cmd.Env, env...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	h := &helper{cmd: cmd, lines: make(chan string, 16), done: make(chan error, 1)}
	cmd.Stderr = &syncWriter{w: &h.out}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case h.lines <- sc.Text():
			default:
			}
		}
		io.Copy(io.Discard, stdout)
		h.done <- cmd.Wait()
	}()
	t.Cleanup(h.kill)
	return h
}

// stop stops the worker process (SIGSTOP) and waits until every one of its
// threads is stopped: the signal takes effect a moment after it is sent,
// and a test that then changes what the worker must not see (a handover
// while it is stopped) would race it.
func (h *helper) stop(t *testing.T) {
	t.Helper()
	if err := h.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	tasks := fmt.Sprintf("/proc/%d/task", h.cmd.Process.Pid)
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		ids, err := os.ReadDir(tasks)
		if err != nil { // no /proc: give the signal a while
			time.Sleep(100 * time.Millisecond)
			return
		}
		all := true
		for _, id := range ids {
			b, err := os.ReadFile(tasks + "/" + id.Name() + "/stat")
			i := bytes.LastIndexByte(b, ')') // "tid (comm) <state> …"
			all = all && err == nil && i >= 0 && i+2 < len(b) && b[i+2] == 'T'
		}
		if all {
			return
		}
	}
	t.Fatal("the worker process never stopped")
}

func (h *helper) waitLine(want string, d time.Duration) bool {
	timeout := time.After(d)
	for {
		select {
		case l := <-h.lines:
			if l == want {
				return true
			}
		case <-timeout:
			return false
		}
	}
}

func (h *helper) kill() { h.cmd.Process.Signal(syscall.SIGKILL) }

func (h *helper) wait(d time.Duration) error {
	select {
	case err := <-h.done:
		if err != nil {
			return fmt.Errorf("%v: %s", err, h.out.String())
		}
		return nil
	case <-time.After(d):
		h.kill()
		return fmt.Errorf("helper still running after %v", d)
	}
}

type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// Goroutines of two Clients in this process and two worker processes all
// contend for one lock, each doing a non-atomic read-modify-write of a shared
// counter under it. Any overlap would lose an increment or be seen by the
// holder counters.
func TestMutualExclusionAcrossGoroutinesAndProcesses(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"unfair", "fair", "reentrant", "without scripts"} {
		t.Run(mode, func(t *testing.T) { testMutualExclusion(t, mode) })
	}
}

func testMutualExclusion(t *testing.T, mode string) {
	// Without scripts: the worker processes and one Client in this process
	// run no scripts; the other Client does, on the same lock.
	fair, reentrant, noScripts := mode == "fair", mode == "reentrant", mode == "without scripts"
	s, rdb := setup(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	const (
		name       = "counter"
		ttl        = 2 * time.Second
		goroutines = 8 // per Client
		rounds     = 25
		procs      = 2
		procRounds = 60
	)
	var helpers []*helper
	for range procs {
		helpers = append(helpers, startHelper(t, s, "contend", name, ttl, procRounds,
			fmt.Sprintf("DLOCK_FAIR=%d", map[bool]int{false: 0, true: 1}[fair]),
			fmt.Sprintf("DLOCK_REENTRANT=%d", map[bool]int{false: 0, true: 1}[reentrant]),
			fmt.Sprintf("DLOCK_NOSCRIPTS=%d", map[bool]int{false: 0, true: 1}[noScripts])))
	}
	first := []dlock.Option{dlock.LeaseTTL(ttl), waiting(fair), dlock.WithReentrant(reentrant)}
	if noScripts {
		first = append(first, dlock.WithoutScripts())
	}
	clients := []*dlock.Client{
		newClient(t, rdb, first...),
		newClient(t, s.Client(t), dlock.LeaseTTL(ttl), waiting(fair), dlock.WithReentrant(reentrant)),
	}
	var inside atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan error, 2*goroutines)
	for ci, c := range clients {
		for g := range goroutines {
			ctx, c := ctx, c
			if reentrant { // each goroutine its own owner, nesting a second hold
				c = asOwner(t, c, fmt.Sprint("g", ci, "-", g))
				ctx = context.WithValue(ctx, ownerTestKey{}, true)
			}
			wg.Go(func() {
				for range rounds {
					if err := criticalSection(ctx, c, rdb, name, &inside); err != nil {
						errs <- err
						return
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for i, h := range helpers {
		if err := h.wait(time.Minute); err != nil {
			t.Errorf("worker process %d: %v", i, err)
		}
	}
	want := len(clients)*goroutines*rounds + procs*procRounds
	if got, _ := rdb.Get(ctx, counterKey).Int(); got != want {
		t.Errorf("counter = %d, want %d (%d lost updates)", got, want, want-got)
	}
	if v, _ := rdb.Get(ctx, violationsKey).Int(); v != 0 {
		t.Errorf("%d overlapping holders seen, want 0", v)
	}
}
