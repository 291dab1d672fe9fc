package dlock_test

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
)

// The server's work per operation, counted as docs/performance.md counts
// it: CONFIG RESETSTAT, n operations one after another, INFO commandstats;
// every command a script runs inside Redis counts, and so does the call.
// The budgets are that table's: a change that makes an operation cost the
// server more commands fails here, whatever it does to timings.

// commandsPerOp runs op n times after one warm-up run (scripts loaded,
// connections made) and returns the commands rdb's server ran per run.
func commandsPerOp(t *testing.T, ctx context.Context, rdb *redis.Client, n int, op func(i int)) float64 {
	t.Helper()
	op(-1)
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		op(i)
	}
	v, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, line := range strings.Split(v, "\r\n") {
		name, rest, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":")
		if !ok || name == line {
			continue
		}
		switch strings.SplitN(name, "|", 2)[0] {
		case "info", "config", "hello", "client", "ping", "subscribe", "ssubscribe", "unsubscribe", "sunsubscribe", "script":
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			if k, val, ok := strings.Cut(kv, "="); ok && k == "calls" {
				c, _ := strconv.Atoi(val)
				total += c
			}
		}
	}
	return float64(total) / float64(n)
}

func TestCommandsPerOperation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const n = 20
	type holder interface {
		TryAcquire(context.Context, ...dlock.LockOption) (*dlock.Lock, error)
	}
	for _, tc := range []struct {
		name string
		opts []dlock.Option
		// take returns what takes one lease of the kind on c.
		take func(t *testing.T, c *dlock.Client) holder
		// pair, extend, fence: the budgets, commands per uncontended
		// acquire + release, per extension, per first fence.
		pair, extend, fence float64
	}{
		{name: "fair lock", pair: 7, extend: 3, fence: 4},
		{name: "unfair lock", opts: []dlock.Option{dlock.WithUnfair(nil)}, pair: 6, extend: 3, fence: 4},
		{name: "semaphore permit", take: func(t *testing.T, c *dlock.Client) holder {
			s, err := c.Semaphore("count-sem", 3)
			if err != nil {
				t.Fatal(err)
			}
			return s
		}, pair: 10, extend: 6, fence: 6}, // (its release and fence GET the marker: see docs/resume.md)
		{name: "read hold", take: func(t *testing.T, c *dlock.Client) holder {
			rw, err := c.RWMutex("count-rw")
			if err != nil {
				t.Fatal(err)
			}
			return rw.Reader()
		}, pair: 10, extend: 6, fence: 6},
		{name: "write hold", take: func(t *testing.T, c *dlock.Client) holder {
			return newRW(t, c, "count-rw").Writer()
		}, pair: 10, extend: 6, fence: 6},
		{name: "hold of 2 permits", take: func(t *testing.T, c *dlock.Client) holder {
			s := newSemaphore(t, c, "count-sem", 3)
			return holderFunc(func(ctx context.Context, opts ...dlock.LockOption) (*dlock.Lock, error) {
				return s.AcquireN(ctx, 2, append(opts, dlock.MaxWait(0))...)
			})
		}, pair: 10, extend: 7, fence: 6}, // (its extension reads every permit of the hold: ZMSCORE)
		// A reentrant hold's and a term's fence comes with the grant: Fence costs nothing.
		{name: "reentrant lock", opts: []dlock.Option{dlock.WithReentrant(true)}, pair: 16, extend: 8, fence: 0}, // (an extension reads every hold: HGETALL)
		{name: "campaign term", take: func(t *testing.T, c *dlock.Client) holder {
			e, err := c.Election("count-election")
			if err != nil {
				t.Fatal(err)
			}
			return holderFunc(func(ctx context.Context, opts ...dlock.LockOption) (*dlock.Lock, error) {
				ld, err := e.Campaign(ctx, "v", append(opts, dlock.MaxWait(0))...)
				if err != nil {
					return nil, err
				}
				return ld.Lock(), nil
			})
		}, pair: 12, extend: 5, fence: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, rdb := setup(t)
			c := newClient(t, rdb, append([]dlock.Option{dlock.WithAutoExtend(false)}, tc.opts...)...)
			take := func() *dlock.Lock {
				t.Helper()
				var (
					l   *dlock.Lock
					err error
				)
				if tc.take != nil {
					l, err = tc.take(t, c).TryAcquire(ctx)
				} else {
					l, err = c.TryAcquire(ctx, "count-lock")
				}
				if err != nil {
					t.Fatalf("TryAcquire: %v", err)
				}
				return l
			}
			pair, extend, fenced := commandsPerPairExtendFence(t, ctx, rdb, n, take)
			t.Logf("%s: %.2f commands per pair, %.2f per extension, %.2f per fence", tc.name, pair, extend, fenced-pair)
			if pair > tc.pair {
				t.Errorf("an uncontended acquire + release costs %.2f commands; the budget is %v", pair, tc.pair)
			}
			if extend > tc.extend {
				t.Errorf("an extension costs %.2f commands; the budget is %v", extend, tc.extend)
			}
			if fenced-pair > tc.fence {
				t.Errorf("a fence costs %.2f commands; the budget is %v", fenced-pair, tc.fence)
			}
		})
	}
}

