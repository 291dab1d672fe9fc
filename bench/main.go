// Command bench runs the same lock workloads against dlock and the other Go
// Redis lock libraries, on redis-server processes it starts itself, and
// prints a table (and writes an SVG plot) of the results.
//
//	cd bench && go run . [-duration 2s] [-out results]
//
// W0, the server's ceiling: the commands of a lock pair with no library,
// pipelined deep, so every W1 figure can be set against what Redis can do.
// W1, uncontended: C goroutines, one lock name each, lock+unlock in a loop.
// W2, contended: C goroutines on one name, holding it for a fixed time.
// W3, quorum: 5 independent nodes, healthy, one frozen (SIGSTOP), two killed.
// W4, the lock family contended: a semaphore and a read-write lock (90%
// reads) against the in-process primitive of the same kind.
//
// For the batcher's pipelines: -w1c sets W1's goroutine counts, and its
// table shows the calls each write carried; -w0depths runs dlock's scripts
// in W0 at several depths (Redis CPU per pair against commands per write);
// -leftovers=false skips W1's slow pass over what stays in Redis. The
// server is the one REDIS_SERVER names (a script that execs redis-server
// under taskset, or in a CPU-limited cgroup, makes Redis the bottleneck):
//
//	go run . -only W0,W1 -libs dlock -w0depths 1,4,16,64 -w1c 1,4,16,64,256 -leftovers=false
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/internal/redisserver"
)

var (
	duration = flag.Duration("duration", 2*time.Second, "how long each cell of a workload runs")
	out      = flag.String("out", "results", "write OUT.md (table) and OUT.svg (plot)")
	only     = flag.String("only", "", "comma-separated workloads to run (W0,W1,W2,W3,W4); default all")
	libsFlag = flag.String("libs", "", "comma-separated libraries to run; default all")
	w0Depths = flag.String("w0depths", "", "comma-separated depths (pairs per write) at which W0 also runs dlock's scripts")
	w1Conc   = flag.String("w1c", "1,16,64", "comma-separated goroutine counts of W1")
	w1Left   = flag.Bool("leftovers", true, "run W1's pass that measures what stays in Redis")
)

