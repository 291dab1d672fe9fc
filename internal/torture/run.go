package torture

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"
)

// Options are a run's: what TestTorture's flags set.
type Options struct {
	Seed   uint64        // of the operation sequences and fault schedules (0: from the time)
	Budget time.Duration // how long to run rounds (0: 100s, 25s with -short)
	Round  int           // run only this round of the seed (-1, or 0 with Seed 0: all)
	Mode   string        // run every round in this mode ("": each in turn)
	Skip   []string      // modes whose rounds are skipped (a driver cannot carry ModeNoScripts)
	Out    string        // directory to save the merged history of each failing round in
	Rerun  string        // the command that reruns a seed, printed with each failure
}

// Run runs seeded rounds of random operations and faults against real
// redis-server processes, checks the invariants of doc.go over each
// round's history, and fails t for each violation, naming the seed and
// round that reproduce it.
func Run(t *testing.T, o Options) {
	seed := o.Seed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	budget := o.Budget
	if budget == 0 {
		budget = 100 * time.Second
		if testing.Short() {
			budget = 25 * time.Second
		}
	}
	if o.Round == 0 && o.Seed == 0 {
		o.Round = -1
	}
	t.Logf("torture: seed %d, budget %v (rerun: %s -torture.seed=%d)", seed, budget, o.Rerun, seed)
	c := newCluster(t)
	g0 := runtime.NumGoroutine()
	start := time.Now()
	totals := map[string]int{}
	rounds, failed, hooks := 0, 0, 0
	for round := 0; round < 1000; round++ {
		if o.Round >= 0 && round != o.Round {
			continue
		}
		p := newPlan(seed, round, testing.Short(), o.Mode)
		if slices.Contains(o.Skip, p.mode) {
			continue
		}
		// A round takes its run time plus up to ~20s of quiescing and probing.
		if rounds > 0 && time.Since(start)+p.run+20*time.Second > budget {
			break
		}
		res := runRound(t, c, p)
		rounds++
		report(t, seed, res, totals, o)
		hooks += hookCalls(res.report.Hooks)
		if !checkGoroutines(t, seed, round, g0) {
			totals["f"]++
		}
		if len(res.report.Violations) > 0 {
			failed++
		}
		if o.Round >= 0 || failed >= 3 { // enough to go on
			break
		}
	}
	t.Logf("torture: seed %d: %d rounds in %v, %d calls by Lost hooks; violations per invariant: %s", seed, rounds,
		time.Since(start).Round(time.Second), hooks, invariantCounts(totals))
}

// report logs a round's summary and fails the test for each violation
// (the first few of each invariant in full, with an excerpt of the history).
func report(t *testing.T, seed uint64, res *result, totals map[string]int, o Options) {
	r, p := res.report, res.plan
	counts := map[string]int{}
	for _, inv := range Invariants {
		counts[inv.ID] = r.Count(inv.ID)
		totals[inv.ID] += counts[inv.ID]
	}
	t.Logf("round %d mode=%s ttl=%v names=%d workers=%dg+%dp run=%v wall=%v restarts=%v kill=%v\n  ops: %s\n  faults: %s\n  checked: %s exempt-overlaps=%d%s\n  free waits (d): %s\n  lost hooks (n): %s\n  violations: %s",
		p.round, p.modeLine(), p.ttl, len(p.names), p.routines, p.procs, p.run, res.wall.Round(time.Millisecond),
		p.restarts, p.finalKill, mapLine(r.Ops), mapLine(r.Faults), mapLine(r.Checked), r.Exempt, besideLine(p, r), freeLine(r.Free), hookLine(r.Hooks), invariantCounts(counts))
	shown := map[string]int{}
	for _, v := range r.Violations {
		if shown[v.Inv]++; shown[v.Inv] > 3 {
			continue
		}
		from, to, lines := v.At-int64(300*time.Millisecond), v.At+int64(100*time.Millisecond), 50
		if v.From != 0 {
			from, to, lines = v.From, v.To, 80
		}
		t.Errorf("VIOLATION (%s) seed=%d round=%d mode=%s name=%s: %s\n  rerun: %s -torture.seed=%d -torture.round=%d\n  history around it (ms since round start):\n%s",
			v.Inv, seed, p.round, p.modeLine(), v.Name, v.Msg, o.Rerun, seed, p.round,
			Excerpt(res.history, v.Name, v.CS, from, to, res.base, lines))
	}
	for inv, n := range shown {
		if n > 3 {
			t.Errorf("… and %d more (%s) violations in round %d", n-3, inv, p.round)
		}
	}
	if len(r.Violations) > 0 {
		saveHistory(t, seed, res, o.Out)
		for id, s := range res.stderr {
			t.Logf("stderr of %s:\n%s", id, s)
		}
	}
}

