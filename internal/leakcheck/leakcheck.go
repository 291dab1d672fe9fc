// Package leakcheck fails a test that leaves goroutines of dlock (any
// package of this module, or the go-redis pub/sub machinery it drives)
// running after it ends.
//
// It counts only the goroutines the test started: Check labels the test's
// goroutine (runtime/pprof labels, which every goroutine it starts
// inherits, and theirs in turn), so tests that run in parallel do not see
// each other's goroutines.
package leakcheck

import (
	"bytes"
	"context"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"
)

// settle bounds how long goroutines may take to wind down after a test:
// an extension or release in flight on a frozen server ends at go-redis's
// read timeout (5s by default since go-redis v9.22, 3s before), and a
// little scheduling slack on a loaded machine.
const settle = 7 * time.Second

// checked holds the tests Check was called for.
var checked sync.Map

// label is the pprof label key that marks a test's goroutines.
const label = "dlock-leakcheck"

// Check labels the calling goroutine (the test's) with tb's name and, in
// tb's cleanup (register it before anything whose cleanup must run first,
// such as a server), fails the test if any goroutine of ours that carries
// the label is still running after settle. Call it from the test's own
// goroutine, before the test starts the goroutines it checks; a second call
// for the same test does nothing (the first one's check runs last).
func Check(tb testing.TB) {
	tb.Helper()
	if _, again := checked.LoadOrStore(tb, true); again {
		return
	}
	id := tb.Name()
	pprof.SetGoroutineLabels(pprof.WithLabels(context.Background(), pprof.Labels(label, id)))
	tb.Cleanup(func() {
		tb.Helper()
		defer checked.Delete(tb)
		var left []string
		for deadline := time.Now().Add(settle); ; {
			left = running(id)
			if len(left) == 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if len(left) > 0 {
			tb.Errorf("%d goroutine(s) leaked:\n\n%s", len(left), strings.Join(left, "\n\n"))
		}
	})
}

// module is the import path of this module; its packages' functions print
// as module followed by "." (the root package) or "/" (the others).
const module = "github.com/dlockio/dlock"

// running returns the stacks of the goroutines labelled id that run code
// of ours, one per goroutine.
func running(id string) []string {
	var out []string
	for _, g := range labelled() {
		if g.label == id && ours(g.frames) {
			out = append(out, g.frames)
		}
	}
	return out
}

// Count returns how many goroutines of tb's (tb's or its parent's, for a
// subtest that runs in its parent's goroutines, or one of its subtests')
// run a function whose name or file contains substr. Check must have been
// called for tb or its parent.
func Count(tb testing.TB, substr string) int {
	name, n := tb.Name(), 0
	for _, g := range labelled() {
		related := g.label == name || strings.HasPrefix(name, g.label+"/") || strings.HasPrefix(g.label, name+"/")
		if related && strings.Contains(g.frames, substr) {
			n++
		}
	}
	return n
}

type goroutine struct{ label, frames string }

// labelled returns the goroutines that carry a Check label, one per
// goroutine, from the goroutine profile: its records are separated by
// blank lines, each "N @ pcs", "# labels: {...}", then one
// "#\tpc\tfunc+off\tfile:line" line per frame.
func labelled() []goroutine {
	var buf bytes.Buffer
	_ = pprof.Lookup("goroutine").WriteTo(&buf, 1)
	key := `"` + label + `":"`
	var out []goroutine
	for _, rec := range strings.Split(buf.String(), "\n\n") {
		head, rest, _ := strings.Cut(rec, "\n")
		labels, frames, _ := strings.Cut(rest, "\n")
		_, id, ok := strings.Cut(labels, key)
		if !strings.HasPrefix(labels, "# labels: ") || !ok {
			continue
		}
		id, _, _ = strings.Cut(id, `"`)
		n := 1
		if count, _, ok := strings.Cut(head, " @"); ok {
			n = atoi(count)
		}
		for range n {
			out = append(out, goroutine{id, frames})
		}
	}
	return out
}

// ours reports whether a goroutine's frames run code of one of this
// module's packages (other than a test's own functions) or a go-redis
// pub/sub reader.
func ours(frames string) bool {
	if strings.Contains(frames, "leakcheck.") || strings.Contains(frames, "testing.tRunner") {
		return false
	}
	for _, line := range strings.Split(frames, "\n") {
		fields := strings.Fields(line) // "#", pc, func+off, file:line
		if len(fields) < 4 {
			continue
		}
		fn, file := fields[2], fields[3]
		rest, ok := strings.CutPrefix(fn, module)
		if ok && (strings.HasPrefix(rest, ".") || strings.HasPrefix(rest, "/")) && !strings.Contains(file, "_test.go") {
			return true
		}
		if strings.HasPrefix(fn, "github.com/redis/go-redis/v9.(*channel)") {
			return true // a pub/sub connection's reader: a subscription left open
		}
	}
	return false
}

func atoi(s string) int {
	n := 0
	for _, c := range s {
		if c < '0' || c > '9' {
			return 1
		}
		n = n*10 + int(c-'0')
	}
	return n
}