func main() {
	log.SetFlags(0)
	flag.Parse()
	srv, err := redisserver.Start(redisserver.TCP())
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Stop()
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer admin.Close()

	var libs []library
	for _, l := range libraries {
		if *libsFlag == "" || slices.Contains(strings.Split(*libsFlag, ","), l.name) {
			libs = append(libs, l)
		}
	}
	want := func(w string) bool { return *only == "" || slices.Contains(strings.Split(*only, ","), w) }

	rep := &report{}
	redisVersion, _ := admin.InfoMap(context.Background(), "server").Result()
	rep.env = fmt.Sprintf("%s, %d CPUs (GOMAXPROCS %d), %s, redis-server %s over loopback TCP; %v per cell",
		cpuModel(), runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version(), redisVersion["Server"]["redis_version"], *duration)
	if want("W0") {
		for _, c := range w0Cases {
			r, err := ceiling(c, srv.Addr(), admin, w0Pairs)
			if err != nil {
				log.Fatalf("W0 %s: %v", c.name, err)
			}
			rep.w0 = append(rep.w0, r)
			log.Printf("W0 %-40s %8.0f pairs/s  redis %.2fµs/pair  client %.2fµs/pair", c.name, r.rate, float64(r.serverCPU)/1e3, float64(r.clientCPU)/1e3)
		}
	}
	if want("W0") && *w0Depths != "" {
		rs, err := depthSweep(srv.Addr(), admin, counts("-w0depths", *w0Depths))
		if err != nil {
			log.Fatalf("W0 %v", err)
		}
		for _, r := range rs {
			log.Printf("W0 %-28s %3d cmds/write %8.0f pairs/s  redis %.2fµs/pair  client %.2fµs/pair", r.name, 2*r.depth, r.rate, float64(r.serverCPU)/1e3, float64(r.clientCPU)/1e3)
		}
		rep.w0depth = rs
	}
	if want("W1") {
		for _, c := range counts("-w1c", *w1Conc) {
			for _, l := range libs {
				r, err := uncontended(l, srv.Addr(), admin, c)
				if err != nil {
					log.Fatalf("W1 %s C=%d: %v", l.name, c, err)
				}
				rep.w1 = append(rep.w1, r)
				log.Printf("W1 C=%-2d %-14s %8.0f pairs/s  p50 %v  p99 %v  %.1f allocs/pair  redis %.1fµs/pair (busy %.0f%%)  batch %.1f  %.2f reads %.1f cmds/pair",
					c, l.name, r.rate, r.p50, r.p99, r.allocs, float64(r.serverCPU)/1e3, r.rate*r.serverCPU.Seconds()*100, r.batch, r.reads, r.cmds)
			}
		}
		for _, l := range libs {
			if !*w1Left {
				break
			}
			r, err := leftovers(l, srv.Addr(), admin)
			if err != nil {
				log.Fatalf("W1 leftovers %s: %v", l.name, err)
			}
			rep.leftovers = append(rep.leftovers, r)
			log.Printf("W1 left %-14s %d names: %.2f keys %.0f bytes per name after release, %.2f keys %.0f bytes after %v",
				l.name, r.names, r.keysAfter, r.bytesAfter, r.keysKept, r.bytesKept, leftoverTTL)
		}
	}
	if want("W2") {
		rep.tripCeiling = oneTripCeiling(srv.Addr(), time.Millisecond)
		log.Printf("W2 one round trip per 1ms hold: %.0f%% of the no-Redis loop", 100*rep.tripCeiling)
		for _, hold := range []time.Duration{0, time.Millisecond} {
			for _, c := range []int{2, 8, 32} {
				base := contendedBaseline(c, hold)
				for _, l := range libs {
					if l.w1only {
						continue
					}
					r, err := contended(l, srv.Addr(), admin, c, hold)
					if err != nil {
						log.Fatalf("W2 %s C=%d hold=%v: %v", l.name, c, hold, err)
					}
					r.baseline = base
					rep.w2 = append(rep.w2, r)
					log.Printf("W2 C=%-2d hold=%-4v %-14s %7.0f acq/s  wait p50 %v p99 %v max %v  fair %.2f  %.1f cmds/acq  violations %d",
						c, hold, l.name, r.rate, r.p50, r.p99, r.max, r.fairness, r.cmds, r.violations)
				}
			}
		}
	}
	if want("W3") {
		for _, l := range libs {
			if !l.quorum {
				continue
			}
			rs, err := quorumRuns(l)
			if err != nil {
				log.Fatalf("W3 %s: %v", l.name, err)
			}
			for _, r := range rs {
				log.Printf("W3 %-14s %-16s acquire p50 %v p99 %v  release p50 %v p99 %v", l.name, r.scenario, r.acqP50, r.acqP99, r.relP50, r.relP99)
			}
			rep.w3 = append(rep.w3, rs...)
		}
	}
	if want("W4") {
		rs, err := family(srv.Addr(), admin)
		if err != nil {
			log.Fatalf("W4 %v", err)
		}
		for _, r := range rs {
			log.Printf("W4 %-16s C=%-2d hold=%v %7.0f acq/s (in process %.0f)  wait p50 %v p99 %v  redis %.1fµs/acq  most inside %d  violations %d",
				r.kind, r.c, r.hold, r.rate, r.local, r.p50, r.p99, float64(r.serverCPU)/1e3, r.most, r.violations)
			if r.shared.n > 0 && r.excl.n > 0 {
				log.Printf("W4 %-16s C=%-2d reads %d wait p50 %v p99 %v, writes %d wait p50 %v p99 %v (in process: reads p50 %v p99 %v, writes p50 %v p99 %v)",
					r.kind, r.c, r.shared.n, r.shared.p50, r.shared.p99, r.excl.n, r.excl.p50, r.excl.p99,
					r.localShared.p50, r.localShared.p99, r.localExcl.p50, r.localExcl.p99)
			}
		}
		rep.w4 = rs
	}
	if err := rep.write(*out); err != nil {
		log.Fatal(err)
	}
	fmt.Print(rep.markdown())
}

