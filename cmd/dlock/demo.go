package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

const demoHelp = `demo [flags]
       dlock demo seckill [flags]

Runs the batch-dispatch scenario: tasks sit in a SQL table; several
scheduler processes pull due tasks and push them to a Redis queue;
consumers take them from the queue and process them (some fail and are
retried, a few fail for good). Without a lock, two schedulers pick the same
tasks and enqueue them twice; with dlock, never. The third way needs no
lock: consumers record each task attempt atomically before acting on it
(an idempotency key), so a duplicate is enqueued but skipped.

By default it runs all three, without a lock, with dlock, and with the
idempotency key, and compares.
With no --redis it starts a private redis-server; with no --db it uses a
SQLite file in a temporary directory.`

type demoConfig struct {
	redisURL, dbDSN  string
	mode             string
	tasks, batch     int
	schedulers       int
	consumers        int
	ttl              time.Duration
	chaos            bool
	timeout          time.Duration
	progressInterval time.Duration
}

func cmdDemo(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "seckill" {
		return cmdSeckill(ctx, args[1:], stdout, stderr)
	}
	fs := newFlagSet("demo", stderr, demoHelp)
	var cfg demoConfig
	var redisFlag urlList
	fs.Var(&redisFlag, "redis", "Redis `URL` (default $REDIS_URL, else a private redis-server)")
	fs.StringVar(&cfg.dbDSN, "db", "", "PostgreSQL `URL` (postgres://…); default a temporary SQLite file")
	fs.StringVar(&cfg.mode, "mode", "all", "all (without a lock, with dlock, with an idempotency key), both (the first two), lock, no-lock or idempotent")
	noLock := fs.Bool("no-lock", false, "run only without the lock (same as --mode no-lock)")
	fs.IntVar(&cfg.tasks, "tasks", 600, "number of tasks")
	fs.IntVar(&cfg.batch, "batch", 20, "tasks a scheduler moves per turn")
	fs.IntVar(&cfg.schedulers, "schedulers", 3, "scheduler processes")
	fs.IntVar(&cfg.consumers, "consumers", 4, "consumer goroutines")
	fs.DurationVar(&cfg.ttl, "ttl", 2*time.Second, "lock TTL")
	fs.BoolVar(&cfg.chaos, "chaos", false, "kill one scheduler with SIGKILL while it holds the lock")
	fs.DurationVar(&cfg.timeout, "timeout", 3*time.Minute, "give up on a run after this long")
	if code := parse(fs, args); code >= 0 {
		return code
	}
	if *noLock {
		cfg.mode = "no-lock"
	}
	switch {
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "dlock demo: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	case !slices.Contains([]string{"all", "both", "lock", "no-lock", "idempotent"}, cfg.mode):
		fmt.Fprintf(stderr, "dlock demo: --mode must be all, both, lock, no-lock or idempotent, not %q\n", cfg.mode)
		return exitUsage
	case cfg.tasks < 1 || cfg.batch < 1 || cfg.schedulers < 1 || cfg.consumers < 1:
		fmt.Fprintln(stderr, "dlock demo: --tasks, --batch, --schedulers and --consumers must be at least 1")
		return exitUsage
	case cfg.chaos && cfg.schedulers < 2:
		fmt.Fprintln(stderr, "dlock demo: --chaos needs at least 2 schedulers")
		return exitUsage
	}
	if err := checkTTL(cfg.ttl); err != nil {
		fmt.Fprintf(stderr, "dlock demo: %v\n", err)
		return exitUsage
	}

	urls := redisURLs(redisFlag)
	switch len(urls) {
	case 0:
		srv, err := privateRedis()
		if err != nil {
			return reportDemo(ctx, stderr, err)
		}
		defer srv.Stop()
		cfg.redisURL = srv.URL()
		fmt.Fprintf(stdout, "started a private redis-server (%s)\n", srv.URL())
	case 1:
		cfg.redisURL = urls[0]
	default:
		fmt.Fprintln(stderr, "dlock demo: one --redis at most")
		return exitUsage
	}
	rdb, err := connect(ctx, cfg.redisURL)
	if err != nil {
		return reportDemo(ctx, stderr, err)
	}
	defer rdb.Close()
	if cfg.dbDSN == "" {
		dir, err := os.MkdirTemp("", "dlock-demo")
		if err != nil {
			return reportDemo(ctx, stderr, err)
		}
		defer os.RemoveAll(dir)
		cfg.dbDSN = sqliteDSN(dir)
	}
	db, err := openTaskDB(cfg.dbDSN)
	if err != nil {
		return reportDemo(ctx, stderr, err)
	}
	defer db.Close()
	cfg.progressInterval = time.Second
	if fi, err := os.Stderr.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 && stderr == io.Writer(os.Stderr) {
		cfg.progressInterval = 200 * time.Millisecond
	}

	fmt.Fprintf(stdout, "The consumers' work fails on purpose, as real work does: %d%% of attempts fail for good, %d%% fail and\n"+
		"are retried, and a task that fails %d times has failed for good. Those are the \"tasks failed for good\" below:\n"+
		"failures of the work itself, expected in every run, with or without a lock, and not failures of the lock.\n",
		failPct, retryPct, maxAttempts)
	passes := map[string][]demoPass{"all": {passNoLock, passLock, passIdempotent}, "both": {passNoLock, passLock},
		"lock": {passLock}, "no-lock": {passNoLock}, "idempotent": {passIdempotent}}[cfg.mode]
	var results []*demoResult
	for _, pass := range passes {
		res, err := runDemo(ctx, cfg, pass, rdb, db, stderr)
		if err != nil {
			return reportDemo(ctx, stderr, err)
		}
		res.print(stdout)
		results = append(results, res)
	}
	if len(results) >= 2 {
		fmt.Fprintf(stdout, "\nduplicate enqueues: %d without a lock, %d with dlock\n",
			results[0].duplicates, results[1].duplicates)
	}
	if len(results) == 3 {
		fmt.Fprintf(stdout, "without a lock but with an idempotency key: %d duplicate enqueues, %d acted on twice\n",
			results[2].duplicates, results[2].actedTwice())
	}
	for _, r := range results {
		if r.incomplete || (r.pass == passLock && (r.duplicates > 0 || !r.fencesIncreasing)) ||
			(r.pass == passIdempotent && r.actedTwice() > 0) {
			return exitFailure
		}
	}
	return exitOK
}

