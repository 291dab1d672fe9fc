package dlock_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"os"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
)

// addr is the Redis server of the examples. The examples that print run
// against a private redis-server that TestMain starts and puts here.
var addr = "127.0.0.1:6379"

func ExampleClient_Acquire() {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	c, err := dlock.New(rdb, dlock.LeaseTTL(10*time.Second))
	if err != nil {
		log.Fatal(err) // an invalid option: New names it
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := c.Acquire(ctx, "reports:nightly")
	if errors.Is(err, dlock.ErrNotAcquired) {
		log.Print("another instance is running the report")
		return
	}
	if err != nil {
		log.Fatal(err)
	}
	defer l.Release(context.WithoutCancel(ctx))

	fence, err := l.Fence(ctx) // issued on first use: only while the lock is held
	if err != nil {
		log.Fatal(err)
	}
	select {
	case <-l.Done():
		log.Printf("lock lost: %v", l.Err())
	default:
		fmt.Println("holding", l.Name(), "with a fence:", fence > 0)
	}
	// Output: holding reports:nightly with a fence: true
}

func ExampleClient_TryAcquire() {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	c, err := dlock.New(rdb)
	if err != nil {
		log.Fatal(err)
	}

	ctx := context.Background()
	l, err := c.TryAcquire(ctx, "cleanup")
	if errors.Is(err, dlock.ErrNotAcquired) {
		fmt.Println("someone else is cleaning up; nothing to do this time")
		return
	}
	if err != nil {
		log.Fatal(err)
	}
	defer l.Release(ctx)
	fmt.Println("cleaning up")

	// Meanwhile another instance tries, and finds the lock taken.
	other, _ := dlock.New(rdb)
	if _, err := other.TryAcquire(ctx, "cleanup"); errors.Is(err, dlock.ErrNotAcquired) {
		fmt.Println("another instance: nothing to do this time")
	}
	// Output:
	// cleaning up
	// another instance: nothing to do this time
}

func ExampleClient_Do() {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	c, err := dlock.New(rdb)
	if err != nil {
		log.Fatal(err)
	}

	err = c.Do(context.Background(), "batch:task:list", func(ctx context.Context, l *dlock.Lock) error {
		// ctx is cancelled, with cause dlock.ErrNotHeld, if the lock is lost.
		fence, err := l.Fence(ctx)
		if err != nil {
			return err
		}
		return enqueueDueTasks(ctx, fence)
	})
	if err != nil {
		log.Print(err)
	}
	// Output: enqueueing due tasks under a fence
}

// Every instance of a scheduler starts the nightly report at 02:00; the
// first to take the lock writes it, and the others skip it.
func ExampleClient_TryDo() {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	a, err := dlock.New(rdb, dlock.HolderMeta("scheduler-a")) // default: hostname:pid
	if err != nil {
		log.Fatal(err)
	}
	b, err := dlock.New(rdb, dlock.HolderMeta("scheduler-b"))
	if err != nil {
		log.Fatal(err)
	}

	ctx := context.Background()
	err = a.TryDo(ctx, "reports:nightly", func(ctx context.Context, l *dlock.Lock) error {
		fmt.Println("scheduler-a: writing the nightly report")

		// Meanwhile scheduler-b starts the same job, and skips it.
		err := b.TryDo(ctx, "reports:nightly", func(context.Context, *dlock.Lock) error {
			fmt.Println("scheduler-b: writing the nightly report too")
			return nil
		})
		if errors.Is(err, dlock.ErrNotAcquired) {
			fmt.Println("scheduler-b: skipped:", err)
		}
		return nil
	})
	if err != nil {
		log.Print(err)
	}
	// Output:
	// scheduler-a: writing the nightly report
	// scheduler-b: skipped: dlock: acquire "reports:nightly": not acquired: held by another holder, "scheduler-a"
}

func enqueueDueTasks(ctx context.Context, fence int64) error {
	if fence > 0 {
		fmt.Println("enqueueing due tasks under a fence")
	}
	return ctx.Err()
}

func ExampleGuard() {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	c, err := dlock.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	g := dlock.NewGuard(rdb)

	ctx := context.Background()
	l, err := c.Acquire(ctx, "config")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Release(ctx)

	fence, err := l.Fence(ctx)
	if err != nil {
		log.Fatal(err)
	}
	// Even if this process pauses here past its lease and another holder
	// writes meanwhile, this write is then refused with ErrStaleFence.
	err = g.Write(ctx, "config:value", "v2", fence, l.Token())
	if errors.Is(err, dlock.ErrStaleFence) {
		log.Print("lost the lock while paused; a newer holder has written")
	}
	fmt.Println("written:", err == nil)

	// A holder from before (a lower fence) that wakes up late is refused.
	err = g.Write(ctx, "config:value", "v1", fence-1, "an older lease")
	fmt.Println("late write from an older lease refused:", errors.Is(err, dlock.ErrStaleFence))
	// Output:
	// written: true
	// late write from an older lease refused: true
}

func ExampleLock_Fence() {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	db, err := sql.Open("pgx", os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	c, err := dlock.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	l, err := c.Acquire(ctx, "job:42")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Release(ctx)
	fence, err := l.Fence(ctx)
	if err != nil {
		log.Fatal(err) // lost before it could be fenced
	}

	// The row remembers the highest fence that wrote it; an older one, or
	// the same one from another owner, changes nothing.
	res, err := db.ExecContext(ctx, `UPDATE jobs SET state = $1, fence = $2, token = $3
		WHERE id = $4 AND (fence < $2 OR (fence = $2 AND token = $3))`,
		"done", fence, l.Token(), 42)
	if err != nil {
		log.Fatal(err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		log.Print("stale fence: a newer holder has written job 42")
	}
}

func ExampleNewRedlock() {
	var nodes []redis.UniversalClient
	for _, addr := range []string{"redis-a:6379", "redis-b:6379", "redis-c:6379"} {
		nodes = append(nodes, redis.NewClient(&redis.Options{Addr: addr}))
	}
	c, err := dlock.NewRedlock(nodes, 50*time.Millisecond)
	if err != nil {
		log.Fatal(err)
	}

	ctx := context.Background()
	l, err := c.Acquire(ctx, "payments:reconcile")
	if qe, ok := errors.AsType[*dlock.QuorumError](err); ok {
		log.Printf("only %d of %d nodes granted the lock (%d needed)", qe.Held, len(qe.Nodes), qe.Need)
		return
	}
	if err != nil {
		log.Fatal(err)
	}
	defer l.Release(ctx)
}

func ExampleClient_Owner() {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	c, err := dlock.New(rdb, dlock.WithReentrant(true))
	if err != nil {
		log.Fatal(err)
	}
	req, err := c.Owner("request-81f3") // pass req down the calls that may lock again
	if err != nil {
		log.Fatal(err)
	}

	ctx := context.Background()
	outer, err := req.Acquire(ctx, "account:42")
	if err != nil {
		log.Fatal(err)
	}
	defer outer.Release(ctx)
	inner, err := req.Acquire(ctx, "account:42") // the same owner: re-enters at once
	if err != nil {
		log.Fatal(err)
	}
	fi, _ := inner.Fence(ctx)
	fo, _ := outer.Fence(ctx)
	fmt.Println("re-entered, same fence:", fi == fo && fi > 0)
	defer inner.Release(ctx) // the lock is free after both releases

	other, _ := c.Owner("request-9c1a")
	_, err = other.TryAcquire(ctx, "account:42")
	fmt.Println("another owner:", errors.Is(err, dlock.ErrNotAcquired))
	// Output:
	// re-entered, same fence: true
	// another owner: true
}

func ExampleWithReplicaAck() {
	rdb := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:    "locks",
		SentinelAddrs: []string{"sentinel-a:26379", "sentinel-b:26379", "sentinel-c:26379"},
	})
	defer rdb.Close()
	c, err := dlock.New(rdb, dlock.WithReplicaAck(1, 200*time.Millisecond))
	if err != nil {
		log.Fatal(err) // e.g. replica acknowledgement asked of a quorum (NewRedlock)
	}

	l, err := c.TryAcquire(context.Background(), "nightly")
	if errors.Is(err, dlock.ErrReplicaAck) {
		log.Print("no replica acknowledged the lock in time; not taken")
		return
	}
	if err != nil {
		log.Fatal(err)
	}
	defer l.Release(context.Background())
}

// At shutdown, close the Client before closing the Redis client: an
// acquisition cancelled while its request was in flight is undone in the
// background, and closing the connection under it would leave the lock to
// expire instead.
func ExampleClient_Close() {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close() // runs after c.Close
	c, err := dlock.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.Close(ctx); err != nil {
			log.Printf("background clean-up cut short: %v", err)
		}
	}()

	err = c.Do(context.Background(), "jobs:compact", func(ctx context.Context, l *dlock.Lock) error {
		fmt.Println("compacting under", l.Name())
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	// Output: compacting under jobs:compact
}

func ExampleClient_Semaphore() {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	c, err := dlock.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	s, err := c.Semaphore("exports", 2) // at most two exports at once
	if err != nil {
		log.Fatal(err) // ErrInvalid: fewer than 1 permit, a quorum or reentrant Client
	}

	ctx := context.Background()
	first, err := s.Acquire(ctx)
	if err != nil {
		log.Fatal(err)
	}
	// Per-call options apply to the permit: its lease time, its holder's
	// metadata, how long to wait for it, a cap on how long it is held.
	second, err := s.Acquire(ctx, dlock.LeaseTTL(time.Minute), dlock.HolderMeta("export-7"), dlock.MaxWait(5*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	_, err = s.TryAcquire(ctx)
	if na, ok := errors.AsType[*dlock.NotAcquiredError](err); ok {
		fmt.Printf("a third export must wait: both of the %d permits of %q are held\n", na.Permits, na.Name)
	}
	first.Release(ctx) // hands the permit to the first waiter, if any
	third, err := s.TryAcquire(ctx)
	if err != nil {
		log.Fatal(err)
	}
	holders, _ := s.Holders(ctx)
	fmt.Println("permits held after one release and a new acquire:", len(holders))
	for _, h := range holders {
		if h.Token == second.Token() {
			fmt.Println("one of them by", h.Meta)
		}
	}
	second.Release(ctx)
	third.Release(ctx)
	// Output:
	// a third export must wait: both of the 2 permits of "exports" are held
	// permits held after one release and a new acquire: 2
	// one of them by export-7
}

func ExampleSemaphore_Do() {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	c, err := dlock.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	s, err := c.Semaphore("thumbnails", 3)
	if err != nil {
		log.Fatal(err)
	}

	var (
		mu            sync.Mutex
		running, most int
		wg            sync.WaitGroup
	)
	for range 8 { // eight workers, three at a time
		wg.Go(func() {
			err := s.Do(context.Background(), func(ctx context.Context, l *dlock.Lock) error {
				mu.Lock()
				running++
				most = max(most, running)
				mu.Unlock()
				time.Sleep(20 * time.Millisecond) // resize an image; ctx ends if the permit is lost
				mu.Lock()
				running--
				mu.Unlock()
				return ctx.Err()
			})
			if err != nil {
				log.Print(err)
			}
		})
	}
	wg.Wait()
	fmt.Println("at most 3 workers at once:", most <= 3)
	// Output: at most 3 workers at once: true
}

// Per-call options: a lease with a TTL of its own and a bounded wait, and
// holder metadata that a caller refused the lock learns.
func ExampleLockOption() {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	c, err := dlock.New(rdb, dlock.HolderMeta("report-worker-1")) // default: hostname:pid
	if err != nil {
		log.Fatal(err)
	}

	ctx := context.Background()
	l, err := c.Acquire(ctx, "reports:weekly", dlock.LeaseTTL(2*time.Second), dlock.MaxWait(5*time.Second))
	if err != nil {
		log.Fatal(err) // ErrNotAcquired if still taken after 5s
	}
	defer l.Release(ctx)
	fmt.Println("held by", l.Meta())

	other, _ := dlock.New(rdb, dlock.HolderMeta("report-worker-2"))
	_, err = other.Acquire(ctx, "reports:weekly", dlock.MaxWait(100*time.Millisecond))
	if na, ok := errors.AsType[*dlock.NotAcquiredError](err); ok {
		fmt.Println("worker 2 gave up waiting; the lock is held by", na.Meta)
	}
	// Output:
	// held by report-worker-1
	// worker 2 gave up waiting; the lock is held by report-worker-1
}

// A max hold ends a lease that runs too long: Do's function sees its
// context cancelled with ErrMaxHold as the cause, and the lock is released
// at the cap, free at once for the next holder.
func ExampleMaxHold() {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	c, err := dlock.New(rdb)
	if err != nil {
		log.Fatal(err)
	}

	ctx := context.Background()
	err = c.Do(ctx, "jobs:vacuum", func(ctx context.Context, l *dlock.Lock) error {
		<-ctx.Done() // a job that would run on and on
		fmt.Println("stopped at the max hold:", errors.Is(context.Cause(ctx), dlock.ErrMaxHold))
		return nil
	}, dlock.MaxHold(200*time.Millisecond))
	fmt.Println("Do reports it:", errors.Is(err, dlock.ErrMaxHold))

	if l, err := c.TryAcquire(ctx, "jobs:vacuum"); err == nil {
		fmt.Println("the lock is free again")
		l.Release(ctx)
	}
	// Output:
	// stopped at the max hold: true
	// Do reports it: true
	// the lock is free again
}

func ExampleClient_Election() {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	c, err := dlock.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	e, err := c.Election("scheduler")
	if err != nil {
		log.Fatal(err) // ErrInvalid: a bad name, a quorum or reentrant Client
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel() // ends Observe, which closes its channel
	changes := e.Observe(ctx)
	<-changes // the leadership when Observe started: nobody leads yet
	nextLeader := func() dlock.Leader {
		for ld := range changes {
			if ld.Token != "" { // skip "nobody leads"
				return ld
			}
		}
		return dlock.Leader{}
	}

	a, err := e.Campaign(ctx, "node-a") // waits until node-a leads
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("leader:", nextLeader().Value)

	won := make(chan *dlock.Leadership, 1)
	go func() {
		b, err := e.Campaign(ctx, "node-b") // waits in line behind node-a
		if err != nil {
			log.Print(err)
		}
		won <- b
	}()
	// Lead until done, or until the leadership is lost: a.Done() closes then.
	if err := a.Resign(ctx); err != nil { // hands the leadership to node-b
		log.Fatal(err)
	}
	b := <-won
	if b == nil {
		return
	}
	defer b.Resign(ctx)
	ld := nextLeader()
	fmt.Println("leader:", ld.Value, "- its term's fence is above node-a's:", ld.Fence == b.Fence() && b.Fence() > a.Fence())
	// Output:
	// leader: node-a
	// leader: node-b - its term's fence is above node-a's: true
}

// A read-write lock: readers share the name, a writer has it alone, and
// the writer's fence is above the fences of the reads before it.
func ExampleRWMutex() {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	c, err := dlock.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	rw, err := c.RWMutex("catalog")
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	r1, err := rw.Reader().Acquire(ctx)
	if err != nil {
		log.Fatal(err)
	}
	r2, err := rw.Reader().Acquire(ctx) // reads share
	if err != nil {
		log.Fatal(err)
	}
	_, err = rw.Writer().TryAcquire(ctx)
	fmt.Println("write while reading:", errors.Is(err, dlock.ErrNotAcquired))
	readFence, err := r2.Fence(ctx)
	if err != nil {
		log.Fatal(err)
	}
	r1.Release(ctx)
	r2.Release(ctx)

	err = rw.Writer().Do(ctx, func(ctx context.Context, l *dlock.Lock) error {
		_, err := rw.Writer().TryAcquire(ctx) // inside its own hold: refused, not a deadlock
		fmt.Println("nested write:", errors.Is(err, dlock.ErrInvalid))
		f, err := l.Fence(ctx)
		fmt.Println("write fenced after the reads:", f > readFence)
		return err
	})
	if err != nil {
		log.Fatal(err)
	}
	// Output:
	// write while reading: true
	// nested write: true
	// write fenced after the reads: true
}

func ExampleLock_Context() {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	c, err := dlock.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	l, err := c.TryAcquire(ctx, "jobs:compact")
	if err != nil {
		log.Fatal(err)
	}
	work := l.Context() // done when the lock is lost, or released
	go func() {
		time.Sleep(10 * time.Millisecond) // the work's caller gives the lock up
		l.Release(ctx)
	}()
	<-work.Done()
	fmt.Println(context.Cause(work))
	// Output: dlock: released
}

func ExampleLock_Jeopardy() {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	c, err := dlock.New(rdb)
	if err != nil {
		log.Fatal(err)
	}

	err = c.Do(context.Background(), "imports:daily", func(ctx context.Context, l *dlock.Lock) error {
		for batch := range 3 {
			select {
			case <-l.Jeopardy(): // an extension failed: stop cleanly while the lease is still valid
				fmt.Println("at risk: checkpoint before batch", batch)
				return l.Err() // nil if still held
			default:
			}
			fmt.Println("imported batch", batch)
		}
		return nil
	})
	fmt.Println("done:", err)
	// Output:
	// imported batch 0
	// imported batch 1
	// imported batch 2
	// done: <nil>
}

func ExampleClient_FenceCurrent() {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	c, err := dlock.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	l, err := c.Acquire(ctx, "ledger")
	if err != nil {
		log.Fatal(err)
	}
	fence, err := l.Fence(ctx)
	if err != nil {
		log.Fatal(err)
	}
	// A service the holder sends (name, fence, token) to checks them.
	ok, err := c.FenceCurrent(ctx, "ledger", fence, l.Token())
	fmt.Println("current while held:", ok, err)
	l.Release(ctx)
	ok, err = c.FenceCurrent(ctx, "ledger", fence, l.Token())
	fmt.Println("current after release:", ok, err)
	// Output:
	// current while held: true <nil>
	// current after release: false <nil>
}

func ExampleGuard_Do() {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	c, err := dlock.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	g := dlock.NewGuard(rdb)
	ctx := context.Background()
	l, err := c.Acquire(ctx, "orders")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Release(ctx)
	fence, err := l.Fence(ctx)
	if err != nil {
		log.Fatal(err)
	}
	// Any commands, applied with the fence check in one MULTI; the keys
	// share the resource's hash tag, for a Redis Cluster.
	err = g.Do(ctx, "{orders}", fence, l.Token(), func(p redis.Pipeliner) error {
		p.HSet(ctx, "{orders}:42", "state", "paid")
		p.RPush(ctx, "{orders}:log", "42 paid")
		return nil
	})
	fmt.Println("applied:", err == nil)
	// A late holder with an older fence changes nothing.
	err = g.Do(ctx, "{orders}", fence-1, "an older lease", func(p redis.Pipeliner) error {
		p.HSet(ctx, "{orders}:42", "state", "new")
		return nil
	})
	fmt.Println("older fence refused:", errors.Is(err, dlock.ErrStaleFence))
	fmt.Println(rdb.HGet(ctx, "{orders}:42", "state").Val())
	// Output:
	// applied: true
	// older fence refused: true
	// paid
}

func ExampleLockDelay() {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	// No watchdog: the lease runs out unextended, as a hung holder's would.
	c, err := dlock.New(rdb, dlock.LockDelay(time.Minute), dlock.WithAutoExtend(false))
	if err != nil {
		log.Fatal(err)
	}

	ctx := context.Background()
	l, err := c.TryAcquire(ctx, "jobs:sync", dlock.LeaseTTL(100*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	<-l.Done()
	fmt.Println("lost:", errors.Is(l.Err(), dlock.ErrNotHeld))

	_, err = c.TryAcquire(ctx, "jobs:sync")
	fmt.Println("free during the lock-delay:", err == nil)

	l.Release(ctx) // the holder has stopped: the name is free at once
	if next, err := c.TryAcquire(ctx, "jobs:sync"); err == nil {
		fmt.Println("free after its Release: true")
		next.Release(ctx)
	}
	// Output:
	// lost: true
	// free during the lock-delay: false
	// free after its Release: true
}
