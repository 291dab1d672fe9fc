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
	"testing"
	"time"
)

// settle bounds how long goroutines may take to wind down after a test:
// an extension or release in flight on a frozen server ends at go-redis's
// read timeout (5s by default since go-redis v9.22, 3s before), and a
// little scheduling slack on a loaded machine.
const settle = 7 * time.Second

// label is the pprof label key that marks a test's goroutines.
const label = "dlock-leakcheck"

// Check labels the calling goroutine (the test's) with tb's name and, in
// tb's cleanup (register it before anything whose cleanup must run first,
// such as a server), fails the test if any goroutine of ours that carries
// the label is still running after settle. Call it from the test's own
// goroutine, before the test starts the goroutines it checks.
func Check(tb testing.TB) {
	tb.Helper()
	id := tb.Name()
	pprof.SetGoroutineLabels(pprof.WithLabels(context.Background(), pprof.Labels(label, id)))
	tb.Cleanup(func() {
		tb.Helper()
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
	var buf bytes.Buffer
	_ = pprof.Lookup("goroutine").WriteTo(&buf, 1)
	want := `"` + label + `":"` + id + `"`
	var out []string
	// Records are separated by blank lines: "N @ pcs", "# labels: {...}",
	// then one "#\tpc\tfunc+off\tfile:line" line per frame.
	for _, rec := range strings.Split(buf.String(), "\n\n") {
		head, rest, _ := strings.Cut(rec, "\n")
		labels, frames, _ := strings.Cut(rest, "\n")
		if !strings.HasPrefix(labels, "# labels: ") || !strings.Contains(labels, want) || !ours(frames) {
			continue
		}
		n := 1
		if count, _, ok := strings.Cut(head, " @"); ok {
			n = atoi(count)
		}
		for range n {
			out = append(out, frames)
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
