package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/leakcheck"
	"github.com/dlockio/dlock/internal/redistest"
)

// Many goroutines of one Client share pipelines; each still gets its own
// reply, and an error reply in a batch stays with its own call.
func TestPipelinedCallsKeepTheirReplies(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	rdb.HSet(ctx, "dlock:{bad}", "f", "v")
	c := newClient(t, rdb)
	const n = 64
	var wg sync.WaitGroup
	locks := make([]*dlock.Lock, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			name := fmt.Sprintf("p%d", i)
			if i == n/2 {
				name = "bad"
			}
			locks[i], errs[i] = c.TryAcquire(ctx, name)
		})
	}
	wg.Wait()
	tokens := map[string]bool{}
	for i := range n {
		if i == n/2 {
			if !errors.Is(errs[i], dlock.ErrWrongType) {
				t.Errorf("TryAcquire(bad) = %v, want ErrWrongType", errs[i])
			}
			continue
		}
		if errs[i] != nil {
			t.Errorf("TryAcquire(p%d) = %v", i, errs[i])
			continue
		}
		if got := holderOf(rdb.Get(ctx, locks[i].Key()).Val()); got != locks[i].Token() || tokens[got] {
			t.Errorf("lock p%d: key holds %q, want its own unique token %q", i, got, locks[i].Token())
		}
		tokens[locks[i].Token()] = true
	}
	for i, l := range locks {
		if l != nil {
			if err := l.Release(ctx); err != nil {
				t.Errorf("Release(p%d) = %v", i, err)
			}
		}
	}
	if n := liveKeys(ctx, rdb, "dlock:{p0}", "dlock:{p1}", "dlock:{p63}"); n != 0 {
		t.Errorf("%d lock keys left after Release, want 0", n)
	}
}

