package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/redistest"
)

// watchRefresh is one refresh of dlock watch --json, as a reader sees it.
type watchRefresh struct {
	Refresh int    `json:"refresh"`
	Error   string `json:"error"`
	Locks   []struct {
		infoJSON
		AcqPerS *float64 `json:"acq_per_s"`
	} `json:"locks"`
}

// lock returns the lock name of r, or nil.
func (r watchRefresh) lock(name string) *infoJSON {
	for i := range r.Locks {
		if r.Locks[i].Name == name {
			return &r.Locks[i].infoJSON
		}
	}
	return nil
}

// startWatch runs dlock watch --json in-process with args, and returns its
// refreshes as they come, a function that waits (bounded) for a refresh
// for which cond holds, and one that interrupts the watch with SIGINT and
// returns its exit code and stderr.
func startWatch(t *testing.T, args ...string) (next func(what string, cond func(watchRefresh) bool) watchRefresh, stop func() (int, string)) {
	t.Helper()
	ctx, cancel := context.WithCancelCause(t.Context())
	pr, pw := io.Pipe()
	refreshes := make(chan watchRefresh, 1000)
	go func() {
		defer close(refreshes)
		dec := json.NewDecoder(pr)
		for {
			var r watchRefresh
			if dec.Decode(&r) != nil {
				return
			}
			refreshes <- r
		}
	}()
	var stderr bytes.Buffer
	done := make(chan int, 1)
	go func() {
		code := run(ctx, append([]string{"watch", "--json"}, args...), pw, &stderr)
		pw.Close()
		done <- code
	}()
	stopped := false
	stop = func() (int, string) {
		stopped = true
		cancel(interruption{syscall.SIGINT})
		go func() {
			for range refreshes { // drained: the watch never blocks writing
			}
		}()
		select {
		case code := <-done:
			return code, stderr.String()
		case <-time.After(30 * time.Second):
			t.Fatal("dlock watch still running 30s after SIGINT")
			return 0, ""
		}
	}
	t.Cleanup(func() {
		if !stopped {
			stop()
		}
	})
	next = func(what string, cond func(watchRefresh) bool) watchRefresh {
		t.Helper()
		deadline := time.After(30 * time.Second)
		var last watchRefresh
		for {
			select {
			case r, ok := <-refreshes:
				if !ok {
					t.Fatalf("dlock watch ended before a refresh showed %s", what)
				}
				if cond(r) {
					return r
				}
				last = r
			case <-deadline:
				t.Fatalf("no refresh in 30s showed %s; the last: %+v", what, last)
			}
		}
	}
	return next, stop
}

// A watch follows a lock through its life: held (holder and metadata),
// released (shown free), taken again by another lease (counted as an
// acquisition), and a fair waiter queued for it; Ctrl-C ends it with 130.
func TestWatchFollowsALock(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	ctx := t.Context()
	c, err := dlock.New(s.Client(t), dlock.HolderMeta("job-1"))
	if err != nil {
		t.Fatal(err)
	}
	first, err := c.TryAcquire(ctx, "jobs:a")
	if err != nil {
		t.Fatal(err)
	}
	next, stop := startWatch(t, "--redis", s.URL(), "--interval", "100ms", "jobs:*")

	r := next("jobs:a held by the first lease", func(r watchRefresh) bool {
		l := r.lock("jobs:a")
		return l != nil && l.Held && l.Token == first.Token()
	})
	if l := r.lock("jobs:a"); l.Meta != "job-1" || l.TTLMS == nil || *l.TTLMS <= 0 || l.Type != "string" {
		t.Errorf("refresh %d: jobs:a = %+v, want metadata job-1 and a TTL", r.Refresh, l)
	}
	first.Release(ctx)
	next("jobs:a free", func(r watchRefresh) bool {
		l := r.lock("jobs:a")
		return l != nil && !l.Held
	})
	second, err := c.TryAcquire(ctx, "jobs:a", dlock.HolderMeta("job-2"))
	if err != nil {
		t.Fatal(err)
	}
	defer second.Release(ctx)
	r = next("jobs:a held by the second lease", func(r watchRefresh) bool {
		l := r.lock("jobs:a")
		return l != nil && l.Held && l.Token == second.Token()
	})
	for _, l := range r.Locks {
		if l.Name == "jobs:a" && (l.Meta != "job-2" || l.AcqPerS == nil || *l.AcqPerS <= 0) {
			t.Errorf("refresh %d: jobs:a = %+v, acq/s %v; want metadata job-2 and the new lease counted", r.Refresh, l.infoJSON, l.AcqPerS)
		}
	}

	wctx, cancel := context.WithCancel(ctx)
	waited := make(chan error, 1)
	go func() {
		_, err := c.Acquire(wctx, "jobs:a")
		waited <- err
	}()
	next("a waiter queued for jobs:a", func(r watchRefresh) bool {
		l := r.lock("jobs:a")
		return l != nil && l.Queued == 1
	})
	cancel()
	if err := <-waited; !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("the cancelled waiter's Acquire = %v, want ErrNotAcquired", err)
	}

	code, errOut := stop()
	if code != exitInterrupted || errOut != "dlock: interrupted by SIGINT (the watch stopped)\n" {
		t.Errorf("watch after SIGINT: exit %d, stderr %q; want %d and one line saying it was interrupted", code, errOut, exitInterrupted)
	}
}