// counts parses a flag's comma-separated list of positive numbers.
func counts(flagName, list string) []int {
	var cs []int
	for _, f := range strings.Split(list, ",") {
		c, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || c < 1 {
			log.Fatalf("%s: %q is not a positive number", flagName, f)
		}
		cs = append(cs, c)
	}
	return cs
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return runtime.GOARCH
}

// reset empties the server between cells.
func reset(admin *redis.Client) { admin.FlushAll(context.Background()) }

type w1Result struct {
	lib      string
	c        int
	rate     float64
	p50, p99 time.Duration
	allocs   float64
	// serverCPU is the CPU time redis-server spent per pair (user + system,
	// from INFO cpu): the cost that bounds throughput once Redis is busy.
	serverCPU time.Duration
	batch     float64 // calls per pipeline write, for a library that batches (0: not measured)
	// reads and cmds are the server's socket reads and commands (a script's
	// own calls among them) per pair (INFO stats, commandstats).
	reads, cmds float64
}

// uncontended runs W1: c goroutines, one name each.
func uncontended(l library, addr string, admin *redis.Client, c int) (w1Result, error) {
	reset(admin)
	newHandle, closeFn, err := l.open([]string{addr}, ttl)
	if err != nil {
		return w1Result{}, err
	}
	defer closeFn()
	ctx, cancel := context.WithTimeout(context.Background(), *duration+30*time.Second)
	defer cancel()
	handles := make([]handle, c)
	for g := range handles {
		handles[g] = newHandle(fmt.Sprintf("w1:%d", g))
	}
	var ms0, ms1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms0)
	cpu0 := serverCPU(admin)
	reads0, cmds0 := serverCounts(admin)
	bh, isBatched := handles[0].(batched)
	var calls0, writes0 uint64
	if isBatched {
		calls0, writes0 = bh.batches()
	}
	start := time.Now()
	all, err := pairLoop(ctx, c, start.Add(*duration), 0, func(g, _ int) handle { return handles[g] })
	elapsed := time.Since(start)
	runtime.ReadMemStats(&ms1)
	cpu1 := serverCPU(admin)
	reads1, cmds1 := serverCounts(admin)
	if err != nil {
		return w1Result{}, err
	}
	r := w1Result{lib: l.name, c: c, rate: float64(len(all)) / elapsed.Seconds()}
	if isBatched {
		if calls1, writes1 := bh.batches(); writes1 > writes0 {
			r.batch = float64(calls1-calls0) / float64(writes1-writes0)
		}
	}
	if len(all) > 0 {
		r.p50, r.p99 = all[len(all)/2], all[len(all)*99/100]
		r.allocs = float64(ms1.Mallocs-ms0.Mallocs) / float64(len(all))
		r.serverCPU = (cpu1 - cpu0) / time.Duration(len(all))
		r.reads, r.cmds = (reads1-reads0)/float64(len(all)), (cmds1-cmds0)/float64(len(all))
	}
	return r, nil
}

// pairLoop runs lock+unlock pairs from c goroutines until stop, or until
// each has done most pairs (0: no limit); pair i of goroutine g is on
// handleFor(g, i). It returns every pair's latency, sorted.
func pairLoop(ctx context.Context, c int, stop time.Time, most int, handleFor func(g, i int) handle) ([]time.Duration, error) {
	lat := make([][]time.Duration, c)
	errs := make([]error, c)
	var wg sync.WaitGroup
	for g := range c {
		lat[g] = make([]time.Duration, 0, 1<<14)
		wg.Go(func() {
			for i := 0; (most == 0 || i < most) && time.Now().Before(stop); i++ {
				h := handleFor(g, i)
				t0 := time.Now()
				if errs[g] = h.lock(ctx); errs[g] != nil {
					return
				}
				if errs[g] = h.unlock(ctx); errs[g] != nil {
					return
				}
				lat[g] = append(lat[g], time.Since(t0))
			}
		})
	}
	wg.Wait()
	all := slices.Concat(lat...)
	slices.Sort(all)
	return all, errors.Join(errs...)
}

