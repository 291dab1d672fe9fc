// Package dlockredigo keeps dlock's locks with a redigo pool: [Conn] adapts
// a *redis.Pool (connections to one server) to package driver, and [New]
// builds a dlock Client on it. redigo reaches neither a Cluster nor
// Sentinels by itself: a pool whose Dial asks Sentinels for the master
// works, as one server.
//
// Every command is sent once, on a connection of the pool, with the
// caller's context: redigo never sends a command again. A connection
// whose context ended during a command is closed, not returned to the
// pool.
// Give the pool a MaxIdle: with none, each command dials a connection.
//
// A pub/sub connection is dialled with the pool's DialContext (or Dial),
// outside the pool, and closed when dlock is done with it. A goroutine of
// its own reads it, so that a Receive whose context ends leaves the
// connection usable (redigo's ReceiveContext would close it).
package dlockredigo

import (
	"context"
	"errors"
	"fmt"

	"github.com/gomodule/redigo/redis"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/driver"
)

// Conn returns pool as a driver.Conn (nil for a nil pool, which
// dlock.NewFrom refuses). It never closes pool.
func Conn(pool *redis.Pool) driver.Conn {
	if pool == nil {
		return nil
	}
	return conn{pool}
}

// New returns a dlock Client on pool: dlock.NewFrom(Conn(pool), opts...).
// Close the Client before the pool.
func New(pool *redis.Pool, opts ...dlock.Option) (*dlock.Client, error) {
	return dlock.NewFrom(Conn(pool), opts...)
}

type conn struct{ pool *redis.Pool }

func (c conn) Do(ctx context.Context, args ...any) (any, error) {
	name, rest, err := command(args)
	if err != nil {
		return nil, err
	}
	rc, err := c.get(ctx)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return reply(redis.DoContext(rc, ctx, name, rest...))
}

// DoMulti sends cmds on one connection of the pool in one write, then
// reads their replies. A command that cannot be sent (see command) gets
// its error and is left out.
func (c conn) DoMulti(ctx context.Context, cmds ...[]any) []driver.Result {
	out := make([]driver.Result, len(cmds))
	rc, err := c.get(ctx)
	if err != nil {
		for i := range out {
			out[i].Err = err
		}
		return out
	}
	defer rc.Close()
	var sent []int
	for i, args := range cmds {
		name, rest, err := command(args)
		if err == nil {
			err = rc.Send(name, rest...)
		}
		if err != nil {
			out[i].Err = err
			continue
		}
		sent = append(sent, i)
	}
	err = rc.Flush()
	for _, i := range sent {
		if err != nil { // the write failed: no reply comes
			out[i].Err = err
			continue
		}
		out[i].Val, out[i].Err = reply(redis.ReceiveContext(rc, ctx))
	}
	return out
}

func (c conn) PubSub(ctx context.Context, channel string) (driver.PubSub, error) {
	if channel != "" {
		return nil, errors.New("dlockredigo: no sharded pub/sub: redigo does not reach a Cluster")
	}
	return dial(ctx, c.pool)
}

// Masters returns c itself: a pool is one server.
func (c conn) Masters(context.Context) ([]driver.Conn, error) {
	return []driver.Conn{c}, nil
}

// Info reports a single server.
func (c conn) Info() driver.Info { return driver.Info{} }

// get returns a connection of the pool; ctx bounds a wait for one (a pool
// with Wait) and its dial.
func (c conn) get(ctx context.Context) (redis.Conn, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	rc, err := c.pool.GetContext(ctx)
	if err != nil {
		if err.Error() == "redigo: get on closed pool" { // (redigo exports no value for it)
			return nil, fmt.Errorf("%w: %w", driver.ErrClosed, err)
		}
		return nil, err
	}
	return rc, nil
}

// command splits args into redigo's command name and arguments, each in
// its wire form (redigo would print a *string's address).
func command(args []any) (string, []any, error) {
	if len(args) == 0 {
		return "", nil, fmt.Errorf("%w: dlockredigo: empty command", driver.ErrNotSent)
	}
	strs := make([]any, len(args))
	for i, a := range args {
		s, ok := driver.String(a)
		if !ok {
			return "", nil, fmt.Errorf("%w: dlockredigo: argument %d of type %T cannot be sent", driver.ErrNotSent, i, a)
		}
		strs[i] = s
	}
	return strs[0].(string), strs[1:], nil
}

// reply converts redigo's reply to the driver's forms.
func reply(v any, err error) (any, error) {
	var rerr redis.Error
	if errors.As(err, &rerr) {
		return nil, driver.Error(rerr)
	}
	if err != nil {
		return nil, err
	}
	return value(v)
}

// value converts a reply: a bulk or status reply becomes a string, an
// error inside an array the error of the whole.
func value(v any) (any, error) {
	switch v := v.(type) {
	case nil, int64, string:
		return v, nil
	case []byte:
		return string(v), nil
	case redis.Error:
		return nil, driver.Error(v)
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			var err error
			if out[i], err = value(e); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("dlockredigo: unexpected reply of type %T", v)
}
