package main

import (
	"bytes"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dlockio/dlock/internal/redistest"
)

// TestAdvMaxHoldCommandOutlivesLease: with --max-hold D, the command gets
// SIGTERM at D, but the lease is capped at D + ttl/10 and SIGKILL comes only
// after --grace. A command that takes longer than ttl/10 to act on SIGTERM
// (here: one that ignores it) keeps running after the lease ended, while a
// second dlock run takes the lock and runs its own command: two commands
// under one lock. The dead-dlock path bounds SIGKILL by the lease's end; the
// max-hold path, whose lease end dlock knows exactly, does not.
func TestAdvMaxHoldCommandOutlivesLease(t *testing.T) {
	// Serial: the child must start within its 1s max hold.
	s := redistest.Start(t)
	rdb := s.Client(t)
	a := dlockCmd(t, childEnv("stubborn", "REDIS_URL="+s.URL()),
		"run", "--ttl", "2s", "--max-hold", "1s", "--grace", "4s", "adv-cap", "--", os.Args[0], childArg)
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
	// The lease ends at 1.2s at the latest; the stubborn command is killed
	// only at 1s + 4s. (A max hold long enough for the child to start and
	// say so on a loaded machine: at 300ms it was sometimes stopped first.)
	time.Sleep(time.Until(start.Add(2500 * time.Millisecond)))
	if lockHeld(rdb, "dlock:{adv-cap}") {
		t.Log("lock still held at 2.5s")
	}
	code, _, errOut := result(t, dlockCmd(t, []string{"REDIS_URL=" + s.URL()}, "run", "--wait", "0", "adv-cap", "--", "true"))
	running := true
	select {
	case <-exited:
		running = false
	default:
	}
	if code == 0 && running {
		t.Errorf("a second dlock run took the lock and ran its command %v after the first started, while the first's command (SIGTERM at its 1s max hold, SIGKILL only after --grace 4s) still ran: two commands under one lock (second's stderr %q)",
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
	ln, err := net.Listen("tcp", "127.0.0.1:0")
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

// TestAdvDialGateLeavesLockAfterBlip: a single Redis refuses dials for
// 2s (a restart, a blip) just as dlock run's command exits. Without the
// dial gate (dialCooldown 0) go-redis's retries of the release outlast the
// blip and the lock is released; with it, the first refused dial makes
// every dial for the next second fail at once, the retries are spent
// sooner, the release is given up ("it expires within 6s") with Redis back
// up, and the lock stays held for the rest of its TTL after dlock exited.
// (ADV_BLIP sets another blip; from about 2.5s both fail: the release is
// one call, bounded by go-redis's retries, not by its 5s context.)
func TestAdvDialGateLeavesLockAfterBlip(t *testing.T) {
	// Serial: a 2s refused-dial window against go-redis's retry budget.
	blip, _ := time.ParseDuration(os.Getenv("ADV_BLIP"))
	if blip == 0 {
		blip = 2 * time.Second
	}
	s := redistest.Start(t, redistest.TCP())
	rdb := s.Client(t)
	b := newBlipper(t, s.Addr())
	mark := t.TempDir() + "/mark"
	cmd := dlockCmd(t, childEnv("polite", "REDIS_URL=redis://"+b.addr, "MARK="+mark),
		"run", "--ttl", "6s", "adv-blip", "--", os.Args[0], childArg)
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
	if lockHeld(rdb, "dlock:{adv-blip}") {
		t.Errorf("the lock is still held after dlock run exited (Redis up again since before the release); exit %d, stderr %q",
			cmd.ProcessState.ExitCode(), strings.TrimSpace(stderr.String()))
	}
}

// TestAdvNegativeDatabaseIsConfigError: a URL's database index -1 is no
// database Redis has, but go-redis selects none for it, so dlock ran the
// command holding the lock in database 0 and exited 0. It must exit 3
// (configuration) as for /99, and run nothing.
func TestAdvNegativeDatabaseIsConfigError(t *testing.T) {
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
