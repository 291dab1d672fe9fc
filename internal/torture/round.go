package torture

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// plan is a round's seeded choices.
type plan struct {
	round     int
	seed      uint64
	mode      string
	ttl       time.Duration
	names     []string
	run       time.Duration // how long workers start operations
	routines  int           // goroutine workers
	procs     int           // worker processes
	restarts  bool          // node restarts allowed (exempt windows)
	sizes     bool          // a worker changes the semaphores' kept sizes (size.go): semaphore rounds without restarts
	permits   int           // the N of a semaphore round's semaphores, one of SemPermits; 1 in other rounds
	finalKill bool          // SIGKILL a worker process as the run ends
}

// roundSeed derives a round's seed from the test's seed (splitmix64), so
// that -torture.round=N replays round N alone.
func roundSeed(seed uint64, round int) uint64 {
	z := seed + uint64(round+1)*0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

func newPlan(seed uint64, round int, short bool, only string) plan {
	rs := roundSeed(seed, round)
	rng := rand.New(rand.NewPCG(rs, 1))
	p := plan{round: round, seed: rs, mode: Modes[(int(seed%uint64(len(Modes)))+round)%len(Modes)]}
	if only != "" {
		p.mode = only
	}
	p.ttl = time.Duration(1000+rng.IntN(1000)) * time.Millisecond
	for i := range 2 + rng.IntN(2) {
		p.names = append(p.names, fmt.Sprintf("n%d", i))
	}
	if p.mode == ModeMulti { // sets of two or more, and contention on each name
		p.names = append(p.names, fmt.Sprintf("n%d", len(p.names)))
	}
	p.run = time.Duration(4000+rng.IntN(3000)) * time.Millisecond
	p.routines = 3 + rng.IntN(3)
	p.procs = 1 + rng.IntN(2)
	if short {
		p.run, p.routines, p.procs = p.run/2, 3, 1
	}
	p.restarts = rng.IntN(2) == 0
	p.sizes = p.mode == ModeSemaphore && !p.restarts
	p.finalKill = rng.IntN(5) < 2
	p.permits = 1
	if p.mode == ModeSemaphore { // (drawn last, and only here: other rounds' seeds replay as before)
		p.permits = SemPermits[rng.IntN(len(SemPermits))]
	}
	return p
}

// modeLine renders a round's mode for its summary, with a semaphore
// round's N.
func (p plan) modeLine() string {
	if p.mode == ModeSemaphore {
		return fmt.Sprintf("%s permits=%d", p.mode, p.permits)
	}
	return p.mode
}

// result is what a round produced.
type result struct {
	plan    plan
	history []Event
	report  *Report
	base    int64 // the round's start, for excerpts
	stderr  map[string]string
	wall    time.Duration
}

// runRound runs one round: workers and faults for plan.run, then quiesce,
// scan, probe, and check.
func runRound(t *testing.T, c *cluster, p plan) *result {
	n := nodeCount(p.mode)
	c.reset(t, n)
	dir := filepath.Join(t.TempDir(), fmt.Sprintf("round%d", p.round))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	coord, err := NewRecorder(filepath.Join(dir, "coord.jsonl"), "coord")
	if err != nil {
		t.Fatal(err)
	}
	defer coord.Close()
	res := &result{plan: p, base: now(), stderr: map[string]string{}}
	stop := res.base + int64(p.run)
	cfgs := workerConfigs(c, p, n, dir, stop)

	var wg sync.WaitGroup
	inj := &Injector{T: c.targets(n), TTL: p.ttl, Rng: rand.New(rand.NewPCG(p.seed, 2)), Rec: coord, Restart: p.restarts}
	for _, cfg := range cfgs[:p.routines] {
		w, err := NewWorker(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if len(w.closers) == 0 { // (a Driver's connections are no go-redis clients)
			inj.T.Workers = append(inj.T.Workers, w)
		}
		wg.Go(func() { w.Run(); w.Close() })
	}
	procs := startProcs(t, cfgs[p.routines:], dir)

	for _, pr := range procs {
		inj.T.Procs, inj.T.ProcIDs = append(inj.T.Procs, pr.cmd.Process), append(inj.T.ProcIDs, pr.id)
	}
	injDone := make(chan struct{})
	go func() { defer close(injDone); inj.Run(stop) }()
	killed := finalKill(p, procs, coord, stop)

	waitWorkers(t, &wg, procs, coord, stop, res)
	<-injDone
	if killed == 0 && inj.Counts[FaultClientClose] > 0 {
		killed = stop // a worker whose client was closed leaves its leases to expire, as a killed one does
	}
	// Requests a delay fault held are delivered after it heals: let them
	// land (they are what can leave a lease nobody holds) before scanning.
	time.Sleep(1500 * time.Millisecond)
	quiesce(t, c, p, n, cfgs[0], coord, killed, inj.Restarted)
	coord.Close()
	res.wall = time.Duration(now() - res.base)
	res.history, err = LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	res.report = Check(res.history, Params{TTL: p.ttl, Permits: p.permits, RW: p.mode == ModeRW})
	for k, v := range inj.Counts {
		res.report.Faults[k] = v
	}
	return res
}

// workerConfigs returns the goroutine workers' configs, then the processes'.
func workerConfigs(c *cluster, p plan, n int, dir string, stop int64) []WorkerConfig {
	var out []WorkerConfig
	for i := range p.routines + p.procs {
		id := fmt.Sprintf("g%d", i)
		if i >= p.routines {
			id = fmt.Sprintf("p%d", i-p.routines)
		}
		out = append(out, WorkerConfig{
			ID: id, Seed: p.seed ^ uint64(i+1)*0x51ed27, Mode: p.mode, Names: p.names,
			Prefix: fmt.Sprintf("t%d:", p.round), TTL: p.ttl, Nodes: c.addrs(n),
			GuardNet: c.guard.Network(), GuardAddr: c.guard.Addr(), GuardKey: fmt.Sprintf("guard:%d:", p.round),
			Stop: stop, MaxOps: 5000, History: filepath.Join(dir, id+".jsonl"), Permits: p.permits,
			Sizer: p.sizes && i == 0, // (a goroutine worker, one of 3 to 5: no process pause holds its requests)
		})
	}
	return out
}

// proc is a worker process.
type proc struct {
	id     string
	cmd    *exec.Cmd
	stderr string // file
	exited chan struct{}
}

// startProcs re-executes the test binary as worker processes (TestMain
// sees WorkerEnv). Each is killed in cleanup if still running, and dies
// with the test process (Pdeathsig).
func startProcs(t *testing.T, cfgs []WorkerConfig, dir string) []*proc {
	var out []*proc
	for _, cfg := range cfgs {
		b, _ := json.Marshal(cfg)
		path := filepath.Join(dir, cfg.ID+".json")
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		errf, err := os.Create(filepath.Join(dir, cfg.ID+".stderr"))
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), WorkerEnv+"="+path)
		cmd.Stdout, cmd.Stderr = errf, errf
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		p := &proc{id: cfg.ID, cmd: cmd, stderr: errf.Name(), exited: make(chan struct{})}
		go func() { cmd.Wait(); errf.Close(); close(p.exited) }()
		t.Cleanup(func() {
			cmd.Process.Signal(syscall.SIGCONT)
			cmd.Process.Kill()
			<-p.exited
		})
		out = append(out, p)
	}
	return out
}