// serverCounts returns the server's socket reads (INFO stats:
// total_reads_processed) and the commands it has run (INFO commandstats,
// INFO's own left out) so far.
func serverCounts(admin *redis.Client) (reads, cmds float64) {
	info, err := admin.Info(context.Background(), "stats", "commandstats").Result()
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(info, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		if k == "total_reads_processed" {
			reads, _ = strconv.ParseFloat(v, 64)
		} else if strings.HasPrefix(k, "cmdstat_") && k != "cmdstat_info" {
			calls, _, _ := strings.Cut(strings.TrimPrefix(v, "calls="), ",")
			n, _ := strconv.ParseFloat(calls, 64)
			cmds += n
		}
	}
	return reads, cmds
}

// serverCPU returns the CPU time the server has used so far (INFO cpu:
// used_cpu_user + used_cpu_sys).
func serverCPU(admin *redis.Client) time.Duration {
	info, err := admin.Info(context.Background(), "cpu").Result()
	if err != nil {
		return 0
	}
	var total float64
	for _, line := range strings.Split(info, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		if k == "used_cpu_user" || k == "used_cpu_sys" {
			f, _ := strconv.ParseFloat(v, 64)
			total += f
		}
	}
	return time.Duration(total * float64(time.Second))
}

type w2Result struct {
	lib           string
	c             int
	hold          time.Duration
	rate          float64
	baseline      float64 // acquisitions/s of the same loop around a sync.Mutex
	p50, p99, max time.Duration
	fairness      float64 // fewest / most acquisitions of one goroutine
	cmds          float64 // commands the server ran per acquisition
	violations    int64
	waits         []time.Duration
}

// contended runs W2: c goroutines on one name, each holding it for hold.
func contended(l library, addr string, admin *redis.Client, c int, hold time.Duration) (w2Result, error) {
	r, err := contendedRun(l, addr, admin, c, hold, *duration)
	if err != nil {
		return r, err
	}
	// A second, shorter run through a counting proxy: what the library sends.
	p, err := newCountingProxy(addr)
	if err != nil {
		return r, err
	}
	counted, err := contendedRun(l, p.addr(), admin, c, hold, *duration/2)
	p.close()
	if err != nil {
		return r, err
	}
	if n := len(counted.waits); n > 0 {
		r.cmds = float64(p.commands.Load()) / float64(n)
	}
	r.violations += counted.violations
	return r, nil
}

