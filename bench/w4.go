package main

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
)

// W4, the lock family under contention: C goroutines on one name of a kind
// that lets several holders in at once, each holding it for hold, in a
// loop. The same loop around the in-process primitive of that kind (a
// sync.Mutex for the lock, a buffered channel of N for a semaphore, a
// sync.RWMutex for the read-write lock, one hold in ten a write) gives the
// harness's ceiling, measured in the same cell. No other Go library offers
// these kinds, so the in-process one is the baseline.

// familyKind is one W4 workload: how goroutine g takes its i-th hold, from
// a dlock Client and in process. A hold reports whether it is exclusive
// (a writer's); limit is how many non-exclusive holders may be in at once.
type familyKind struct {
	name  string
	limit int
	dlock func(c *dlock.Client) (taker, error)
	local func() taker
}

// taker takes goroutine g's i-th hold and returns how to give it back.
type taker func(ctx context.Context, g, i int) (release func(context.Context) error, excl bool, err error)

const semPermits = 4

var familyKinds = []familyKind{
	{
		// The fair lock, for reference: the kinds below against it.
		name:  "lock",
		limit: 1,
		dlock: func(c *dlock.Client) (taker, error) {
			return func(ctx context.Context, _, _ int) (func(context.Context) error, bool, error) {
				l, err := c.Acquire(ctx, "w4")
				return heldBy(l, true, err)
			}, nil
		},
		local: func() taker {
			var mu sync.Mutex
			return func(ctx context.Context, _, _ int) (func(context.Context) error, bool, error) {
				mu.Lock()
				return func(context.Context) error { mu.Unlock(); return nil }, true, nil
			}
		},
	},
	{
		name:  fmt.Sprintf("semaphore N=%d", semPermits),
		limit: semPermits,
		dlock: func(c *dlock.Client) (taker, error) {
			s, err := c.Semaphore("w4", semPermits)
			if err != nil {
				return nil, err
			}
			return func(ctx context.Context, _, _ int) (func(context.Context) error, bool, error) {
				l, err := s.Acquire(ctx)
				return heldBy(l, false, err)
			}, nil
		},
		local: func() taker {
			ch := make(chan struct{}, semPermits)
			return func(ctx context.Context, _, _ int) (func(context.Context) error, bool, error) {
				ch <- struct{}{}
				return func(context.Context) error { <-ch; return nil }, false, nil
			}
		},
	},
	{
		// The read-write lock, one hold in rwWriteEvery a write: readers
		// share it, a writer excludes everyone.
		name:  fmt.Sprintf("rwmutex %d%% writes", 100/rwWriteEvery),
		limit: math.MaxInt32,
		dlock: func(c *dlock.Client) (taker, error) {
			rw, err := c.RWMutex("w4")
			if err != nil {
				return nil, err
			}
			return func(ctx context.Context, g, i int) (func(context.Context) error, bool, error) {
				side, w := rw.Reader(), rwWrites(g, i)
				if w {
					side = rw.Writer()
				}
				l, err := side.Acquire(ctx)
				return heldBy(l, w, err)
			}, nil
		},
		local: func() taker {
			var mu sync.RWMutex
			return func(ctx context.Context, g, i int) (func(context.Context) error, bool, error) {
				if rwWrites(g, i) {
					mu.Lock()
					return func(context.Context) error { mu.Unlock(); return nil }, true, nil
				}
				mu.RLock()
				return func(context.Context) error { mu.RUnlock(); return nil }, false, nil
			}
		},
	},
}

// heldBy is a taker's answer for a dlock hold l, or for its error.
func heldBy(l *dlock.Lock, excl bool, err error) (func(context.Context) error, bool, error) {
	if err != nil {
		return nil, false, err
	}
	return l.Release, excl, nil
}

// rwWriteEvery makes one hold in so many of the read-write kind a write.
const rwWriteEvery = 10

// rwWrites reports whether goroutine g's i-th hold of the read-write kind
// is a write: one in rwWriteEvery, staggered across goroutines so that
// writes come evenly over the run.
func rwWrites(g, i int) bool { return (g+i)%rwWriteEvery == 0 }

type w4Result struct {
	kind          string
	c             int
	hold          time.Duration
	rate          float64 // acquisitions/s
	local         float64 // acquisitions/s of the in-process primitive
	p50, p99, max time.Duration
	serverCPU     time.Duration // redis-server CPU per acquisition
	most          int64         // most holders seen at once
	violations    int64
	// For a kind with both shared and exclusive holds (the read-write
	// lock): the waits of each side apart, here and in process.
	shared, excl, localShared, localExcl waitStats
}

// waitStats sums up the waits of one side of a read-write kind.
type waitStats struct {
	n        int
	p50, p99 time.Duration
}

func statsOf(sorted []time.Duration) waitStats {
	n := len(sorted)
	if n == 0 {
		return waitStats{}
	}
	return waitStats{n: n, p50: sorted[n/2], p99: sorted[n*99/100]}
}

// family runs W4's cells for every kind.
func family(addr string, admin *redis.Client) ([]w4Result, error) {
	var out []w4Result
	for _, k := range familyKinds {
		for _, c := range []int{8, 32} {
			r, err := familyCell(k, addr, admin, c, time.Millisecond)
			if err != nil {
				return out, fmt.Errorf("%s C=%d: %w", k.name, c, err)
			}
			out = append(out, r)
		}
	}
	return out, nil
}