// finalKill, in rounds that plan it, SIGKILLs a worker process just before
// the run ends, whatever it holds: its leases must expire by themselves.
// It returns when the kill happened (0: none).
func finalKill(p plan, procs []*proc, rec *Recorder, stop int64) int64 {
	if !p.finalKill || len(procs) == 0 {
		return 0
	}
	time.Sleep(time.Duration(stop - now() - int64(p.ttl/4)))
	pr := procs[0]
	e := Event{Op: OpFault, Note: FaultWorkerKill, Name: pr.id, Inv: now()}
	pr.cmd.Process.Kill()
	e.Ret = now()
	rec.Add(e)
	return e.Ret
}

// workerDeadline bounds how long after the stop time workers may take to
// finish: an operation started just before it (contexts up to 3×TTL, a
// Do's critical section, a paused process resumed) and the final releases.
const workerDeadline = 45 * time.Second

// waitWorkers waits for goroutine workers and processes. A process that
// does not finish is sent SIGQUIT (for its goroutine dump) and killed; a
// goroutine worker that does not finish ends the test with a dump.
func waitWorkers(t *testing.T, wg *sync.WaitGroup, procs []*proc, rec *Recorder, stop int64, res *result) {
	deadline := time.Unix(0, stop).Add(workerDeadline)
	for _, pr := range procs {
		select {
		case <-pr.exited:
		case <-time.After(time.Until(deadline)):
			pr.cmd.Process.Signal(syscall.SIGCONT)
			pr.cmd.Process.Signal(syscall.SIGQUIT)
			select {
			case <-pr.exited:
			case <-time.After(5 * time.Second):
				pr.cmd.Process.Kill()
				<-pr.exited
			}
			rec.Add(Event{Op: OpHung, Inv: now(), Note: pr.id, Err: "see its stderr below"})
		}
		if b, err := os.ReadFile(pr.stderr); err == nil && len(b) > 0 {
			res.stderr[pr.id] = tail(string(b), 6000)
		}
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Until(deadline)):
		t.Fatalf("seed round %d: goroutine workers did not finish within %v of the stop time:\n%s",
			res.plan.round, workerDeadline, goroutineDump())
	}
}

// tail returns the end of s.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

// quiesce runs the checks that need a quiet system: the key scan (e)
// before and after the liveness probe (d).
func quiesce(t *testing.T, c *cluster, p plan, n int, cfg WorkerConfig, rec *Recorder, killed int64, restarted map[int]bool) {
	rdbs := c.directClients(n)
	defer func() {
		for _, r := range rdbs {
			r.Close()
		}
	}()
	maxLease := 4*p.ttl + p.ttl/2 // the longest Extend, and the longest lock-delay (drawOpts)
	var grace time.Duration       // a killed worker's leases and queue entries expire on their own
	if killed != 0 {
		grace = maxLease + 2*max(p.ttl, time.Second)
	}
	scanInto := func(when string) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		keys, err := scan(ctx, rdbs, cfg.Prefix)
		if err != nil {
			t.Fatalf("scan: %v", err)
		}
		bad, excused := leftovers(keys, cfg.Prefix, maxLease, grace, restarted)
		for _, b := range bad {
			// Tok is the key's value: for a lock key, the token of the
			// lease it was left by, whose history the report shows.
			rec.Add(Event{Op: OpLeftover, Name: b.name(cfg.Prefix), Tok: b.val, Inv: now(), Note: when + ": " + b.String()})
		}
		if len(excused) > 0 {
			rec.Add(Event{Op: OpLeftover + "-excused", Inv: now(), Note: strings.Join(excused, "; ")})
		}
	}
	scanInto("after the run")
	bound := p.ttl + max(p.ttl, time.Second) + p.ttl + 2*time.Second
	if killed != 0 {
		bound += maxLease
	}
	probe(rec, cfg, rdbs, bound)
	scanInto("after the probe")
}
