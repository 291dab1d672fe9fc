// Package goredisdriver implements package driver with a go-redis client:
// the pub/sub of every Client made with go-redis, and, in tests, the
// driver road (dlock.NewFrom) run on go-redis beside the other clients'.
package goredisdriver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/driver"
)

// Conn returns rdb as a driver.Conn. It never closes rdb.
func Conn(rdb redis.UniversalClient) driver.Conn { return conn{rdb: rdb} }

// Loader is Conn as the backend's own road through go-redis: go-redis may
// send a SCRIPT LOAD or a SCAN again after a failure, as it does its own
// commands (a load is idempotent, a SCAN a read; a script call still goes
// once), and errors are go-redis's, as it returns them.
func Loader(rdb redis.UniversalClient) driver.Conn { return conn{rdb: rdb, loads: true} }

type conn struct {
	rdb   redis.UniversalClient
	loads bool // (see Loader)
}

// sent is cmd as go-redis is to send it: once, unless a Loader's SCRIPT
// LOAD or SCAN.
func (c conn) sent(cmd *redis.Cmd) redis.Cmder {
	if a := cmd.Args(); c.loads && (cmd.Name() == "scan" || len(a) > 1 && cmd.Name() == "script" && a[1] == "load") {
		return cmd
	}
	return Once{Cmder: cmd}
}

// Unanswered gives cmd err, the error of the pipeline that carried it, if it has
// neither a reply nor an error: a hook failed the pipeline before it was
// sent, and go-redis gives that error to none of its commands.
func Unanswered(cmd *redis.Cmd, err error) {
	if cmd.Val() == nil && cmd.Err() == nil {
		cmd.SetErr(err)
	}
}

// Once is a command that go-redis sends once, never again after a failure.
type Once struct{ redis.Cmder }

func (Once) NoRetry() bool { return true }

func (c conn) Do(ctx context.Context, args ...any) (any, error) {
	if err := refused(args); err != nil {
		return nil, err
	}
	cmd := redis.NewCmd(ctx, args...)
	c.rdb.Process(ctx, c.sent(cmd))
	return c.reply(cmd)
}

// reply converts a command's outcome to the driver's form (a Loader's:
// go-redis's own).
func (c conn) reply(cmd *redis.Cmd) (any, error) {
	v, err := cmd.Result()
	switch {
	case c.loads:
	case errors.Is(err, redis.Nil):
		return nil, nil
	case errors.Is(err, redis.ErrClosed):
		return nil, fmt.Errorf("%w: %w", driver.ErrClosed, err)
	case errors.As(err, new(redis.Error)): // (an error reply of the server)
		return nil, driver.Error(err.Error())
	}
	return v, err
}

// refused is the error of a command with an argument of a type that the
// driver does not send (driver.String's are sent): it is refused unsent, as
// go-redis refuses a type it cannot write, but marked so (driver.ErrNotSent).
func refused(args []any) error {
	for i, a := range args {
		switch a.(type) {
		case string, *string, []byte, int, int64: // (no wire form made: driver.String would copy)
		default:
			return fmt.Errorf("%w: argument %d of type %T cannot be sent", driver.ErrNotSent, i, a)
		}
	}
	return nil
}

// DoMulti refuses every command, unsent, if one of them is refused, as
// go-redis fails a pipeline whose write failed (a Pipeline sends nothing
// before Exec).
func (c conn) DoMulti(ctx context.Context, cmds ...[]any) []driver.Result {
	rs := make([]*redis.Cmd, len(cmds))
	p := c.rdb.Pipeline()
	for i, args := range cmds {
		if err := refused(args); err != nil {
			return slices.Repeat([]driver.Result{{Err: err}}, len(cmds))
		}
		rs[i] = redis.NewCmd(ctx, args...)
		p.Process(ctx, c.sent(rs[i]))
	}
	_, err := p.Exec(ctx)
	out := make([]driver.Result, len(cmds))
	for i, cmd := range rs {
		Unanswered(cmd, err) // (nothing if err is nil)
		out[i].Val, out[i].Err = c.reply(cmd)
	}
	return out
}

func (c conn) Masters(ctx context.Context) ([]driver.Conn, error) {
	cc, ok := c.rdb.(*redis.ClusterClient)
	if !ok {
		return []driver.Conn{c}, nil
	}
	var mu sync.Mutex // (ForEachMaster calls its function on a goroutine per master)
	var out []driver.Conn
	err := cc.ForEachMaster(ctx, func(_ context.Context, m *redis.Client) error {
		mu.Lock()
		out = append(out, conn{m, c.loads})
		mu.Unlock()
		return nil
	})
	return out, err
}