// demoPass is one way of running the scenario: the lessons side by side.
type demoPass int

const (
	passNoLock     demoPass = iota // schedulers race: duplicates are enqueued
	passLock                       // schedulers take turns under dlock: none are
	passIdempotent                 // no lock, but consumers record each task attempt first (HSETNX): duplicates are skipped
)

// actedTwice is the number of duplicates a consumer acted on: neither the
// idempotency key nor the status guard stopped them.
func (r *demoResult) actedTwice() int64 { return r.duplicates - r.keySkips - r.guardRejections }

// demoResult is what one run measured.
type demoResult struct {
	pass             demoPass
	locked           bool
	cfg              demoConfig
	wall             time.Duration
	incomplete       bool
	done, failed     int
	retries          int64
	duplicates       int64 // a consumer got a task+attempt it had already got
	guardRejections  int64 // … and the status guard refused it
	keySkips         int64 // … and its idempotency key made the consumer skip it
	acquisitions     map[int]int
	waits            []time.Duration
	fenceMin         int64
	fenceMax         int64
	fencesIncreasing bool
	killed           string
}

func newRunID() string { return fmt.Sprintf("%08x", rand.Uint32()) }

// runDemo runs the scenario once, with or without the lock.
func runDemo(ctx context.Context, cfg demoConfig, pass demoPass, rdb redis.UniversalClient, db *taskDB, stderr io.Writer) (*demoResult, error) {
	run := newRunID()
	k := keysForRun(run)
	defer rdb.Del(context.WithoutCancel(ctx), k.queue, k.seen, k.acq, k.taken, k.ready)
	if err := db.reset(ctx, cfg.tasks); err != nil {
		return nil, err
	}
	locked := pass == passLock
	res := &demoResult{pass: pass, locked: locked, cfg: cfg, acquisitions: map[int]int{}}
	label := [...]string{"without a lock", "with dlock", "without a lock, with an idempotency key"}[pass]
	fmt.Fprintf(stderr, "\n== %d tasks, %d schedulers, %d consumers, %s ==\n", cfg.tasks, cfg.schedulers, cfg.consumers, label)

	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	start := time.Now()
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}

	// Schedulers: separate OS processes, as separate service instances are.
	var scheds []*exec.Cmd
	var wg sync.WaitGroup
	var killedAt atomic.Int64
	for i := range cfg.schedulers {
		sc := schedConfig{redisURL: cfg.redisURL, dbDSN: cfg.dbDSN, run: run, id: i, batch: cfg.batch,
			ttl: cfg.ttl, prep: 2 * time.Millisecond, stuck: 4 * time.Second,
			noLock: !locked, victim: cfg.chaos && i == 0, together: cfg.schedulers}
		if cfg.chaos {
			sc.together = 1 // (the victim goes first: see below)
		}
		cmd := exec.Command(exe, sc.args()...)
		cmd.Stderr = stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlive the demo
		out, err := cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			return nil, fmt.Errorf("start scheduler: %w", err)
		}
		scheds = append(scheds, cmd)
		holding := make(chan struct{})
		wg.Go(func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				if sc.Text() == "holding" {
					select {
					case <-holding:
					default:
						close(holding)
					}
					time.Sleep(200 * time.Millisecond)
					cmd.Process.Signal(syscall.SIGKILL)
					killedAt.Store(time.Now().UnixNano())
					fmt.Fprintf(stderr, "chaos: scheduler %d killed with SIGKILL in the middle of a batch\n", i)
				}
			}
		})
		if sc.victim { // the others start once it holds its first batch: they could drain the table before it starts
			select {
			case <-holding:
			case <-ctx.Done():
			case <-time.After(30 * time.Second):
			}
		}
	}
	stopScheds := func() {
		for _, cmd := range scheds {
			cmd.Process.Signal(syscall.SIGTERM)
		}
		wg.Wait()
		for _, cmd := range scheds {
			cmd.Wait()
		}
	}

	// Consumers: goroutines of this process.
	cctx, stopConsumers := context.WithCancel(ctx)
	var cwg sync.WaitGroup
	for range cfg.consumers {
		cwg.Go(func() { consume(cctx, rdb, db, k, res) })
	}

	err = watchProgress(ctx, cfg, db, res, stderr)
	stopScheds()
	stopConsumers()
	cwg.Wait()
	if err != nil {
		return nil, err
	}
	res.wall = time.Since(start)
	if at := killedAt.Load(); at != 0 {
		res.killed = "scheduler 0 killed by SIGKILL after marking a batch, before pushing it"
		if locked {
			res.killed += "; it held the lock, and the others went on after its TTL"
		}
	}
	if err := res.collectAcquisitions(context.WithoutCancel(ctx), rdb, k); err != nil {
		return nil, err
	}
	return res, nil
}