// freeLine renders the free-wait summary of a round.
func freeLine(f FreeWaits) string {
	ms := func(ns int64) time.Duration { return time.Duration(ns).Round(time.Millisecond) }
	pct := 0.0
	if f.Waiting > 0 {
		pct = 100 * float64(f.Reachable) / float64(f.Waiting)
	}
	s := fmt.Sprintf("%d waits, %v of their %v outside faults (%.0f%%), %d free stretches, longest %v (bound %v)",
		f.Waits, ms(f.Reachable), ms(f.Waiting), pct, f.Stretches, ms(f.Longest), ms(f.Bound))
	if f.Multi > 0 || f.Queued > 0 {
		s += fmt.Sprintf("; %d for several permits, %d seen queued, %d held up behind one for more with their permits free (%v)",
			f.Multi, f.Queued, f.Behind, ms(f.BehindTime))
	}
	return s
}

// besideLine renders, for a semaphore round, how many holds were entered
// beside another where one of them took several permits.
func besideLine(p plan, r *Report) string {
	if p.mode != ModeSemaphore {
		return ""
	}
	return fmt.Sprintf(" beside-several-permits=%d", r.Beside)
}

// hookLine renders the calls Lost hooks made in a round, and the losses
// they were told of with no call to make ("unwatched:").
func hookLine(m map[string]int) string {
	return fmt.Sprintf("%d calls %s", hookCalls(m), mapLine(m))
}

// hookCalls counts the calls of Hooks.
func hookCalls(m map[string]int) int {
	n := 0
	for k, v := range m {
		if !strings.HasPrefix(k, "unwatched:") {
			n += v
		}
	}
	return n
}

// saveHistory writes a failing round's merged history to the directory out.
func saveHistory(t *testing.T, seed uint64, res *result, out string) {
	if out == "" {
		return
	}
	os.MkdirAll(out, 0o755)
	path := filepath.Join(out, fmt.Sprintf("seed%d-round%d.jsonl", seed, res.plan.round))
	var b bytes.Buffer
	for _, e := range res.history {
		line, _ := json.Marshal(e)
		b.Write(append(line, '\n'))
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Logf("saving the history: %v", err)
		return
	}
	t.Logf("history of round %d saved in %s", res.plan.round, path)
}

// invariantCounts renders violations per invariant as "a=0 b=0 …".
func invariantCounts(m map[string]int) string {
	var parts []string
	for _, inv := range Invariants {
		parts = append(parts, fmt.Sprintf("%s=%d", inv.ID, m[inv.ID]))
	}
	return strings.Join(parts, " ")
}

// mapLine renders a count map sorted by key.
func mapLine(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%d ", k, m[k])
	}
	return strings.TrimSpace(b.String())
}

// checkGoroutines is (f): after a round, once its clients are closed,
// the coordinator's goroutines come back to about what they were before
// the first round (proxy connections linger up to 2s; timers of released
// locks hold no goroutine).
func checkGoroutines(t *testing.T, seed uint64, round, before int) bool {
	const slack = 10
	deadline := time.Now().Add(15 * time.Second)
	for runtime.NumGoroutine() > before+slack && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before+slack {
		t.Errorf("VIOLATION (f) seed=%d round=%d: %d goroutines after the round, %d before the first; dlock's:\n%s",
			seed, round, n, before, tail(goroutineDump(), 8000))
		return false
	}
	return true
}

// goroutineDump returns the stacks of goroutines running dlock code (the
// root package and its pub/sub hub, outside this package), or all of them
// if none does.
func goroutineDump() string {
	buf := make([]byte, 8<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var ours []string
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		s := string(g)
		if strings.Contains(s, "github.com/dlockio/dlock.") || strings.Contains(s, "github.com/dlockio/dlock/internal/pubsub.") {
			ours = append(ours, s)
		}
	}
	if len(ours) == 0 {
		return string(buf)
	}
	return strings.Join(ours, "\n\n")
}
