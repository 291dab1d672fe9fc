package main

import (
	"context"
	"fmt"
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
// sync.Mutex for the lock, a buffered channel of N for a semaphore,
// sync.RWMutex for readers and a writer) gives the harness's ceiling, measured in the same cell. No other
// Go library offers these kinds, so the in-process one is the baseline.

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
				if err != nil {
					return nil, false, err
				}
				return l.Release, true, nil
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
				if err != nil {
					return nil, false, err
				}
				return l.Release, false, nil
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
}

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
	dc, err := dlock.New(rdb, dlock.WithTTL(ttl))
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
	cpu0 := serverCPU(admin)
	run := familyLoop(take, k.limit, c, hold, *duration)
	cpu1 := serverCPU(admin)
	if run.err != nil {
		return r, run.err
	}
	r.rate, r.most, r.violations = run.rate, run.most, run.violations
	if n := len(run.waits); n > 0 {
		r.p50, r.p99, r.max = run.waits[n/2], run.waits[n*99/100], run.waits[n-1]
		r.serverCPU = (cpu1 - cpu0) / time.Duration(n)
	}
	return r, nil
}

type familyRun struct {
	rate             float64
	waits            []time.Duration
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
	waits := make([][]time.Duration, c)
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
				waits[g] = append(waits[g], time.Since(t0))
				if x {
					excl.Add(1)
				}
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
	run.waits = slices.Concat(waits...)
	slices.Sort(run.waits)
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
}
