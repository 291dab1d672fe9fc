package dlock_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/redistest"
)

// A size change whose request the client sent twice (the first copy held
// in the network past the client's read timeout, then landing after the
// second) is applied once: AddPermits adds its delta once, and a late
// copy of TrySetPermits does not bring back a size unset since.
func TestSemaphoreSizeChangeSentTwiceIsAppliedOnce(t *testing.T) {
	t.Parallel()
	s, _ := setupTCP(t)
	ctx := t.Context()
	rdbP, p := lateCopyClient(t, s)
	c := newClient(t, rdbP)
	sem, err := c.Semaphore("resent-size", 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sem.Available(ctx); err != nil { // (warm: the script loaded)
		t.Fatal(err)
	}
	var n int
	lateFirstCopy(p, func() { n, err = sem.AddPermits(ctx, 1) })
	if err != nil || n != 3 {
		t.Fatalf("AddPermits(1) of 2 = %d, %v; want 3", n, err)
	}
	time.Sleep(700 * time.Millisecond) // the first copy has landed
	if n, err := sem.Available(ctx); err != nil || n != 3 {
		t.Errorf("Available after AddPermits(1) of 2, sent twice = %d, %v; want 3 (added once)", n, err)
	}

	if ok, err := sem.UnsetPermits(ctx); err != nil || !ok {
		t.Fatalf("UnsetPermits = %v, %v", ok, err)
	}
	var ok bool
	lateFirstCopy(p, func() { ok, err = sem.TrySetPermits(ctx, 7) })
	if err != nil || !ok {
		t.Fatalf("TrySetPermits(7) = %v, %v; want true", ok, err)
	}
	if ok, err := sem.UnsetPermits(ctx); err != nil || !ok {
		t.Fatalf("UnsetPermits after TrySetPermits(7) = %v, %v", ok, err)
	}
	time.Sleep(700 * time.Millisecond) // the first copy of TrySetPermits has landed
	if n, err := sem.Available(ctx); err != nil || n != 2 {
		t.Errorf("Available after a late copy of TrySetPermits(7) landed past UnsetPermits = %d, %v; want the handle's N, 2", n, err)
	}
}

// An AddPermits whose reply was lost (the connection broke once Redis ran
// it) is asked again under the same request: it returns the size its
// first copy made, and the delta is added once.
func TestSemaphoreAddPermitsWithItsReplyLostIsAppliedOnce(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	direct := s.Client(t)
	ctx := t.Context()
	d := &replyLoser{reachable: true}
	opts := s.Options()
	opts.Dialer, opts.PoolSize = d.dial, 1
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { rdb.Close() })
	c := newClient(t, rdb)
	sem, _ := c.Semaphore("lost-reply-size", 2)
	if _, err := sem.Available(ctx); err != nil { // (warm: the script loaded)
		t.Fatal(err)
	}
	d.word = []byte("add")
	d.done = func() bool { return direct.Get(ctx, "dlock:{lost-reply-size}:n").Val() == "5" }
	d.armed.Store(true)
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	n, err := sem.AddPermits(actx, 3)
	cancel()
	if err != nil || n != 5 {
		t.Errorf("AddPermits(3) of 2 with its reply lost = %d, %v; want 5", n, err)
	}
	if v := direct.Get(ctx, "dlock:{lost-reply-size}:n").Val(); v != "5" {
		t.Errorf("the kept size after AddPermits(3) of 2 with its reply lost = %q, want 5 (added once)", v)
	}
}