// Each argument of a script call costs Redis a string of its own, and Lua
// a place in KEYS or ARGV (the tables grow at 1, 2, 3, 5 entries): an
// uncontended pair sends what its scripts' common path reads, and what
// only a contended, marked or sharded call reads is left out (the publish
// command of release.lua, the marker's window of the release scripts, the
// queue flag of a fair try, a permit's token besides its member). A lock's
// Acquire sends one more: its waiter's (the wake key, the queue flag).
func TestUncontendedPairSendsOnlyWhatItsScriptsRead(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	type acquirer func() (*dlock.Lock, error)
	lock := func(c *dlock.Client) (acquirer, acquirer) {
		return func() (*dlock.Lock, error) { return c.TryAcquire(ctx, "args-lock") },
			func() (*dlock.Lock, error) { return c.Acquire(ctx, "args-lock") }
	}
	for _, tc := range []struct {
		name         string
		opts         []dlock.Option
		take         func(c *dlock.Client) (try, wait acquirer)
		args, waiter int32 // keys and ARGV of a TryAcquire and its Release together; an Acquire's more
	}{
		{name: "fair lock", take: lock, args: 6 + 3 + 5 + 2, waiter: 1},                                                // (acquire_fair.lua, release_fair.lua)
		{name: "unfair lock", opts: []dlock.Option{dlock.WithUnfair(nil)}, take: lock, args: 2 + 2 + 3 + 1, waiter: 1}, // (acquire.lua, release.lua)
		{name: "semaphore permit", take: func(c *dlock.Client) (acquirer, acquirer) {
			s := newSemaphore(t, c, "args-sem", 3)
			return func() (*dlock.Lock, error) { return s.TryAcquire(ctx) }, func() (*dlock.Lock, error) { return s.Acquire(ctx) }
		}, args: 6 + 8 + 6 + 4}, // (hold_acquire.lua, hold_release.lua)
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, rdb := setup(t)
			scripts, args := &atomic.Int32{}, &atomic.Int32{}
			rdb.AddHook(scriptCounter{n: scripts, args: args})
			try, wait := tc.take(newClient(t, rdb, append([]dlock.Option{dlock.WithAutoExtend(false)}, tc.opts...)...))
			for _, acquire := range []struct {
				name string
				do   acquirer
				args int32
			}{{"TryAcquire", try, tc.args}, {"Acquire", wait, tc.args + tc.waiter}} {
				scripts.Store(0)
				args.Store(0)
				l, err := acquire.do()
				if err != nil {
					t.Fatalf("%s: %v", acquire.name, err)
				}
				if err := l.Release(ctx); err != nil {
					t.Fatalf("Release: %v", err)
				}
				if scripts.Load() != 2 || args.Load() != acquire.args {
					t.Errorf("an uncontended %s and its Release sent %d arguments in %d script calls; want %d in 2",
						acquire.name, args.Load(), scripts.Load(), acquire.args)
				}
			}
		})
	}
}

// holderFunc takes a lease with its function, for a kind whose lease is
// not taken by a TryAcquire method (a hold of more permits, a term).
type holderFunc func(ctx context.Context, opts ...dlock.LockOption) (*dlock.Lock, error)

func (f holderFunc) TryAcquire(ctx context.Context, opts ...dlock.LockOption) (*dlock.Lock, error) {
	return f(ctx, opts...)
}

