package main

import (
	"context"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidislock"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/driver"
	"github.com/dlockio/dlock/extra/dlockrueidis"
	"github.com/dlockio/dlock/internal/testopt"
)

// ttl is the lease every library is asked for (the leftovers pass asks for
// a shorter one, so that its wait for the revocation window is short).
const ttl = 10 * time.Second

// handle is one goroutine's lock on one name.
type handle interface {
	lock(ctx context.Context) error
	unlock(ctx context.Context) error
}

// library makes handles against the Redis servers at addrs (one, or a quorum).
type library struct {
	name   string
	quorum bool // supports several independent masters
	w1only bool // a variant that only matters uncontended
	open   func(addrs []string, lease time.Duration) (newHandle func(name string) handle, closeFn func(), err error)
}

func goRedis(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, PoolSize: 128})
}

var libraries = []library{
	{name: "dlock", quorum: true, open: openDlock()},
	{name: "dlock unfair", open: openDlock(dlock.WithUnfair(nil))},
	{name: "dlock unbatched", w1only: true, open: openDlock(testopt.Pipelining(false))}, // the measure of the batcher, always on in the API
	{name: "redsync", quorum: true, open: openRedsync},
	{name: "bsm/redislock", open: openBSM},
	{name: "rueidislock", open: openRueidis},
	{name: "dlock on rueidis", quorum: true, open: openDlockRueidis},
}

type dlockHandle struct {
	c    *dlock.Client
	name string
	l    *dlock.Lock
}

func (h *dlockHandle) lock(ctx context.Context) (err error) {
	h.l, err = h.c.Acquire(ctx, h.name)
	return err
}
func (h *dlockHandle) unlock(ctx context.Context) error { return h.l.Release(ctx) }

// batches reports the Client's pipelined calls and the writes that carried them.
func (h *dlockHandle) batches() (calls, writes uint64) {
	s := h.c.Stats()
	return s.Calls, s.Writes
}

// batched is a handle whose library counts its pipelined batches (dlock).
type batched interface{ batches() (calls, writes uint64) }

func openDlock(opts ...dlock.Option) func([]string, time.Duration) (func(string) handle, func(), error) {
	return func(addrs []string, lease time.Duration) (func(string) handle, func(), error) {
		opts := append([]dlock.Option{dlock.LeaseTTL(lease)}, opts...)
		var nodes []redis.UniversalClient
		for _, a := range addrs {
			nodes = append(nodes, goRedis(a))
		}
		var (
			c   *dlock.Client
			err error
		)
		if len(nodes) > 1 {
			c, err = dlock.NewRedlock(nodes, 0, opts...)
		} else {
			c, err = dlock.New(nodes[0], opts...)
		}
		if err != nil {
			for _, n := range nodes {
				n.Close()
			}
			return nil, nil, err
		}
		return func(name string) handle { return &dlockHandle{c: c, name: name} }, func() {
			for _, n := range nodes {
				n.Close()
			}
		}, nil
	}
}

type redsyncHandle struct{ m *redsync.Mutex }

func (h *redsyncHandle) lock(ctx context.Context) error { return h.m.LockContext(ctx) }
func (h *redsyncHandle) unlock(ctx context.Context) error {
	_, err := h.m.UnlockContext(ctx)
	return err
}

func openRedsync(addrs []string, lease time.Duration) (func(string) handle, func(), error) {
	var pools []redsyncredis.Pool
	var clients []*redis.Client
	for _, a := range addrs {
		c := goRedis(a)
		clients = append(clients, c)
		pools = append(pools, goredis.NewPool(c))
	}
	rs := redsync.New(pools...)
	return func(name string) handle {
			// Defaults, but with retries until the context ends, as a waiting lock would.
			return &redsyncHandle{m: rs.NewMutex(name, redsync.WithExpiry(lease), redsync.WithTries(1<<30))}
		}, func() {
			for _, c := range clients {
				c.Close()
			}
		}, nil
}

type bsmHandle struct {
	c     *redislock.Client
	name  string
	lease time.Duration
	l     *redislock.Lock
}

func (h *bsmHandle) lock(ctx context.Context) (err error) {
	h.l, err = h.c.Obtain(ctx, h.name, h.lease, &redislock.Options{RetryStrategy: redislock.ExponentialBackoff(time.Millisecond, 64*time.Millisecond)})
	return err
}
func (h *bsmHandle) unlock(ctx context.Context) error { return h.l.Release(ctx) }