// With WithReplicaAck, a size change returns once a replica has it: with
// replication stalled, AddPermits fails with ErrReplicaAck after one WAIT
// (the master has the change: it says so, and the call does not ask
// again), and Available, which changes nothing, still answers.
func TestSemaphoreSizeChangeWaitsForTheReplicas(t *testing.T) {
	t.Parallel()
	long(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	master, replica, link := replicated(t, ctx)
	rdb, rrdb := master.Client(t), replica.Client(t)
	sem, _ := newClient(t, rdb, dlock.WithReplicaAck(1, 2*time.Second)).Semaphore("acked-size", 2)
	if n, err := sem.AddPermits(ctx, 1); err != nil || n != 3 {
		t.Fatalf("acknowledged AddPermits(1) = %d, %v; want 3", n, err)
	}
	if v := rrdb.Get(ctx, "dlock:{acked-size}:n").Val(); v != "3" {
		t.Errorf("the replica's size once AddPermits returned = %q, want 3", v)
	}
	link.Stall()
	defer link.Cut()
	waits := func() string { return info(ctx, master, "commandstats", "cmdstat_wait") }
	before := waits()
	if _, err := sem.AddPermits(ctx, 1); !errors.Is(err, dlock.ErrReplicaAck) {
		t.Errorf("AddPermits with replication stalled = %v, want ErrReplicaAck", err)
	}
	if after := waits(); callsOf(after) != callsOf(before)+1 {
		t.Errorf("WAITs after AddPermits with replication stalled: %q, before %q; want one more: an acknowledgement that timed out is not asked again", after, before)
	}
	if v := rdb.Get(ctx, "dlock:{acked-size}:n").Val(); v != "4" {
		t.Errorf("the master's size after an unacknowledged AddPermits(1) of 3 = %q, want 4 (added once)", v)
	}
	if n, err := sem.Available(ctx); err != nil || n != 4 {
		t.Errorf("Available with replication stalled = %d, %v; want 4", n, err)
	}
}

// callsOf reads the calls of an INFO commandstats entry, "calls=<n>,…".
func callsOf(stat string) int {
	n, _ := strconv.Atoi(strings.TrimPrefix(strings.SplitN(stat, ",", 2)[0], "calls="))
	return n
}

// A size change refused (ErrInvalid) keeps its refusal for its copies: a
// late copy of an AddPermits that would have left no permit, landing once
// another caller has grown the size, is refused as the first was, and the
// size stays as the other caller left it.
func TestSemaphoreSizeChangeRefusedIsRefusedToItsLateCopy(t *testing.T) {
	t.Parallel()
	s, direct := setupTCP(t)
	ctx := t.Context()
	rdbP, p := lateCopyClient(t, s)
	sem, _ := newClient(t, rdbP).Semaphore("refused-size", 2)
	other, _ := newClient(t, direct).Semaphore("refused-size", 2)
	if ok, err := sem.TrySetPermits(ctx, 2); err != nil || !ok {
		t.Fatalf("TrySetPermits(2) = %v, %v", ok, err)
	}
	var err error
	lateFirstCopy(p, func() { _, err = sem.AddPermits(ctx, -2) })
	if !errors.Is(err, dlock.ErrInvalid) {
		t.Fatalf("AddPermits(-2) of 2 = %v, want ErrInvalid", err)
	}
	if n, err := other.AddPermits(ctx, 5); err != nil || n != 7 {
		t.Fatalf("another caller's AddPermits(5) = %d, %v; want 7", n, err)
	}
	time.Sleep(700 * time.Millisecond) // the first copy of AddPermits(-2) has landed
	if v := direct.Get(ctx, "dlock:{refused-size}:n").Val(); v != "7" {
		t.Errorf("the kept size after the late copy of a refused AddPermits(-2) = %q, want 7", v)
	}
}

// A size change asked again after its reply was lost gets its first
// copy's answer even when the name was taken as another kind meanwhile:
// it was applied, and it reports so rather than the other kind's key.
func TestSemaphoreSizeChangeAskedAgainAfterTheNameChangedKindGetsItsAnswer(t *testing.T) {
	t.Parallel()
	p, rdb, direct := proxied(t, 0, 5*time.Second)
	ctx := t.Context()
	sem, _ := newClient(t, rdb).Semaphore("resent-kind", 2)
	if _, err := sem.Available(ctx); err != nil { // (warm: the script loaded)
		t.Fatal(err)
	}
	p.StallReplies()
	type result struct {
		n   int
		err error
	}
	done := make(chan result, 1)
	go func() {
		n, err := sem.AddPermits(ctx, 3)
		done <- result{n, err}
	}()
	if !waitFor(5*time.Second, func() bool { return direct.Get(ctx, "dlock:{resent-kind}:n").Val() == "5" }) {
		t.Fatal("AddPermits(3) never reached Redis")
	}
	l, err := newClient(t, direct).TryAcquire(ctx, "resent-kind") // the name, a plain lock now
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	p.Cut()
	if r := <-done; r.err != nil || r.n != 5 {
		t.Errorf("AddPermits(3) of 2, asked again after the name became a plain lock = %d, %v; want 5, as applied", r.n, r.err)
	}
}

// Size changes from many goroutines while the network cuts connections,
// holds replies and delays requests at random are each applied at most
// once: the kept size is the start, plus the deltas of the calls that
// succeeded, plus at most those of the calls that failed (a failed call
// may have been applied, once).
func TestSemaphoreSizeChangesUnderFaultsAreAppliedAtMostOnce(t *testing.T) {
	t.Parallel()
	s, direct := setupTCP(t)
	ctx := t.Context()
	p := redistest.NewProxy(t, s.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ReadTimeout: 150 * time.Millisecond, PoolSize: 4})
	t.Cleanup(func() { rdb.Close() })
	sem, _ := newClient(t, rdb).Semaphore("faulted-size", 1000)
	if ok, err := sem.TrySetPermits(ctx, 1000); !ok || err != nil {
		t.Fatalf("TrySetPermits(1000) = %v, %v", ok, err)
	}
	faults := 40 // the calls go on until the last
	if testing.Short() {
		faults = 15
	}
	var applied, mayAdd, mayTake, failed, made atomic.Int64 // the successes' deltas; the failed calls' positive and negative ones
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := 0; i < 1000 && ctx.Err() == nil; i++ {
				select {
				case <-stop:
					return
				default:
				}
				d := []int64{1, 2, 3, -1}[rand.IntN(4)]
				cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
				_, err := sem.AddPermits(cctx, int(d))
				cancel()
				made.Add(1)
				switch {
				case err == nil:
					applied.Add(d)
				case d > 0:
					failed.Add(1)
					mayAdd.Add(d)
				default:
					failed.Add(1)
					mayTake.Add(d)
				}
			}
		})
	}
	for range faults {
		time.Sleep(time.Duration(5+rand.IntN(25)) * time.Millisecond)
		switch rand.IntN(3) {
		case 0:
			p.Cut()
		case 1:
			p.StallReplies()
			time.Sleep(time.Duration(rand.IntN(200)) * time.Millisecond)
			p.Cut()
		default:
			p.Delay(time.Duration(rand.IntN(250))*time.Millisecond, 0)
			time.Sleep(50 * time.Millisecond)
			p.Delay(0, 0)
		}
	}
	close(stop)
	wg.Wait()
	p.Cut()
	if !waitFor(5*time.Second, func() bool { return p.HeldRequests() == 0 }) { // (every late copy landed or dropped)
		t.Fatalf("%d requests still held by the proxy", p.HeldRequests())
	}
	size, err := strconv.ParseInt(direct.Get(ctx, "dlock:{faulted-size}:n").Val(), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	extra := size - 1000 - applied.Load()
	t.Logf("%d calls, %d failed; the kept size %d is 1000 + %d from the successes + %d", made.Load(), failed.Load(), size, applied.Load(), extra)
	if extra < mayTake.Load() || extra > mayAdd.Load() {
		t.Errorf("the kept size %d = 1000 + %d from the successes + %d, outside what the failed calls could have changed [%d, %d]",
			size, applied.Load(), extra, mayTake.Load(), mayAdd.Load())
	}
}