// --count N ends a watch after N refreshes with exit 0. Into a pipe it
// prints one plain block per refresh, without escape codes; a name with a
// control character is quoted, and a key dlock did not write is foreign.
func TestWatchCountPlainBlocks(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	rdb := s.Client(t)
	ctx := t.Context()
	rdb.Set(ctx, "dlock:{jobs:a}", "tok-a", time.Minute)
	rdb.Set(ctx, "dlock:{jobs:two\nlines}", "tok-b", time.Minute)
	rdb.RPush(ctx, "dlock:{jobs:list}", "x")
	code, out, errOut := result(t, dlockCmd(t, []string{"REDIS_URL=" + s.URL()}, "watch", "--count", "3", "--interval", "100ms", "jobs:*"))
	if code != exitOK {
		t.Fatalf("watch --count 3: exit %d, stderr %q", code, errOut)
	}
	blocks := strings.Split(strings.TrimSuffix(out, "\n\n"), "\n\n")
	if len(blocks) != 3 || strings.Contains(out, "\x1b") {
		t.Fatalf("watch --count 3 into a pipe = %q; want 3 plain blocks, no escape codes", out)
	}
	for i, b := range blocks {
		lines := strings.Split(b, "\n")
		if len(lines) != 5 || !strings.Contains(lines[0], "refresh "+string(rune('1'+i))+": 2 held") ||
			!strings.HasPrefix(lines[1], "NAME ") || !strings.Contains(lines[1], "ACQ/S") {
			t.Errorf("block %d = %q; want a header (2 locks held), the column names and 3 rows", i+1, b)
			continue
		}
		if !strings.Contains(b, `"jobs:two\nlines"`) || !strings.Contains(b, "foreign") || !strings.Contains(b, "tok-a") {
			t.Errorf("block %d = %q; want the odd name quoted, the list foreign, tok-a", i+1, b)
		}
	}
}

// A watch, and a list, with nothing to show say "(none)" under the column
// names rather than print an empty table; a semaphore with one permit held
// shows "1 permit", not "1 permits".
func TestWatchNoneAndOnePermit(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	env := []string{"REDIS_URL=" + s.URL()}
	watch := []string{"watch", "--count", "1", "jobs:*"}
	for _, args := range [][]string{watch, {"list", "jobs:*"}} {
		code, out, errOut := result(t, dlockCmd(t, env, args...))
		if lines := strings.Split(strings.TrimSpace(out), "\n"); code != exitOK || lines[len(lines)-1] != "(none)" ||
			!strings.HasPrefix(lines[len(lines)-2], "NAME ") {
			t.Errorf("dlock %q with no locks: exit %d, stdout %q, stderr %q; want the column names, then (none)", args, code, out, errOut)
		}
	}
	l, err := semaphore(t, s.Client(t), "jobs:s", 3).Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(context.WithoutCancel(t.Context()))
	for _, args := range [][]string{watch, {"list", "jobs:*"}} {
		code, out, errOut := result(t, dlockCmd(t, env, args...))
		if code != exitOK || !strings.Contains(out, "1 permit: "+l.Token()) || strings.Contains(out, "(none)") {
			t.Errorf("dlock %q with one permit held: exit %d, stdout %q, stderr %q; want \"1 permit: %s\"", args, code, out, errOut, l.Token())
		}
	}
}

// A watch works over a quorum of nodes as over one.
func TestWatchQuorum(t *testing.T) {
	t.Parallel()
	srvs, args := quorumArgs(t, 3)
	for _, s := range srvs {
		s.Client(t).Set(t.Context(), "dlock:{jobs:a}", "tok-a", time.Minute)
	}
	args = append([]string{"watch", "--count", "2", "--interval", "100ms", "--json"}, append(args, "jobs:*")...)
	code, out, errOut := result(t, dlockCmd(t, nil, args...))
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != exitOK || len(lines) != 2 {
		t.Fatalf("watch over a quorum: exit %d, stdout %q, stderr %q; want 2 refreshes", code, out, errOut)
	}
	for _, line := range lines {
		var r watchRefresh
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("refresh %q: %v", line, err)
		}
		if l := r.lock("jobs:a"); l == nil || !l.Held || l.Token != "tok-a" {
			t.Errorf("refresh %d over a quorum = %+v, want jobs:a held by tok-a", r.Refresh, r)
		}
	}
}