func contendedRun(l library, addr string, admin *redis.Client, c int, hold, duration time.Duration) (w2Result, error) {
	reset(admin)
	newHandle, closeFn, err := l.open([]string{addr}, ttl)
	if err != nil {
		return w2Result{}, err
	}
	defer closeFn()
	ctx, cancel := context.WithTimeout(context.Background(), duration+30*time.Second)
	defer cancel()
	var inside, violations atomic.Int64
	waits := make([][]time.Duration, c)
	errs := make(chan error, c)
	start := time.Now()
	stop := start.Add(duration)
	var wg sync.WaitGroup
	for g := range c {
		h := newHandle("w2")
		wg.Go(func() {
			for time.Now().Before(stop) {
				t0 := time.Now()
				lctx, lcancel := context.WithDeadline(ctx, stop.Add(5*time.Second))
				err := h.lock(lctx)
				lcancel()
				if err != nil {
					if time.Now().After(stop) {
						return // gave up at the end of the run
					}
					errs <- err
					return
				}
				waits[g] = append(waits[g], time.Since(t0))
				if inside.Add(1) != 1 {
					violations.Add(1)
				}
				if hold > 0 {
					time.Sleep(hold)
				}
				inside.Add(-1)
				if err := h.unlock(ctx); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	if err := <-errs; err != nil {
		return w2Result{}, err
	}
	r := w2Result{lib: l.name, c: c, hold: hold, violations: violations.Load()}
	fewest, most := -1, 0
	for _, w := range waits {
		if fewest < 0 || len(w) < fewest {
			fewest = len(w)
		}
		most = max(most, len(w))
	}
	all := slices.Concat(waits...)
	slices.Sort(all)
	r.waits = all
	r.rate = float64(len(all)) / elapsed.Seconds()
	if len(all) > 0 {
		r.p50, r.p99, r.max = all[len(all)/2], all[len(all)*99/100], all[len(all)-1]
	}
	if most > 0 {
		r.fairness = float64(fewest) / float64(most)
	}
	return r, nil
}

// contendedBaseline runs the W2 loop around a sync.Mutex: what the harness
// reaches with no Redis at all.
func contendedBaseline(c int, hold time.Duration) float64 {
	var mu sync.Mutex
	var n atomic.Int64
	stop := time.Now().Add(*duration / 2)
	start := time.Now()
	var wg sync.WaitGroup
	for range c {
		wg.Go(func() {
			for time.Now().Before(stop) {
				mu.Lock()
				n.Add(1)
				if hold > 0 {
					time.Sleep(hold)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return float64(n.Load()) / time.Since(start).Seconds()
}

// oneTripCeiling is the throughput, relative to a loop that only sleeps
// hold, of a loop that sleeps hold and then makes one round trip to Redis
// (PING): what any lock reaches whose handover crosses Redis once, on this
// machine, where a round trip after an idle pause costs a wake-up on each
// side. The two loops alternate in short slices, so noise hits both alike.
func oneTripCeiling(addr string, hold time.Duration) float64 {
	rdb := goRedis(addr)
	defer rdb.Close()
	ctx := context.Background()
	var sleepOnly, withTrip time.Duration
	var n int
	for end := time.Now().Add(*duration); time.Now().Before(end); {
		for _, trip := range []bool{false, true} {
			t0 := time.Now()
			for range 20 {
				time.Sleep(hold)
				if trip {
					rdb.Ping(ctx)
				}
			}
			if trip {
				withTrip += time.Since(t0)
			} else {
				sleepOnly += time.Since(t0)
			}
		}
		n++
	}
	if withTrip == 0 {
		return 0
	}
	return float64(sleepOnly) / float64(withTrip)
}

type w3Result struct {
	lib, scenario  string
	acqP50, acqP99 time.Duration
	relP50, relP99 time.Duration
	n              int
}

// quorumRuns runs W3 for one library: lock+unlock in a loop, one goroutine,
// on fresh names, first on one of the nodes alone (the baseline a quorum is
// compared with), then over 5 nodes that are healthy, then have one frozen,
// then two killed. Each scenario is bounded by -duration and 200 pairs.
func quorumRuns(l library) ([]w3Result, error) {
	var srvs []*redisserver.Server
	var addrs []string
	defer func() {
		for _, s := range srvs {
			s.Resume()
			s.Stop()
		}
	}()
	for range 5 {
		s, err := redisserver.Start(redisserver.TCP())
		if err != nil {
			return nil, err
		}
		srvs = append(srvs, s)
		addrs = append(addrs, s.Addr())
	}
	single, closeSingle, err := l.open(addrs[:1], ttl)
	if err != nil {
		return nil, err
	}
	defer closeSingle()
	quorum, closeQuorum, err := l.open(addrs, ttl)
	if err != nil {
		return nil, err
	}
	defer closeQuorum()
	var out []w3Result
	for _, sc := range []struct {
		name      string
		newHandle func(string) handle
		inject    func()
	}{
		{"one node (baseline)", single, func() {}},
		{"healthy", quorum, func() {}},
		{"1 of 5 frozen", quorum, func() { srvs[0].Pause() }},
		{"2 of 5 killed", quorum, func() { srvs[0].Resume(); srvs[1].Kill(); srvs[2].Kill() }},
	} {
		newHandle := sc.newHandle
		sc.inject()
		var acq, rel []time.Duration
		stop := time.Now().Add(*duration)
		for i := 0; i < 200 && time.Now().Before(stop); i++ {
			h := newHandle(fmt.Sprintf("w3:%s:%d", sc.name, i))
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			t0 := time.Now()
			err := h.lock(ctx)
			t1 := time.Now()
			if err == nil {
				err = h.unlock(ctx)
			}
			cancel()
			if err != nil {
				return nil, fmt.Errorf("%s: %w", sc.name, err)
			}
			acq, rel = append(acq, t1.Sub(t0)), append(rel, time.Since(t1))
		}
		slices.Sort(acq)
		slices.Sort(rel)
		out = append(out, w3Result{lib: l.name, scenario: sc.name, n: len(acq),
			acqP50: acq[len(acq)/2], acqP99: acq[len(acq)*99/100], relP50: rel[len(rel)/2], relP99: rel[len(rel)*99/100]})
	}
	return out, nil
}