// watchProgress prints a progress line until every task is done or failed
// for good, or ctx ends: each tick's, unless nothing moved since the last
// one (while --chaos's stuck batch waits to be recovered, for seconds).
func watchProgress(ctx context.Context, cfg demoConfig, db *taskDB, res *demoResult, stderr io.Writer) error {
	tick := time.NewTicker(cfg.progressInterval)
	defer tick.Stop()
	live := cfg.progressInterval < time.Second
	last := ""
	for {
		select {
		case <-ctx.Done():
			res.incomplete = true
			fmt.Fprintln(stderr, "\ndemo: timed out before every task finished")
			return nil
		case <-tick.C:
		}
		counts, err := db.counts(context.WithoutCancel(ctx))
		if err != nil {
			return fmt.Errorf("read task table: %w", err)
		}
		res.done, res.failed = counts[statusDone], counts[statusFailed]
		line := fmt.Sprintf("pending %4d  enqueued %4d  processing %3d  retry %3d  done %4d  failed %3d  duplicates %3d",
			counts[statusPending], counts[statusEnqueued], counts[statusProcessing], counts[statusRetry],
			res.done, res.failed, atomic.LoadInt64(&res.duplicates))
		switch {
		case line == last:
		case live:
			fmt.Fprintf(stderr, "\r%s", line)
		default:
			fmt.Fprintln(stderr, line)
		}
		last = line
		if res.done+res.failed == cfg.tasks {
			if live {
				fmt.Fprintln(stderr)
			}
			return nil
		}
	}
}

// How the demo's work fails, as real work does: in failPct of attempts for
// good, in retryPct for a retry, and for good at a task's maxAttempts-th
// failure: the report's "tasks failed for good", which no lock prevents.
const (
	failPct     = 2
	retryPct    = 10
	maxAttempts = 3
)