// Bad flags and patterns get a clear error and exit 2 before Redis is
// reached; no Redis given exits 3, an unreachable one 4.
func TestWatchBadInput(t *testing.T) {
	// Serial: sets REDIS_URL (t.Setenv).
	s := redistest.Start(t)
	t.Setenv("REDIS_URL", s.URL())
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{nil, exitUsage, "expected exactly one PATTERN"},
		{[]string{"a", "b"}, exitUsage, "expected exactly one PATTERN"},
		{[]string{"--interval", "0", "x"}, exitUsage, "--interval 0s: must be at least 100ms"},
		{[]string{"--interval", "soon", "x"}, exitUsage, `invalid value "soon" for flag -interval`},
		{[]string{"--count", "-1", "x"}, exitUsage, "--count -1"},
		{[]string{"--bogus", "x"}, exitUsage, "flag provided but not defined: -bogus"},
		{[]string{""}, exitUsage, "empty PATTERN"},
		{[]string{"jobs:[ab"}, exitUsage, "unclosed ["},
		{[]string{`jobs\`}, exitUsage, "lone backslash"},
		{[]string{"--redis", "redis://127.0.0.1:1", "x"}, exitRedis, "cannot reach Redis"},
		{[]string{"--redis", "bogus://x", "x"}, exitConfig, "bad Redis URL"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(t.Context(), append([]string{"watch"}, tc.args...), &stdout, &stderr)
		if code != tc.code || !strings.Contains(stderr.String(), tc.want) || stdout.Len() != 0 {
			t.Errorf("dlock watch %q: exit %d, stdout %q, stderr %q; want %d and %q", tc.args, code, stdout.String(), stderr.String(), tc.code, tc.want)
		}
	}
	t.Setenv("REDIS_URL", "")
	var stdout, stderr bytes.Buffer
	if code := run(t.Context(), []string{"watch", "x"}, &stdout, &stderr); code != exitConfig || !strings.Contains(stderr.String(), "no Redis given") {
		t.Errorf("dlock watch without Redis: exit %d, stderr %q; want %d", code, stderr.String(), exitConfig)
	}
}

func TestCheckPattern(t *testing.T) {
	t.Parallel()
	for _, p := range []string{"*", "jobs:*", "jobs:[ab]*", `jobs:\[x`, `a\\`, "[]]", "?"} {
		if err := checkPattern(p); err != nil {
			t.Errorf("checkPattern(%q) = %v, want nil", p, err)
		}
	}
	for _, p := range []string{"", "[", "jobs:[a", `a\`, `\\\`} {
		if err := checkPattern(p); err == nil {
			t.Errorf("checkPattern(%q) = nil, want an error", p)
		}
	}
}

// ACQ/S counts the leases new since the previous refresh: a plain lock's
// token, a semaphore's permits, a reentrant lock's owner; none on the first
// refresh. A freed lock shows as free for watchForget refreshes.
func TestWatchCountsNewLeases(t *testing.T) {
	t.Parallel()
	w := &watcher{seen: map[string]*seenLock{}}
	plain := func(tok string) dlock.Info { return dlock.Info{Name: "plain", Held: true, Type: "string", Token: tok} }
	sem := func(toks ...string) dlock.Info {
		in := dlock.Info{Name: "sem", Held: true, Type: "zset", TTL: time.Second}
		for _, tok := range toks {
			in.Permits = append(in.Permits, dlock.Permit{Token: tok, TTL: time.Second})
		}
		return in
	}
	re := func(owner string) dlock.Info {
		return dlock.Info{Name: "re", Held: true, Type: "hash", TTL: time.Second, Owners: []dlock.Owner{{ID: owner, Holds: 2}}}
	}
	rates := func(locks []watchedLock) map[string]float64 {
		m := map[string]float64{}
		for _, l := range locks {
			m[l.info.Name] = l.rate
		}
		return m
	}
	t0 := time.Unix(1000, 0)
	got := rates(w.update([]dlock.Info{plain("x"), re("o1"), sem("a", "b")}, t0))
	for name, r := range got {
		if !math.IsNaN(r) {
			t.Errorf("first refresh: %s at %v acq/s, want none (NaN)", name, r)
		}
	}
	got = rates(w.update([]dlock.Info{plain("x"), re("o2"), sem("b", "c", "d")}, t0.Add(2*time.Second)))
	if want := map[string]float64{"plain": 0, "re": 0.5, "sem": 1}; len(got) != 3 || got["plain"] != want["plain"] || got["re"] != want["re"] || got["sem"] != want["sem"] {
		t.Errorf("second refresh, 2s later: %v acq/s, want %v", got, want)
	}
	for i := range watchForget + 1 {
		locks := w.update([]dlock.Info{plain("y")}, t0.Add(time.Duration(3+i)*time.Second))
		free := 0
		for _, l := range locks {
			if !l.info.Held {
				free++
			}
		}
		if want := 2; i == watchForget && len(locks) != 1 || i < watchForget && free != want {
			t.Fatalf("refresh %d after re and sem were freed: %d locks, %d free", i+1, len(locks), free)
		}
	}
}