func familyCell(k familyKind, addr string, admin *redis.Client, c int, hold time.Duration) (w4Result, error) {
	reset(admin)
	rdb := goRedis(addr)
	defer rdb.Close()
	dc, err := dlock.New(rdb, dlock.LeaseTTL(ttl))
	if err != nil {
		return w4Result{}, err
	}
	take, err := k.dlock(dc)
	if err != nil {
		return w4Result{}, err
	}
	r := w4Result{kind: k.name, c: c, hold: hold}
	local := familyLoop(k.local(), k.limit, c, hold, *duration/2)
	r.local = local.rate
	r.localShared, r.localExcl = statsOf(local.shared), statsOf(local.excl)
	cpu0 := serverCPU(admin)
	run := familyLoop(take, k.limit, c, hold, *duration)
	cpu1 := serverCPU(admin)
	if run.err != nil {
		return r, run.err
	}
	r.rate, r.most, r.violations = run.rate, run.most, run.violations
	r.shared, r.excl = statsOf(run.shared), statsOf(run.excl)
	if n := len(run.waits); n > 0 {
		r.p50, r.p99, r.max = run.waits[n/2], run.waits[n*99/100], run.waits[n-1]
		r.serverCPU = (cpu1 - cpu0) / time.Duration(n)
	}
	return r, nil
}

type familyRun struct {
	rate             float64
	waits            []time.Duration // every hold's, sorted
	shared, excl     []time.Duration // the same, of shared and of exclusive holds
	most, violations int64
	err              error
}

// familyLoop runs c goroutines taking holds from take for d, each held for
// hold, and counts the holders inside: more than limit, or anyone beside an
// exclusive holder, is a violation.
func familyLoop(take taker, limit, c int, hold, d time.Duration) familyRun {
	var (
		inside, excl, most, violations atomic.Int64
		wg                             sync.WaitGroup
		errOnce                        sync.Once
		run                            familyRun
	)
	ctx, cancel := context.WithTimeout(context.Background(), d+30*time.Second)
	defer cancel()
	waits := make([][2][]time.Duration, c) // goroutine g's shared and exclusive holds' waits
	start := time.Now()
	stop := start.Add(d)
	for g := range c {
		wg.Go(func() {
			for i := 0; time.Now().Before(stop); i++ {
				t0 := time.Now()
				lctx, lcancel := context.WithDeadline(ctx, stop.Add(5*time.Second))
				release, x, err := take(lctx, g, i)
				lcancel()
				if err != nil {
					if time.Now().Before(stop) {
						errOnce.Do(func() { run.err = err })
					}
					return
				}
				side := 0
				if x {
					side = 1
					excl.Add(1)
				}
				waits[g][side] = append(waits[g][side], time.Since(t0))
				n := inside.Add(1)
				if n > int64(limit) || (excl.Load() > 0 && n > 1) {
					violations.Add(1)
				}
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				time.Sleep(hold)
				inside.Add(-1)
				if x {
					excl.Add(-1)
				}
				if err := release(ctx); err != nil {
					errOnce.Do(func() { run.err = err })
					return
				}
			}
		})
	}
	wg.Wait()
	for g := range waits {
		run.shared = append(run.shared, waits[g][0]...)
		run.excl = append(run.excl, waits[g][1]...)
	}
	run.waits = slices.Concat(run.shared, run.excl)
	for _, w := range [][]time.Duration{run.waits, run.shared, run.excl} {
		slices.Sort(w)
	}
	run.rate = float64(len(run.waits)) / time.Since(start).Seconds()
	run.most, run.violations = most.Load(), violations.Load()
	return run
}

func (r *report) w4Markdown(b *strings.Builder) {
	if len(r.w4) == 0 {
		return
	}
	b.WriteString("**W4 — the lock family, contended** (C goroutines on one name, each holding it `hold`; \"in process\" is " +
		"the same loop around the Go primitive of that kind in this process — a buffered channel of N, a sync.RWMutex — " +
		"run in the same cell; Redis CPU per acquisition+release)\n\n")
	b.WriteString("| kind | C | hold | acq/s | in process | ratio | wait p50 | p99 | max | Redis CPU/acq | most inside | violations |\n")
	b.WriteString("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, x := range r.w4 {
		fmt.Fprintf(b, "| %s | %d | %v | %.0f | %.0f | %.2f× | %s | %s | %s | %.1fµs | %d | %d |\n",
			x.kind, x.c, x.hold, x.rate, x.local, x.rate/x.local, ms(x.p50), ms(x.p99), ms(x.max),
			float64(x.serverCPU)/1e3, x.most, x.violations)
	}
	b.WriteString("\n")
	var mixed []w4Result
	for _, x := range r.w4 {
		if x.shared.n > 0 && x.excl.n > 0 {
			mixed = append(mixed, x)
		}
	}
	if len(mixed) == 0 {
		return
	}
	b.WriteString("The read-write lock's waits, reads and writes apart (in process: the same loop around a sync.RWMutex)\n\n")
	b.WriteString("| kind | C | reads | wait p50 | p99 | writes | wait p50 | p99 | in process: read p50 | p99 | write p50 | p99 |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, x := range mixed {
		fmt.Fprintf(b, "| %s | %d | %d | %s | %s | %d | %s | %s | %s | %s | %s | %s |\n",
			x.kind, x.c, x.shared.n, ms(x.shared.p50), ms(x.shared.p99), x.excl.n, ms(x.excl.p50), ms(x.excl.p99),
			ms(x.localShared.p50), ms(x.localShared.p99), ms(x.localExcl.p50), ms(x.localExcl.p99))
	}
	b.WriteString("\n")
}