// consume takes tasks from the queue until ctx ends. It counts, on its own,
// every task+attempt it is handed more than once.
func consume(ctx context.Context, rdb redis.UniversalClient, db *taskDB, k demoKeys, res *demoResult) {
	for ctx.Err() == nil {
		v, err := rdb.BLPop(ctx, time.Second, k.queue).Result()
		if err != nil || len(v) != 2 {
			continue // empty (redis.Nil), or shutting down
		}
		item := v[1]
		if fresh, _ := rdb.SAdd(ctx, k.seen, item).Result(); fresh == 0 {
			atomic.AddInt64(&res.duplicates, 1)
		}
		if res.pass == passIdempotent {
			// The idempotency key: record the task attempt before acting on
			// it, atomically (HSETNX, as SET NX on a key of its own); a
			// consumer that finds it recorded skips the duplicate.
			if first, err := rdb.HSetNX(ctx, k.taken, item, 1).Result(); err != nil || !first {
				if err == nil {
					atomic.AddInt64(&res.keySkips, 1)
				}
				continue
			}
		}
		idStr, attemptStr, _ := strings.Cut(item, ":")
		id, _ := strconv.ParseInt(idStr, 10, 64)
		attempt, _ := strconv.Atoi(attemptStr)
		ok, err := db.take(ctx, id)
		if err != nil || !ok {
			if err == nil {
				atomic.AddInt64(&res.guardRejections, 1)
			}
			continue
		}
		time.Sleep(time.Duration(500+rand.IntN(1500)) * time.Microsecond) // the work
		status := statusDone
		switch r := rand.IntN(100); {
		case r < failPct:
			status = statusFailed
		case r < failPct+retryPct:
			status = statusRetry
			if attempt+1 >= maxAttempts {
				status = statusFailed // the last failure allowed: give up
			}
		}
		if status == statusRetry {
			atomic.AddInt64(&res.retries, 1)
		}
		// A write that fails (SQLite busy past its timeout on a loaded
		// machine) would leave the task processing for good, and the run
		// waiting for it until its timeout: try again, for a while.
		for deadline := time.Now().Add(10 * time.Second); db.finish(context.WithoutCancel(ctx), id, status) != nil && time.Now().Before(deadline); {
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// collectAcquisitions reads the schedulers' acquisition records, in the
// order they were taken.
func (r *demoResult) collectAcquisitions(ctx context.Context, rdb redis.UniversalClient, k demoKeys) error {
	recs, err := rdb.LRange(ctx, k.acq, 0, -1).Result()
	if err != nil {
		return err
	}
	r.fencesIncreasing = true
	var last int64
	for _, rec := range recs {
		var id int
		var waitUS, fence int64
		if _, err := fmt.Sscanf(rec, "%d %d %d", &id, &waitUS, &fence); err != nil {
			return fmt.Errorf("bad acquisition record %q", rec)
		}
		r.acquisitions[id]++
		r.waits = append(r.waits, time.Duration(waitUS)*time.Microsecond)
		if fence <= last {
			r.fencesIncreasing = false
		}
		last = fence
		if r.fenceMin == 0 || fence < r.fenceMin {
			r.fenceMin = fence
		}
		r.fenceMax = max(r.fenceMax, fence)
	}
	return nil
}

func (r *demoResult) print(w io.Writer) {
	title := [...]string{"WITHOUT A LOCK", "WITH DLOCK", "WITHOUT A LOCK, WITH AN IDEMPOTENCY KEY"}[r.pass]
	fmt.Fprintf(w, "\n%s — %d tasks, %d scheduler processes, %d consumers\n", title, r.cfg.tasks, r.cfg.schedulers, r.cfg.consumers)
	if r.incomplete {
		fmt.Fprintf(w, "  INCOMPLETE: stopped after %v\n", r.cfg.timeout)
	}
	fmt.Fprintf(w, "  tasks done            %d\n", r.done)
	fmt.Fprintf(w, "  tasks failed for good %d (the work's failures, as above; retries along the way: %d)\n", r.failed, r.retries)
	stopped := fmt.Sprintf("%d refused by the status guard", r.guardRejections)
	if r.pass == passIdempotent {
		stopped = fmt.Sprintf("%d skipped by the idempotency key", r.keySkips)
	}
	fmt.Fprintf(w, "  duplicate enqueues    %d (a consumer got a task it had already got; %s, %d acted on twice)\n",
		r.duplicates, stopped, r.actedTwice())
	if r.locked {
		ids := make([]int, 0, len(r.acquisitions))
		for id := range r.acquisitions {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		var per []string
		for _, id := range ids {
			per = append(per, fmt.Sprintf("#%d: %d", id, r.acquisitions[id]))
		}
		fmt.Fprintf(w, "  acquisitions          %s\n", strings.Join(per, ", "))
		if len(r.waits) > 0 {
			slices.Sort(r.waits)
			p := func(q float64) time.Duration {
				return r.waits[int(q*float64(len(r.waits)-1))].Round(10 * time.Microsecond)
			}
			fmt.Fprintf(w, "  lock wait             p50 %v, p99 %v, max %v\n", p(0.5), p(0.99), r.waits[len(r.waits)-1].Round(10*time.Microsecond))
		}
		order := "strictly increasing in acquisition order"
		if !r.fencesIncreasing {
			order = "NOT increasing: a bug"
		}
		fmt.Fprintf(w, "  fences                %d … %d, %s\n", r.fenceMin, r.fenceMax, order)
	}
	if r.killed != "" {
		fmt.Fprintf(w, "  chaos                 %s\n", r.killed)
	}
	fmt.Fprintf(w, "  wall time             %v\n", r.wall.Round(time.Millisecond))
}