// Stats counts the script calls the batcher sent and the writes that
// carried them: every acquire and release is one call, concurrent ones
// share writes, and without pipelining nothing is counted.
func TestStatsCountBatches(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.WithAutoExtend(false))
	if s := c.Stats(); s != (dlock.Stats{}) {
		t.Fatalf("Stats of a new Client = %+v, want zero", s)
	}
	if _, err := c.TryAcquire(ctx, ""); err == nil {
		t.Fatal("TryAcquire of an invalid name succeeded")
	}
	const goroutines, pairs = 32, 20
	var wg sync.WaitGroup
	for i := range goroutines {
		wg.Go(func() {
			for j := range pairs {
				l, err := c.TryAcquire(ctx, fmt.Sprintf("s%d-%d", i, j))
				if err != nil {
					t.Error(err)
					return
				}
				if err := l.Release(ctx); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	s := c.Stats()
	// Each script is loaded once (NOSCRIPT, then the call again).
	if want := uint64(2 * goroutines * pairs); s.Calls < want || s.Calls > want+2*goroutines {
		t.Errorf("Calls = %d, want %d (+ at most a NOSCRIPT retry per goroutine and script)", s.Calls, want)
	}
	if s.Acquired != goroutines*pairs || s.Released != goroutines*pairs || s.NotAcquired+s.Lost+s.Errors+s.ExtendFailed != 0 {
		t.Errorf("Stats = %+v, want %d acquired and released, nothing else", s, goroutines*pairs)
	}
	if s.Writes == 0 || s.Writes > s.Calls {
		t.Errorf("Writes = %d with %d calls, want 1..calls", s.Writes, s.Calls)
	}
	t.Logf("%d calls in %d writes: %.1f per write", s.Calls, s.Writes, float64(s.Calls)/float64(s.Writes))

	unbatched := newClient(t, rdb, pipelined(false))
	l, err := unbatched.TryAcquire(ctx, "u")
	if err != nil {
		t.Fatal(err)
	}
	l.Release(ctx)
	if s := unbatched.Stats(); s.Calls != 0 || s.Writes != 0 || s.Acquired != 1 || s.Released != 1 {
		t.Errorf("Stats without pipelining = %+v, want no calls or writes counted, 1 acquired and released", s)
	}
}

// The batcher under heavy cancellation.
// 48 goroutines, each on its own free name, TryAcquire with random 0-4ms
// deadlines through a proxy that delays replies 1-3ms (so calls are
// abandoned queued and in flight), under -race. Every success must own the
// key; every failure must be ctx-caused and match ErrNotAcquired+ctx.Err;
// nothing may be left behind once the background undos are done.
func TestBatcherUnderACancellationStorm(t *testing.T) {
	// Serial: its deadlines are 0-4ms and each name must be free again once its undo ran; a busy machine delays the undos past the next attempt.
	if testing.Short() {
		t.Skip("a long fault/timing scenario; run without -short")
	}
	leakcheck.Check(t)
	p, rdb, direct := proxied(t, -1, 5*time.Second)
	for _, m := range modes(t, rdb, false) {
		t.Run(m.name, func(t *testing.T) {
			c := m.new(t, dlock.LeaseTTL(5*time.Second))
			p.Delay(0, 2*time.Millisecond)
			defer p.Delay(0, 0)
			var wg sync.WaitGroup
			var bad atomic.Int32
			var got atomic.Int32
			deadline := time.Now().Add(8 * time.Second)
			for g := range 48 {
				wg.Go(func() {
					name := fmt.Sprintf("storm-%s-%d", m.name, g)
					rnd := rand.New(rand.NewPCG(uint64(g), 7))
					for i := 0; i < 60 && time.Now().Before(deadline); i++ {
						ctx, cancel := context.WithTimeout(m.ctx(t.Context()), time.Duration(rnd.IntN(4000))*time.Microsecond)
						l, err := c.TryAcquire(ctx, name)
						ctxErr := ctx.Err()
						cancel()
						if err != nil {
							if ctxErr == nil || !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, ctxErr) {
								if bad.Add(1) < 5 {
									t.Errorf("%s: TryAcquire on a free name = %v (ctx err %v)", name, err, ctxErr)
								}
							}
							continue
						}
						got.Add(1)
						key := "dlock:{" + name + "}"
						owned := false
						if m.name == "reentrant" { // Token() is the owner id
							owned = direct.HGet(t.Context(), key, "owner").Val() == l.Token()
						} else {
							owned = holderOf(direct.Get(t.Context(), key).Val()) == l.Token()
						}
						if _, err := l.TTL(t.Context()); err != nil {
							owned = false
						}
						if !owned && bad.Add(1) < 5 {
							t.Errorf("%s: TryAcquire succeeded but the key does not hold it: %v / %v", name,
								direct.HGetAll(t.Context(), key).Val(), direct.Get(t.Context(), key).Val())
						}
						if err := l.Release(context.Background()); err != nil && bad.Add(1) < 5 {
							t.Errorf("%s: Release = %v", name, err)
						}
					}
				})
			}
			wg.Wait()
			t.Logf("%d acquisitions succeeded", got.Load())
			time.Sleep(2500 * time.Millisecond) // background undos (bounded by 2s)
			var left []string
			iter := direct.Scan(t.Context(), 0, "dlock:{storm-"+m.name+"-*}", 1000).Iterator()
			for iter.Next(t.Context()) {
				if liveKeys(t.Context(), direct, iter.Val()) == 1 {
					left = append(left, iter.Val())
				}
			}
			if len(left) > 0 {
				t.Errorf("lock keys left behind after the storm: %v", left)
			}
			for g := range 48 {
				if n := direct.LLen(t.Context(), fmt.Sprintf("dlock:{storm-%s-%d}:q", m.name, g)).Val(); n != 0 {
					t.Errorf("queue entries left behind for storm-%s-%d", m.name, g)
				}
			}
		})
	}
}

// A call in a pipeline that a hook of the Redis client failed before it
// was sent (a circuit breaker that opened) gets the hook's error, as a call
// sent alone does: go-redis leaves the pipeline's commands without a reply
// or an error then, which read as an unexpected nil reply.
func TestBatchedCallsFailedByAClientHookGetTheHooksError(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	ctx := t.Context()
	h := &failingPipelines{err: errors.New("circuit open")}
	h.on.Store("")
	rdb := s.Client(t)
	rdb.AddHook(h)
	c := newClient(t, rdb, dlock.LeaseTTL(10*time.Second))
	warm(t, ctx, c, "lock", "warm") // (its scripts loaded, by a pipeline the hook lets through)
	failed := 0
	for round := 0; round < 5 && failed == 0; round++ {
		h.on.Store("reads")
		var mu sync.Mutex
		var locks []*dlock.Lock
		var wg sync.WaitGroup
		for i := range 64 {
			wg.Go(func() {
				l, err := c.TryAcquire(ctx, fmt.Sprintf("hooked-%d-%d", round, i))
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil: // (sent alone: the hook fails pipelines only)
					locks = append(locks, l)
				case errors.Is(err, h.err):
					failed++
				default:
					failed++
					t.Errorf("TryAcquire in a pipeline the hook failed = %v, want the hook's error", err)
				}
			})
		}
		wg.Wait()
		h.on.Store("")
		for _, l := range locks {
			l.Release(ctx)
		}
	}
	if failed == 0 {
		t.Fatal("no call went in a pipeline in 5 rounds of 64 at once")
	}
}

// With replica acknowledgement a script call goes with its WAIT in a
// pipeline of its own; one that a hook of the Redis client failed before it
// was sent gets the hook's error too, not an unexpected nil reply.
func TestAckedCallFailedByAClientHookGetsTheHooksError(t *testing.T) {
	t.Parallel()
	master := redistest.Start(t, redistest.TCP(), redistest.Args("--repl-diskless-sync-delay", "0"))
	replica := redistest.Start(t, redistest.TCP(), redistest.Args("--replicaof", "127.0.0.1", strconv.Itoa(master.Port())))
	ctx := t.Context()
	if !replicaAcks(ctx, master, replica) {
		t.Fatal("the replica never acknowledged")
	}
	h := &failingPipelines{err: errors.New("circuit open")}
	h.on.Store("")
	rdb := master.Client(t)
	rdb.AddHook(h)
	c := newClient(t, rdb, dlock.WithReplicaAck(1, time.Second))
	warm(t, ctx, c, "lock", "warm")
	h.on.Store("reads")
	defer h.on.Store("")
	if l, err := c.TryAcquire(ctx, "acked-hooked"); !errors.Is(err, h.err) {
		t.Errorf("TryAcquire whose pipeline the hook failed = %v (a Lock: %v), want the hook's error", err, l != nil)
	}
}
