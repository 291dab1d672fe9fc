package backend

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/internal/goredisdriver"
	"github.com/dlockio/dlock/internal/leakcheck"
	"github.com/dlockio/dlock/internal/redistest"
)

// The batcher sends each command once: a command whose reply is lost with
// its connection is not sent again by go-redis, even with retries on, alone
// or in a pipeline, so a command whose reply came back has no copy that can
// land later (Claim.Clean rests on it).
func TestBatcherNeverSendsTwice(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t, redistest.TCP())
	direct := s.Client(t)
	for _, tc := range []struct {
		name  string
		alone bool
		calls int
	}{{"alone", true, 1}, {"one call", false, 1}, {"a pipeline", false, 3}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			p := redistest.NewProxy(t, s.Addr())
			rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: 3})
			t.Cleanup(func() { rdb.Close() })
			b := &batcher{rdb: rdb, alone: tc.alone}
			if err := rdb.Ping(ctx).Err(); err != nil { // pooled connections through the proxy, for both ways
				t.Fatal(err)
			}
			if _, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
				p.Ping(ctx)
				p.Ping(ctx)
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			key := "once:" + tc.name
			p.StallReplies()
			var wg sync.WaitGroup
			errs := make([]error, tc.calls)
			if tc.calls == 1 {
				wg.Go(func() { _, errs[0] = b.Do(ctx, "INCR", key) })
			} else { // (the flush of calls queued together: one pipeline on the pooled connection)
				calls := make([]*call, tc.calls)
				for i := range calls {
					calls[i] = &call{Once: goredisdriver.Once{Cmder: redis.NewCmd(ctx, "INCR", key)}, ctx: ctx}
				}
				wg.Go(func() {
					b.send(calls)
					for i, c := range calls {
						errs[i] = c.Err()
					}
				})
			}
			deadline := time.Now().Add(5 * time.Second)
			for direct.Get(ctx, key).Val() != fmt.Sprint(tc.calls) && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			p.Cut()
			wg.Wait()
			for i, err := range errs {
				if err == nil {
					t.Errorf("call %d: nil error, want the lost connection's", i)
				} else if !ReplyLost(err) {
					t.Errorf("call %d: %v does not read as a lost reply", i, err)
				}
			}
			time.Sleep(100 * time.Millisecond) // (a re-sent copy would have landed by now)
			if got := direct.Get(ctx, key).Val(); got != fmt.Sprint(tc.calls) {
				t.Errorf("INCR ran %s times for %d calls: go-redis sent a command again", got, tc.calls)
			}
		})
	}
}

// Under many goroutines and cut connections, each batched call's answer
// matches what Redis did: a reply means the command ran once, a call never
// sent did not run, and one whose reply was lost ran at most once.
func TestBatchedCallsUnderCutsAnswerWhatRedisDid(t *testing.T) {
	t.Parallel()
	leakcheck.Check(t)
	s := redistest.Start(t, redistest.TCP())
	direct := s.Client(t)
	p := redistest.NewProxy(t, s.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: 3})
	t.Cleanup(func() { rdb.Close() })
	b := &batcher{rdb: rdb}
	ctx := t.Context()
	const workers, calls = 24, 30
	errs := make([][]error, workers)
	stop := make(chan struct{})
	var cutter sync.WaitGroup
	cutter.Go(func() {
		for range 200 {
			select {
			case <-stop:
				return
			case <-time.After(15 * time.Millisecond):
				p.Cut()
			}
		}
	})
	var wg sync.WaitGroup
	for w := range workers {
		errs[w] = make([]error, calls)
		wg.Go(func() {
			for i := range calls {
				cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				_, errs[w][i] = b.Do(cctx, "RPUSH", "cuts", fmt.Sprint(w, ".", i))
				cancel()
			}
		})
	}
	wg.Wait()
	close(stop)
	cutter.Wait()
	ran := map[string]int{}
	for _, v := range direct.LRange(ctx, "cuts", 0, -1).Val() {
		ran[v]++
	}
	answered, lost, unsent := 0, 0, 0
	for w := range workers {
		for i, err := range errs[w] {
			id := fmt.Sprint(w, ".", i)
			switch n := ran[id]; {
			case n > 1:
				t.Errorf("call %s ran %d times", id, n)
			case err == nil:
				answered++
				if n != 1 {
					t.Errorf("call %s answered, but ran %d times", id, n)
				}
			case neverSent(err):
				unsent++
				if n != 0 {
					t.Errorf("call %s never sent (%v), but ran", id, err)
				}
			case !ReplyLost(err):
				t.Errorf("call %s = %v, want a reply, a call never sent or a lost reply", id, err)
			default:
				lost++
			}
		}
	}
	t.Logf("%d calls answered, %d never sent, %d with their replies lost", answered, unsent, lost)
	if answered == 0 {
		t.Error("no call was answered")
	}
}
