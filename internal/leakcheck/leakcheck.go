// Package leakcheck fails a test that leaves goroutines of dlock (any
// package of this module, or the go-redis pub/sub machinery it drives)
// running after it ends.
package leakcheck

import (
	"bytes"
	"runtime"
	"strings"
	"testing"
	"time"
)

// settle bounds how long goroutines may take to wind down after a test:
// an extension or release in flight on a frozen server ends at go-redis's
// read timeout (5s by default since go-redis v9.22, 3s before), and a
// little scheduling slack on a loaded machine.
const settle = 7 * time.Second

// Check records the goroutines running now and, in tb's cleanup (register
// it before anything whose cleanup must run first, such as a server), fails
// the test if any new goroutine of ours is still running after settle.
func Check(tb testing.TB) {
	tb.Helper()
	before := ids(stacks())
	tb.Cleanup(func() {
		tb.Helper()
		var left []string
		for deadline := time.Now().Add(settle); ; {
			left = left[:0]
			for id, st := range stacks() {
				if _, ok := before[id]; !ok && ours(st) {
					left = append(left, st)
				}
			}
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

// ours reports whether a goroutine's stack runs code of one of this
// module's packages (other than a test's own functions) or a go-redis
// pub/sub reader.
func ours(stack string) bool {
	if strings.Contains(stack, "leakcheck.") || strings.Contains(stack, "testing.tRunner") {
		return false
	}
	for _, line := range strings.Split(stack, "\n") {
		rest, ok := strings.CutPrefix(line, module)
		if ok && (strings.HasPrefix(rest, ".") || strings.HasPrefix(rest, "/")) && !strings.Contains(line, "_test.") {
			return true
		}
		if strings.HasPrefix(line, "github.com/redis/go-redis/v9.(*channel)") {
			return true // a pub/sub connection's reader: a subscription left open
		}
	}
	return false
}

func stacks() map[string]string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	out := map[string]string{}
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		s := string(g)
		id, _, _ := strings.Cut(s, " [")
		out[id] = s
	}
	return out
}

func ids(m map[string]string) map[string]struct{} {
	out := make(map[string]struct{}, len(m))
	for id := range m {
		out[id] = struct{}{}
	}
	return out
}