// commandsPerPairExtendFence counts, over n operations each, the commands
// per acquire (take) + release, per extension, and per acquire + first
// fence + release.
func commandsPerPairExtendFence(t *testing.T, ctx context.Context, rdb *redis.Client, n int, take func() *dlock.Lock) (pair, extend, fenced float64) {
	t.Helper()
	release := func(l *dlock.Lock) {
		t.Helper()
		if err := l.Release(ctx); err != nil {
			t.Fatalf("Release: %v", err)
		}
	}
	pair = commandsPerOp(t, ctx, rdb, n, func(int) { release(take()) })
	l := take()
	// Each extension asks for 1ms more than the one before, so that none
	// finds its deadline already as far (which happens to one sent within
	// the same millisecond as the one before it): the count is the cost
	// of an extension that moves the deadline, whatever the machine's speed.
	extend = commandsPerOp(t, ctx, rdb, n, func(i int) {
		if err := l.Extend(ctx, 10*time.Second+time.Duration(i+2)*time.Millisecond); err != nil {
			t.Fatalf("Extend: %v", err)
		}
	})
	release(l)
	fenced = commandsPerOp(t, ctx, rdb, n, func(int) {
		l := take()
		if _, err := l.Fence(ctx); err != nil {
			t.Fatalf("Fence: %v", err)
		}
		release(l)
	})
	return pair, extend, fenced
}

// A hold of more permits than one ZMSCORE reads (500) costs no more
// commands than its writes need: a new hold's scores are read with one
// command, its first member's.
func TestSemaphoreHoldOfManyPermitsReadsANewHoldWithOneCommand(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := context.Background()
	c := newClient(t, rdb, dlock.WithAutoExtend(false))
	s, err := c.Semaphore("count-big", 1000)
	if err != nil {
		t.Fatal(err)
	}
	pair := commandsPerOp(t, ctx, rdb, 5, func(int) {
		l, err := s.AcquireN(ctx, 600)
		if err != nil {
			t.Fatalf("AcquireN(600): %v", err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("Release: %v", err)
		}
	})
	const budget = 18 // (the hold's writes: ZADD and ZREM, 500 members a command)
	if pair > budget {
		t.Errorf("an uncontended AcquireN(600) + Release costs %.2f commands; the budget is %v", pair, budget)
	}
}

// A script-free operation's commands, counted the same way: the WATCH,
// the reads, and the MULTI … EXEC (or the UNWATCH of one that writes
// nothing). An extension numbered (after one that shortened the lease)
// reads both keys with GET instead of their MGET.
func TestWithoutScriptsCommandsPerOperation(t *testing.T) {
	t.Parallel()
	s, direct := setup(t)
	rdb := noScriptUser(t, s, nil)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.WithoutScripts(), dlock.WithAutoExtend(false), dlock.LeaseTTL(10*time.Second))
	const n = 20
	take := func(name string) *dlock.Lock {
		l, err := c.TryAcquire(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	extend := func(l *dlock.Lock, base time.Duration) func(int) {
		return func(i int) {
			if err := l.Extend(ctx, base+time.Duration(i+2)*time.Millisecond); err != nil {
				t.Fatalf("Extend: %v", err)
			}
		}
	}
	pair := commandsPerOp(t, ctx, direct, n, func(int) { take("ns-count").Release(ctx) })
	fenced := commandsPerOp(t, ctx, direct, n, func(int) {
		l := take("ns-count")
		if _, err := l.Fence(ctx); err != nil {
			t.Fatalf("Fence: %v", err)
		}
		l.Release(ctx)
	})
	l := take("ns-count")
	unnumbered := commandsPerOp(t, ctx, direct, n, extend(l, 10*time.Second))
	if err := l.Extend(ctx, 5*time.Second); err != nil { // shorter: every extension after it is numbered
		t.Fatal(err)
	}
	numbered := commandsPerOp(t, ctx, direct, n, extend(l, 5*time.Second))
	refused := commandsPerOp(t, ctx, direct, n, func(int) {
		if _, err := c.TryAcquire(ctx, "ns-count"); err == nil {
			t.Fatal("TryAcquire of a held lock succeeded")
		}
	})
	inspect := commandsPerOp(t, ctx, direct, n, func(int) {
		if _, err := c.Inspect(ctx, "ns-count"); err != nil {
			t.Fatalf("Inspect: %v", err)
		}
	})
	for _, got := range []struct {
		what      string
		got, want float64
	}{
		{"acquire and release", pair, 16},
		{"fence", fenced - pair, 7},
		{"extension", unnumbered, 5},
		{"numbered extension", numbered, 9}, // (its reads include the lease's and the marker's PTTL: the marker outlives a shortened lease)
		{"refused acquire", refused, 5},
		{"inspect", inspect, 12},
	} {
		if got.got > got.want {
			t.Errorf("a script-free %s costs %.2f commands, want at most %v", got.what, got.got, got.want)
		}
	}
}
