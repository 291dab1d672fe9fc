package dlock_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/driver"
	"github.com/dlockio/dlock/driver/drivertest"
	"github.com/dlockio/dlock/internal/goredisdriver"
	"github.com/dlockio/dlock/internal/leakcheck"
)

// lossyConn is go-redis's driver with two taps. Once armed, its next script
// call runs on the server but, when lose is closed, reports its reply lost
// (io.EOF), as a connection cut after the server ran it would. And it
// reports each pub/sub message's payload on msgs once the hub asked for
// the next one: the hub has dispatched it to its waiters by then.
type lossyConn struct {
	driver.Conn
	armed   atomic.Bool
	ran     chan struct{} // closed: the armed call ran on the server
	lose    chan struct{} // closed by the test: the armed call's reply is lost
	scripts atomic.Int32  // script calls answered
	msgs    chan string
	mu      sync.Mutex
	channel string // the last channel subscribed
}

func newLossyConn(c driver.Conn) *lossyConn {
	return &lossyConn{Conn: c, ran: make(chan struct{}), lose: make(chan struct{}), msgs: make(chan string, 64)}
}

func (c *lossyConn) Do(ctx context.Context, args ...any) (any, error) {
	v, err := c.Conn.Do(ctx, args...)
	if name, _ := driver.String(args[0]); !strings.HasPrefix(strings.ToLower(name), "eval") {
		return v, err
	}
	if c.armed.CompareAndSwap(true, false) {
		close(c.ran)
		select {
		case <-c.lose:
		case <-ctx.Done():
		}
		return nil, io.EOF
	}
	c.scripts.Add(1)
	return v, err
}

func (c *lossyConn) PubSub(ctx context.Context, channel string) (driver.PubSub, error) {
	ps, err := c.Conn.PubSub(ctx, channel)
	if err != nil {
		return nil, err
	}
	return &tappedPubSub{PubSub: ps, c: c}, nil
}

func (c *lossyConn) subscribed() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.channel
}

type tappedPubSub struct {
	driver.PubSub
	c    *lossyConn
	last string // the payload of the message last received (one reader)
}

func (p *tappedPubSub) Subscribe(ctx context.Context, channels ...string) error {
	p.c.mu.Lock()
	p.c.channel = channels[len(channels)-1]
	p.c.mu.Unlock()
	return p.PubSub.Subscribe(ctx, channels...)
}

func (p *tappedPubSub) Receive(ctx context.Context) (driver.Message, error) {
	if p.last != "" {
		select {
		case p.c.msgs <- p.last:
		default:
		}
		p.last = ""
	}
	m, err := p.PubSub.Receive(ctx)
	if err == nil && (m.Kind == "message" || m.Kind == "smessage") {
		p.last = m.Payload
	}
	return m, err
}

// A queued waiter whose renewing attempt lost its reply after Redis had
// handed it the lock asks again under the same token when its Redis client
// retries: Redis answers that it holds the lock, and it takes it before
// the next waiter, keeping its place. When its client does not retry, its
// wait ends with the lost reply, and the undo of its attempt passes the
// lock on to the next waiter: nothing is left stuck. For every queued
// kind; "write over reads" is a writer queued between readers.
func TestQueuedWaiterWhoseReplyIsLostKeepsItsPlaceOrPassesTheLockOn(t *testing.T) {
	t.Parallel()
	kinds := map[string]kindCase{}
	for _, k := range everyKind() {
		kinds[k.name] = k
	}
	for _, tc := range []struct {
		name, holder, waiter, next string
		retries                    bool
	}{
		{"lock", "own", "own", "own", true},
		{"semaphore", "semaphore", "semaphore", "semaphore", true},
		{"write", "write", "write", "write", true},
		{"write over reads", "read", "write", "read", true},
		{"election", "election", "election", "election", true},
		{"lock without retries", "own", "own", "own", false},
		{"semaphore without retries", "semaphore", "semaphore", "semaphore", false},
		{"write without retries", "write", "write", "write", false},
		{"write over reads without retries", "read", "write", "read", false},
		{"election without retries", "election", "election", "election", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv, rdb := setup(t)
			ctx := t.Context()
			const name = "stale"
			direct := newClient(t, rdb)
			opts := srv.Options()
			if !tc.retries {
				opts.MaxRetries = -1
			}
			wrdb := redis.NewClient(opts)
			t.Cleanup(func() { wrdb.Close() })
			lc := newLossyConn(goredisdriver.Conn(wrdb))
			wc, err := dlock.NewFrom(lc)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { wc.Close(context.Background()) })
			h, err := kinds[tc.holder].take(ctx, direct, name, true)
			if err != nil {
				t.Fatalf("the holder: %v", err)
			}
			wait := func(c *dlock.Client, kind string) chan takeResult {
				got := make(chan takeResult, 1)
				go func() {
					wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
					defer cancel()
					l, err := kinds[kind].take(wctx, c, name, false)
					got <- takeResult{l, err}
				}()
				return got
			}
			queued := func(n int) func() bool {
				return func() bool {
					info, err := direct.Inspect(ctx, name)
					return err == nil && info.Queued == n
				}
			}
			// The waiter queues, subscribes and queues again, then sleeps.
			w := wait(wc, tc.waiter)
			if !waitFor(5*time.Second, func() bool { return lc.scripts.Load() >= 2 && queued(1)() }) {
				t.Fatal("the waiter never queued")
			}
			x := wait(direct, tc.next)
			if !waitFor(5*time.Second, queued(2)) {
				t.Fatal("the next waiter never queued")
			}
			// Woken, the waiter renews its place; its reply is held.
			lc.armed.Store(true)
			if err := rdb.Publish(ctx, lc.subscribed(), "*").Err(); err != nil {
				t.Fatal(err)
			}
			if !closedWithin(lc.ran, 5*time.Second) {
				t.Fatal("the waiter never tried again")
			}
			// The holder releases: Redis hands the lock to the waiter's token,
			// and the waiter's hub delivers the handover.
			if err := h.Release(ctx); err != nil {
				t.Fatal(err)
			}
			handed := false
			for deadline := time.After(5 * time.Second); !handed; {
				select {
				case m := <-lc.msgs:
					handed = m != "*"
				case <-deadline:
					t.Fatal("the handover never reached the waiter")
				}
			}
			close(lc.lose)
			if tc.retries { // asked again, the waiter's attempt finds the lock its own
				inTurn(t, w, x, "the waiter", "the next waiter")
				return
			}
			if wr := <-w; !errors.Is(wr.err, io.EOF) {
				t.Errorf("the waiter whose reply was lost, without retries = %v, want io.EOF", wr.err)
			}
			inTurn(t, x, nil, "the next waiter", "")
		})
	}
}