func openBSM(addrs []string, lease time.Duration) (func(string) handle, func(), error) {
	rdb := goRedis(addrs[0])
	c := redislock.New(rdb)
	return func(name string) handle { return &bsmHandle{c: c, name: name, lease: lease} }, func() { rdb.Close() }, nil
}

type rueidisHandle struct {
	l      rueidislock.Locker
	name   string
	cancel context.CancelFunc
}

// rueidisAttempt bounds each of rueidislock's waits for a lock, after which
// the handle asks again. Under load a call of its acquire script can outlive
// TryNextAfter (20 ms): the locker then undoes the script that ran, and with
// NoLoopTracking no invalidation of its own key wakes the waiter again, so a
// wait with nothing else to wake it would last until the cell ends. 300 ms
// is many times a loaded machine's round trip (an attempt that would succeed
// is rarely cut), and small against a cell, so a stranded wait costs little.
// A contended wait (W2) that is cut asks again at the cost of one script:
// rueidislock keeps no queue, so it loses no place.
const rueidisAttempt = 300 * time.Millisecond

func (h *rueidisHandle) lock(ctx context.Context) error {
	for {
		// rueidislock holds the lock only while the context it was given
		// lives, and the harness cancels the context of a lock call once
		// it returns: each attempt holds on a context of its own that
		// outlives the call, cut short if ctx ends or the bound passes
		// while it still waits.
		hold, stopHold := context.WithCancel(context.WithoutCancel(ctx))
		stopWait := context.AfterFunc(ctx, stopHold)
		bound := time.AfterFunc(rueidisAttempt, stopHold)
		held, cancel, err := h.l.WithContext(hold, h.name)
		waiting := stopWait()
		bounded := bound.Stop()
		if err == nil && waiting && bounded && held.Err() == nil {
			h.cancel = func() { cancel(); stopHold() }
			return nil
		}
		// Not held, or cut short as the lock came (held.Err() is then
		// set, or about to be): give it back before asking again, so
		// that it is never counted as held.
		if err == nil {
			cancel()
		}
		stopHold()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil && bounded {
			return err // not the bound's doing (the locker closed)
		}
	}
}
func (h *rueidisHandle) unlock(context.Context) error { h.cancel(); return nil }

// openRueidis shares one Locker among all handles, the normal use,
// configured as rueidislock's README tells a user of one Redis server
// 7.0.5 or later (KeyMajority 1, NoLoopTracking) and otherwise left at its
// defaults, as dlock on rueidis (openDlockRueidis) is left at rueidis's:
// both hold for the same lease, and neither gets rueidis's MaxFlushDelay,
// which would cut both libraries' writes alike.
func openRueidis(addrs []string, lease time.Duration) (func(string) handle, func(), error) {
	l, err := rueidislock.NewLocker(rueidislock.LockerOption{
		ClientOption:   rueidis.ClientOption{InitAddress: addrs[:1]},
		KeyMajority:    1,
		KeyValidity:    lease,
		NoLoopTracking: true,
	})
	if err != nil {
		return nil, nil, err
	}
	return func(name string) handle { return &rueidisHandle{l: l, name: name} }, l.Close, nil
}

// openDlockRueidis is dlock through its rueidis driver (extra/dlockrueidis),
// on one rueidis client per node.
func openDlockRueidis(addrs []string, lease time.Duration) (func(string) handle, func(), error) {
	var (
		rcs   []rueidis.Client
		conns []driver.Conn
	)
	closeAll := func() {
		for _, rc := range rcs {
			rc.Close()
		}
	}
	for _, a := range addrs {
		rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{a}})
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		rcs = append(rcs, rc)
		conns = append(conns, dlockrueidis.Conn(rc))
	}
	var (
		c   *dlock.Client
		err error
	)
	if len(conns) > 1 {
		c, err = dlock.NewRedlockFrom(conns, 0, dlock.LeaseTTL(lease))
	} else {
		c, err = dlock.NewFrom(conns[0], dlock.LeaseTTL(lease))
	}
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	return func(name string) handle { return &dlockHandle{c: c, name: name} }, closeAll, nil
}
