package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
)

// demoSchedulerCmd is the hidden command that runs one scheduler process of
// the demo; `dlock demo` starts several.
const demoSchedulerCmd = "demo-scheduler"

// demoLockName is the lock the schedulers share.
const demoLockName = "batch:task:list"

// schedConfig is what a scheduler process is told on its command line.
type schedConfig struct {
	redisURL, dbDSN, run string
	id, batch            int
	together             int // the schedulers that start together: each waits until that many are ready
	ttl, prep, stuck     time.Duration
	noLock, victim       bool
}

func (c schedConfig) args() []string {
	a := []string{demoSchedulerCmd,
		"--redis", c.redisURL, "--db", c.dbDSN, "--run", c.run,
		"--id", fmt.Sprint(c.id), "--batch", fmt.Sprint(c.batch),
		"--ttl", c.ttl.String(), "--prep", c.prep.String(), "--stuck", c.stuck.String(),
		"--together", fmt.Sprint(c.together),
	}
	if c.noLock {
		a = append(a, "--no-lock")
	}
	if c.victim {
		a = append(a, "--victim")
	}
	return a
}

// demoKeys are the Redis keys of one demo run.
type demoKeys struct{ queue, seen, acq, taken, ready string }

func keysForRun(run string) demoKeys {
	p := "dlock-demo:" + run + ":"
	return demoKeys{queue: p + "queue", seen: p + "seen", acq: p + "acquisitions", taken: p + "taken", ready: p + "ready"}
}

func cmdScheduler(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(demoSchedulerCmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c schedConfig
	fs.StringVar(&c.redisURL, "redis", "", "")
	fs.StringVar(&c.dbDSN, "db", "", "")
	fs.StringVar(&c.run, "run", "", "")
	fs.IntVar(&c.id, "id", 0, "")
	fs.IntVar(&c.batch, "batch", 20, "")
	fs.IntVar(&c.together, "together", 1, "")
	fs.DurationVar(&c.ttl, "ttl", 2*time.Second, "")
	fs.DurationVar(&c.prep, "prep", 2*time.Millisecond, "")
	fs.DurationVar(&c.stuck, "stuck", 5*time.Second, "")
	fs.BoolVar(&c.noLock, "no-lock", false, "")
	fs.BoolVar(&c.victim, "victim", false, "")
	if code := parse(fs, args); code >= 0 {
		return code
	}
	rdb, err := connect(ctx, c.redisURL)
	if err != nil {
		return report(stderr, err)
	}
	defer rdb.Close()
	db, err := openTaskDB(c.dbDSN)
	if err != nil {
		return report(stderr, err)
	}
	defer db.Close()
	if err := schedule(ctx, c, rdb, db, stdout); err != nil && ctx.Err() == nil {
		return report(stderr, err)
	}
	return exitOK
}

// schedule is a scheduler's loop: take the lock, move a batch of due tasks
// to the queue, release; until ctx ends.
func schedule(ctx context.Context, c schedConfig, rdb redis.UniversalClient, db *taskDB, stdout io.Writer) error {
	k := keysForRun(c.run)
	locks, err := dlock.New(rdb, dlock.LeaseTTL(c.ttl)) // the demo checked --ttl
	if err != nil {
		return libError(err)
	}
	startTogether(ctx, rdb, k.ready, c.together)
	dispatched := 0
	for ctx.Err() == nil {
		var l *dlock.Lock
		if !c.noLock {
			start := time.Now()
			if l, err = locks.Acquire(ctx, demoLockName); err != nil {
				if errors.Is(err, dlock.ErrNotAcquired) && ctx.Err() != nil {
					return nil
				}
				return err
			}
			waited := time.Since(start)
			fence, err := l.Fence(ctx)
			if err != nil {
				l.Release(context.WithoutCancel(ctx))
				switch {
				case ctx.Err() != nil:
					return nil
				case errors.Is(err, dlock.ErrNotHeld):
					continue // lost before any work: as if not acquired
				}
				return err
			}
			// Recorded while holding the lock, so the list is in acquisition order.
			rdb.RPush(ctx, k.acq, fmt.Sprintf("%d %d %d", c.id, waited.Microseconds(), fence))
		}
		stall := c.victim && dispatched == 0 // the victim dies in its first batch (a later one may never come: the others can drain the table first)
		n, err := dispatch(ctx, c, rdb, db, k, stall, stdout)
		if n > 0 {
			dispatched++
		}
		if l != nil {
			if rerr := l.Release(context.WithoutCancel(ctx)); rerr != nil && err == nil {
				err = rerr
			}
		}
		if err != nil {
			return err
		}
		if n == 0 {
			sleep(ctx, 20*time.Millisecond) // nothing due: poll the table again soon
		}
	}
	return nil
}

// startTogether counts this scheduler ready and waits, 30s at most, until n
// are: processes started one after another would otherwise find the table
// drained by the first, with no race to show on a quiet machine.
func startTogether(ctx context.Context, rdb redis.UniversalClient, key string, n int) {
	if n <= 1 {
		return
	}
	rdb.Incr(ctx, key)
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline) && ctx.Err() == nil; {
		if ready, _ := rdb.Get(ctx, key).Int(); ready >= n {
			return
		}
		sleep(ctx, time.Millisecond)
	}
}

// dispatch moves one batch of due tasks to the queue: mark them enqueued in
// the database first, then push them. If the process dies between the two,
// the tasks sit in "enqueued" until recoverStuck puts them back; had it
// pushed first, a crash before the mark would enqueue them twice.
//
// With stall set, it stops after the mark, says "holding" and waits to be
// killed: the demo's chaos.
func dispatch(ctx context.Context, c schedConfig, rdb redis.UniversalClient, db *taskDB, k demoKeys, stall bool, stdout io.Writer) (int, error) {
	if _, err := db.recoverStuck(ctx, c.stuck); err != nil {
		return 0, fmt.Errorf("recover stuck tasks: %w", err)
	}
	tasks, err := db.due(ctx, c.batch)
	if err != nil || len(tasks) == 0 {
		return 0, err
	}
	sleep(ctx, c.prep) // building the batch takes a moment in a real scheduler
	if err := db.markEnqueued(ctx, tasks); err != nil {
		return 0, fmt.Errorf("mark enqueued: %w", err)
	}
	if stall {
		fmt.Fprintln(stdout, "holding") // the demo kills us here: lock held, batch marked but not pushed
		<-ctx.Done()
		return 0, nil
	}
	vals := make([]any, len(tasks))
	for i, t := range tasks {
		vals[i] = fmt.Sprintf("%d:%d", t.id, t.attempts)
	}
	if err := rdb.RPush(ctx, k.queue, vals...).Err(); err != nil {
		return 0, fmt.Errorf("push to queue: %w", err)
	}
	return len(tasks), nil
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