// takeResult is what a waiter's take returned.
type takeResult struct {
	l   *dlock.Lock
	err error
}

// inTurn checks that first takes the lock, that second does not while
// first holds it, and that second takes it once first released it; with
// second nil, only that first takes the lock, which it then releases.
func inTurn(t *testing.T, first, second <-chan takeResult, firstName, secondName string) {
	t.Helper()
	ctx := t.Context()
	var fr takeResult
	select {
	case fr = <-first:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s never took the lock", firstName)
	}
	if fr.err != nil {
		t.Fatalf("%s: %v", firstName, fr.err)
	}
	if second == nil {
		if err := fr.l.Release(ctx); err != nil {
			t.Errorf("%s's Release = %v, want nil", firstName, err)
		}
		return
	}
	select {
	case sr := <-second:
		if sr.err == nil {
			t.Errorf("%s took the lock (lease %s) while %s holds it", secondName, sr.l.Token(), firstName)
			sr.l.Release(ctx)
		} else {
			t.Errorf("%s: %v", secondName, sr.err)
		}
		fr.l.Release(ctx)
		return
	case <-time.After(2 * time.Second): // (long enough for a wrongly trusted handover to show)
	}
	if err := fr.l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case sr := <-second:
		if sr.err != nil {
			t.Fatalf("%s after %s released: %v", secondName, firstName, sr.err)
		}
		if err := sr.l.Release(ctx); err != nil {
			t.Errorf("%s's Release = %v, want nil", secondName, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s never took the lock after %s released", secondName, firstName)
	}
}

// scriptCounter counts the script calls a go-redis client got replies to,
// and with args their arguments, keys and ARGV (the digest and the number
// of keys not counted).
type scriptCounter struct{ n, args *atomic.Int32 }

func (h scriptCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h scriptCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.count(cmd)
		return err
	}
}

func (h scriptCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			h.count(cmd)
		}
		return err
	}
}

func (h scriptCounter) count(cmd redis.Cmder) {
	if strings.HasPrefix(cmd.Name(), "eval") {
		h.n.Add(1)
		if h.args != nil {
			h.args.Add(int32(len(cmd.Args()) - 3))
		}
	}
}

// A waiter whose pub/sub connection stalls while the holder releases asks
// Redis again once the connection is back: drivertest.WokenAfterBreak on
// go-redis through New (the driver table runs it through NewFrom).
func TestWaiterAsksAgainAfterItsPubSubConnectionBroke(t *testing.T) {
	t.Parallel()
	for _, fair := range []bool{true, false} {
		t.Run(map[bool]string{true: "fair", false: "unfair"}[fair], func(t *testing.T) {
			leakcheck.Check(t)
			p, rdb, direct := proxied(t, 3, 0)
			var scripts atomic.Int32
			rdb.AddHook(scriptCounter{n: &scripts})
			opts := []dlock.Option{dlock.LeaseTTL(30 * time.Second)}
			if !fair {
				opts = append(opts, dlock.WithUnfair(slowBackoff))
			}
			w := newClient(t, rdb, opts...)
			t.Cleanup(func() { w.Close(context.Background()) })
			channel := "dlock:{broke}:ch"
			drivertest.WokenAfterBreak(t, p, w, newClient(t, direct, opts...), "broke", func() bool {
				return scripts.Load() >= 2 && direct.PubSubNumSub(t.Context(), channel).Val()[channel] == 1
			})
		})
	}
}
