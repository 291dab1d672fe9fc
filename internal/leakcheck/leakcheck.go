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

// checked holds the names of the tests Check was called for.
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
	id := tb.Name()
	if _, again := checked.LoadOrStore(id, true); again {
		return
	}
	pprof.SetGoroutineLabels(pprof.WithLabels(context.Background(), pprof.Labels(label, id)))
	tb.Cleanup(func() {
		tb.Helper()
		defer checked.Delete(id)
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

// Count returns how many goroutines of tb's (tb's or its parent's, for a
// subtest that runs in its parent's goroutines, or one of its subtests')
// run a function whose name or file contains substr. It fails tb unless
// Check was called for tb or a test above it: it would count nothing.
// Goroutines a timer's callback starts (time.AfterFunc) carry no label and
// are not counted: see Sweep.
func Count(tb testing.TB, substr string) int {
	tb.Helper()
	name, n := tb.Name(), 0
	if !checkedAbove(name) {
		tb.Fatalf("leakcheck.Count(%q) in %s, for which leakcheck.Check was not called: it would count nothing", substr, name)
	}
	for _, g := range goroutines() {
		if g.label == "" {
			continue
		}
		related := g.label == name || strings.HasPrefix(name, g.label+"/") || strings.HasPrefix(g.label, name+"/")
		if related && strings.Contains(g.frames, substr) {
			n++
		}
	}
	return n
}

// checkedAbove reports whether Check was called for the test name or one
// of its parents.
func checkedAbove(name string) bool {
	for {
		if _, ok := checked.Load(name); ok {
			return true
		}
		i := strings.LastIndex(name, "/")
		if i < 0 {
			return false
		}
		name = name[:i]
	}
}

// Sweep waits up to settle for every goroutine of ours in the process to
// end, labelled or not, and returns the frames of those still running. Call
// it from TestMain once the tests have run and their shared servers are
// stopped: it catches what Check cannot see, the goroutines that timers'
// callbacks start (a lease's watchdog, its expiry), which carry no label.
func Sweep() []string {
	var left []string
	for deadline := time.Now().Add(settle); ; time.Sleep(20 * time.Millisecond) {
		left = left[:0]
		for _, g := range goroutines() {
			if ours(g.frames) {
				left = append(left, g.frames)
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
	}
}

// running returns the frames of the goroutines labelled id that run code
// of ours, one per goroutine.
func running(id string) []string {
	var out []string
	for _, g := range goroutines() {
		if g.label == id && ours(g.frames) {
			out = append(out, g.frames)
		}
	}
	return out
}

type goroutine struct{ label, frames string }

// goroutines returns the process's goroutines, one per goroutine, with the
// Check label each carries ("" for none), from the goroutine profile: a
// header line, then records separated by blank lines, each "N @ pcs", then
// "# labels: {...}" for a labelled one, then one
// "#\tpc\tfunc+off\tfile:line" line per frame.
func goroutines() []goroutine {
	var buf bytes.Buffer
	_ = pprof.Lookup("goroutine").WriteTo(&buf, 1)
	key := `"` + label + `":"`
	var out []goroutine
	_, recs, _ := strings.Cut(buf.String(), "\n") // (past the header line, which heads the first record)
	for _, rec := range strings.Split(recs, "\n\n") {
		head, frames, _ := strings.Cut(rec, "\n")
		count, _, ok := strings.Cut(head, " @")
		if !ok {
			continue
		}
		id := ""
		if labels, rest, ok := strings.Cut(frames, "\n"); ok && strings.HasPrefix(labels, "# labels: ") {
			frames = rest
			if _, v, ok := strings.Cut(labels, key); ok {
				id, _, _ = strings.Cut(v, `"`)
			}
		}
		for range atoi(count) {
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