func (c conn) Info() driver.Info {
	_, cluster := c.rdb.(*redis.ClusterClient)
	retries, _ := Limits(c.rdb)
	return driver.Info{Cluster: cluster, NoRetry: !retries}
}

// Limits reports whether rdb is configured to send a command again after a
// failure (MaxRetries, or a Cluster client's MaxRedirects, under which it
// sends again by default; a client of a type whose options cannot be read
// is taken to retry), and how long it waits for a reply before it gives up
// on the connection (0: no limit, or a client whose timeout it does not
// know).
func Limits(rdb redis.UniversalClient) (retries bool, readTimeout time.Duration) {
	switch c := rdb.(type) {
	case *redis.Client:
		return c.Options().MaxRetries > 0, max(c.Options().ReadTimeout, 0)
	case *redis.ClusterClient:
		return c.Options().MaxRetries > 0 || c.Options().MaxRedirects > 0, max(c.Options().ReadTimeout, 0)
	case *redis.Ring:
		return c.Options().MaxRetries > 0, 0
	}
	return true, 0
}

func (c conn) PubSub(ctx context.Context, channel string) (driver.PubSub, error) {
	// (go-redis connects on the first Subscribe, routed by its channels:
	// a PubSub it makes with no channel is the same for both forms)
	ps := c.rdb.Subscribe(ctx)
	if channel != "" {
		return &pubsub{ps: ps, sub: ps.SSubscribe, unsub: ps.SUnsubscribe}, nil
	}
	return &pubsub{ps: ps, sub: ps.Subscribe, unsub: ps.Unsubscribe}, nil
}

// pubsub ends at its connection's first failure, as package driver asks:
// go-redis's PubSub would connect again by itself.
type pubsub struct {
	ps         *redis.PubSub
	sub, unsub func(context.Context, ...string) error // (S)SUBSCRIBE, (S)UNSUBSCRIBE: sharded, the S forms
	closed     atomic.Bool                            // Close was called
}

// check returns err; an error closes go-redis's PubSub, after which every
// method fails: with ErrClosed if the PubSub was closed (or its client),
// before or while the method ran, or for a method after the failure.
func (p *pubsub) check(err error) error {
	if err != nil {
		p.ps.Close()
		if p.closed.Load() || errors.Is(err, redis.ErrClosed) {
			return driver.ErrClosed
		}
	}
	return err
}

func (p *pubsub) Subscribe(ctx context.Context, channels ...string) error {
	return p.check(p.sub(ctx, channels...))
}

func (p *pubsub) Unsubscribe(ctx context.Context, channels ...string) error {
	return p.check(p.unsub(ctx, channels...))
}

func (p *pubsub) Ping(ctx context.Context) error {
	return p.check(p.ps.Ping(ctx))
}

func (p *pubsub) Close() error {
	p.closed.Store(true)
	p.ps.Close()
	return nil
}

// Receive reads the connection directly, rather than through go-redis's
// Channel, to save a goroutine hop on every message. It waits until ctx's
// deadline (go-redis does not watch ctx while it reads).
func (p *pubsub) Receive(ctx context.Context) (driver.Message, error) {
	var timeout time.Duration // (0: none)
	d, timed := ctx.Deadline()
	if timed {
		timeout = max(time.Until(d), time.Nanosecond) // (past: the read times out at once)
	}
	m, err := p.ps.ReceiveTimeout(ctx, timeout)
	if nerr, ok := errors.AsType[net.Error](err); ok && nerr.Timeout() && timed { // (the deadline set from ctx, or a reconnect's)
		if !time.Now().Before(d) {
			<-ctx.Done() // (its timer fires with the read's: its caller may ask it why)
		}
		return driver.Message{}, fmt.Errorf("goredisdriver: receive: %w", context.DeadlineExceeded)
	}
	if err = p.check(err); err != nil {
		return driver.Message{}, err
	}
	switch m := m.(type) {
	case *redis.Subscription:
		return driver.Message{Kind: m.Kind, Channel: m.Channel}, nil
	case *redis.Message:
		return driver.Message{Kind: "message", Channel: m.Channel, Payload: m.Payload}, nil
	}
	return driver.Message{Kind: "pong"}, nil // (a PING's reply)
}
