package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/redistest"
)

// A lock held by another is refused alike whatever the number of nodes: a
// *NotAcquiredError that names the holder and its remaining lease, not a
// *QuorumError. With an even N (4, 6) the refusals that make a majority
// impossible (N/2) are one fewer than a majority (N/2+1): the attempt stops
// waiting once it has them, and must not report the nodes it did not wait
// for as having missed the node timeout. The attempt ends long before that
// timeout. Odd N (3, 5) is the reference.
func TestRedlockRefusalWithEvenNodes(t *testing.T) {
	for _, n := range []int{3, 4, 5, 6} {
		t.Run(fmt.Sprint(n, "nodes"), func(t *testing.T) {
			_, nodes := startQuorum(t, n)
			ctx := t.Context()
			const nodeTimeout = 2 * time.Second // far above what a refusal takes on loopback
			holder := newRedlock(t, nodes, nodeTimeout, dlock.LeaseTTL(10*time.Second), dlock.WithAutoExtend(false))
			held, err := holder.TryAcquire(ctx, "even", dlock.HolderMeta("the-holder"))
			if err != nil {
				t.Fatal(err)
			}
			defer held.Release(context.WithoutCancel(ctx))

			for _, mode := range []struct {
				name string
				opts []dlock.Option
			}{
				{"default", nil},
				{"unfair", []dlock.Option{dlock.WithUnfair(nil)}},
				{"unfair-pipelined", []dlock.Option{dlock.WithUnfair(nil), pipelined(true)}},
				{"unpipelined", []dlock.Option{pipelined(false)}},
			} {
				opts := append([]dlock.Option{dlock.LeaseTTL(10 * time.Second)}, mode.opts...)
				c := newRedlock(t, nodes, nodeTimeout, opts...)
				check := func(call string, err error, took time.Duration) {
					t.Helper()
					if qe, ok := errors.AsType[*dlock.QuorumError](err); ok {
						t.Errorf("%s %s: %s = a *QuorumError (%v), want a refusal", mode.name, call, err, qe)
					}
					if strings.Contains(fmt.Sprint(err), "node timeout") {
						t.Errorf("%s %s: %v, names the node timeout, which never passed (the call took %v)", mode.name, call, err, took)
					}
					ne, ok := errors.AsType[*dlock.NotAcquiredError](err)
					switch {
					case !ok || !errors.Is(err, dlock.ErrNotAcquired):
						t.Errorf("%s %s = %v, want a *NotAcquiredError", mode.name, call, err)
					case ne.Holder != held.Token() || ne.Meta != "the-holder" || ne.Name != "even":
						t.Errorf("%s %s: refusal %+v, want holder %q, meta %q, name %q", mode.name, call, ne, held.Token(), "the-holder", "even")
					case ne.TTL <= 5*time.Second || ne.TTL > 10*time.Second:
						t.Errorf("%s %s: refusal TTL %v, want the holder's remaining lease (~10s)", mode.name, call, ne.TTL)
					}
					if took >= nodeTimeout {
						t.Errorf("%s %s took %v, want a refusal well within the node timeout %v", mode.name, call, took, nodeTimeout)
					}
				}

				start := time.Now()
				_, err := c.TryAcquire(ctx, "even")
				check("TryAcquire", err, time.Since(start))

				start = time.Now()
				_, err = c.Acquire(ctx, "even", dlock.MaxWait(0))
				check("Acquire(MaxWait(0))", err, time.Since(start))

				// A wait that ends carries the last refusal, not a missing majority.
				start = time.Now()
				_, err = c.Acquire(ctx, "even", dlock.MaxWait(300*time.Millisecond))
				took := time.Since(start)
				if qe, ok := errors.AsType[*dlock.QuorumError](err); ok {
					t.Errorf("%s Acquire(MaxWait(300ms)) = %v, carries a *QuorumError (%v): no majority was missing", mode.name, err, qe)
				}
				if ne, ok := errors.AsType[*dlock.NotAcquiredError](err); !ok || ne.Holder != held.Token() {
					t.Errorf("%s Acquire(MaxWait(300ms)) = %v, want the last refusal, naming the holder", mode.name, err)
				}
				if took >= nodeTimeout {
					t.Errorf("%s Acquire(MaxWait(300ms)) took %v", mode.name, took)
				}

				start = time.Now()
				_, err = c.TryAcquireAll(ctx, []string{"even", "even-free"})
				check("TryAcquireAll", err, time.Since(start))
				if err := c.Close(ctx); err != nil {
					t.Fatal(err)
				}
			}
			// The refused attempts left the holder's lease as it was.
			if err := held.Release(ctx); err != nil {
				t.Errorf("holder's Release after the refusals = %v", err)
			}
		})
	}
}

// A wait whose end cuts its last attempt short reports the last answered
// attempt, which found the lock held: not a missing majority whose nodes
// "did not answer within the node timeout" when the wait merely stopped
// waiting for them. Two of three nodes answer 200ms late (the proxy holds
// the requests): the first attempt is answered after 200ms and undone on
// every node (one was not waited for) by 400ms; the second, sent 10ms
// later, is still out when MaxWait ends at 500ms. (Another wait of the Client listens on the lock's
// channel already, so the wait does not subscribe through the delay.)
func TestRedlockWaitEndingMidAttemptReportsTheRefusal(t *testing.T) {
	srvs, direct := startQuorum(t, 3)
	ctx := t.Context()
	const nodeTimeout = 2 * time.Second
	holder := newRedlock(t, direct, nodeTimeout, dlock.LeaseTTL(10*time.Second), dlock.WithAutoExtend(false))
	held, err := holder.TryAcquire(ctx, "cut")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(context.WithoutCancel(ctx))

	nodes := []redis.UniversalClient{direct[0]}
	var proxies []*redistest.Proxy
	for _, s := range srvs[1:] {
		p := redistest.NewProxy(t, s.Addr())
		rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1})
		t.Cleanup(func() { rdb.Close() })
		var wg sync.WaitGroup
		for range 8 { // connections made before the delay: only commands are held
			wg.Go(func() { rdb.Ping(ctx) })
		}
		wg.Wait()
		proxies = append(proxies, p)
		nodes = append(nodes, rdb)
	}
	c := newRedlock(t, nodes, nodeTimeout, dlock.LeaseTTL(10*time.Second),
		dlock.WithUnfair(func(int) time.Duration { return 10 * time.Millisecond }))
	bctx, stop := context.WithCancel(ctx)
	other := make(chan struct{})
	go func() {
		defer close(other)
		c.Acquire(bctx, "cut")
	}()
	defer func() { stop(); <-other; c.Close(context.WithoutCancel(ctx)) }()
	time.Sleep(300 * time.Millisecond) // the other wait has subscribed
	for _, p := range proxies {
		p.Delay(200*time.Millisecond, 0)
	}

	start := time.Now()
	_, err = c.Acquire(ctx, "cut", dlock.MaxWait(500*time.Millisecond))
	took := time.Since(start)
	t.Logf("Acquire took %v: %v", took, err)
	if qe, ok := errors.AsType[*dlock.QuorumError](err); ok {
		t.Errorf("Acquire = %v, carries a *QuorumError (%v) of an attempt cut short", err, qe)
	}
	if strings.Contains(fmt.Sprint(err), "node timeout") {
		t.Errorf("Acquire = %v, names the node timeout, which never passed (the call took %v)", err, took)
	}
	if ne, ok := errors.AsType[*dlock.NotAcquiredError](err); !ok || ne.Holder != held.Token() || ne.TTL <= 0 {
		t.Errorf("Acquire = %v, want the last refusal, naming the holder and its lease", err)
	}
}
