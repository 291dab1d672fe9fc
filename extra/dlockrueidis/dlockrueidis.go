// Package dlockrueidis keeps dlock's locks with a rueidis client: [Conn]
// adapts a rueidis.Client (a server, a Sentinel-managed master or a
// Cluster) to package driver, and [New] builds a dlock Client on it.
//
// Every command is sent once: rueidis retries only commands marked
// read-only, and none that dlock sends is. A client built with
// ConnLifetime may send a command again when its connection expires while
// the command is in flight: leave ConnLifetime unset (nothing can check
// it).
//
// rueidis makes a command that finds its connection being dialled wait for
// that dial, whatever its own context: dlock keeps its calls to their
// contexts after a failure (see package driver).
package dlockrueidis

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/rueidis"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/driver"
)

// Conn returns c as a driver.Conn (nil for a nil c, which dlock.NewFrom
// refuses). It never closes c.
func Conn(c rueidis.Client) driver.Conn {
	if c == nil {
		return nil
	}
	return conn{c}
}

type conn struct{ c rueidis.Client }

func (c conn) Do(ctx context.Context, args ...any) (any, error) {
	cmd, err := build(c.c.B(), args, c.cluster())
	if err != nil {
		return nil, err
	}
	return reply(c.c.Do(ctx, cmd))
}

func (c conn) DoMulti(ctx context.Context, cmds ...[]any) []driver.Result {
	out := make([]driver.Result, len(cmds))
	built := make(rueidis.Commands, 0, len(cmds))
	idx := make([]int, 0, len(cmds))
	for i, args := range cmds {
		cmd, err := build(c.c.B(), args, c.cluster())
		if err != nil {
			out[i].Err = err
			continue
		}
		built = append(built, cmd)
		idx = append(idx, i)
	}
	if len(built) == 0 {
		return out
	}
	rs := c.c.DoMulti(ctx, built...)
	for j := range built {
		out[idx[j]].Val, out[idx[j]].Err = reply(rs[j])
	}
	return out
}

func (c conn) Info() driver.Info { return driver.Info{Cluster: c.cluster()} }

func (c conn) cluster() bool { return c.c.Mode() == rueidis.ClientModeCluster }

// Masters returns, for a Cluster, a Conn for each master of the slot map
// that a node reports (CLUSTER SLOTS).
func (c conn) Masters(ctx context.Context) ([]driver.Conn, error) {
	if !c.cluster() {
		return []driver.Conn{c}, nil
	}
	slots, err := c.c.Do(ctx, c.c.B().Arbitrary("CLUSTER", "SLOTS").Build()).ToArray()
	if err != nil {
		return nil, convertErr(err)
	}
	nodes := c.c.Nodes()
	var out []driver.Conn
	seen := map[string]bool{}
	for _, s := range slots {
		v, err := s.ToArray()
		if err != nil || len(v) < 3 {
			return nil, fmt.Errorf("dlockrueidis: unexpected CLUSTER SLOTS entry %v", s)
		}
		addr, err := endpoint(v[2])
		if err != nil {
			return nil, err
		}
		if seen[addr] {
			continue
		}
		seen[addr] = true
		n, ok := nodes[addr]
		if !ok {
			return nil, fmt.Errorf("dlockrueidis: master %s is not among the client's nodes", addr)
		}
		out = append(out, conn{n})
	}
	return out, nil
}

// endpoint returns the host:port of a CLUSTER SLOTS node entry.
func endpoint(m rueidis.RedisMessage) (string, error) {
	v, err := m.ToArray()
	if err != nil || len(v) < 2 {
		return "", fmt.Errorf("dlockrueidis: unexpected CLUSTER SLOTS node %v", m)
	}
	host, herr := v[0].ToString()
	port, perr := v[1].AsInt64()
	if herr != nil || perr != nil {
		return "", fmt.Errorf("dlockrueidis: unexpected CLUSTER SLOTS node %v", m)
	}
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	return fmt.Sprintf("%s:%d", host, port), nil
}

// build makes a command of args. Its first key (driver.Keys) is marked on
// a Cluster only, for routing: elsewhere rueidis would spread the commands
// with keys over its connections at random, where those without share the
// first one's writes, fuller ones that Redis reads fewer times.
func build(b rueidis.Builder, args []any, cluster bool) (rueidis.Completed, error) {
	if len(args) == 0 {
		return rueidis.Completed{}, fmt.Errorf("%w: dlockrueidis: empty command", driver.ErrNotSent)
	}
	first, keys := 1, 0
	if cluster {
		if name, _ := driver.String(args[0]); strings.HasPrefix(strings.ToLower(name), "eval") {
			first = 3 // (EVAL, EVALSHA and their _RO forms: the keys follow the script and their count)
		}
		// Only the first key is marked: it routes the command, and Redis
		// refuses keys in several slots (CROSSSLOT), where rueidis's
		// builder would panic.
		keys = min(len(driver.Keys(args)), 1)
	}
	cmd := b.Arbitrary()
	for i, a := range args {
		v, ok := driver.String(a)
		if i == 0 && v == "evalsha" {
			v = "EVALSHA" // (upper-casing the name, as Build and the check below do, copies it unless it is already)
		}
		switch {
		case !ok:
			return rueidis.Completed{}, fmt.Errorf("%w: dlockrueidis: argument %d of %v: unsupported type %T", driver.ErrNotSent, i, args[0], a)
		case i == 0 && (v == "" || strings.HasSuffix(strings.ToUpper(v), "SUBSCRIBE")): // (as Build reads it, "ſ" as "S": it would panic)
			return rueidis.Completed{}, fmt.Errorf("%w: dlockrueidis: command %q is not supported by Do", driver.ErrNotSent, v)
		}
		if i >= first && i < first+keys {
			cmd = cmd.Keys(v)
		} else {
			cmd = cmd.Args(v)
		}
	}
	return cmd.Build(), nil
}

// reply converts a result to driver's form.
func reply(r rueidis.RedisResult) (any, error) {
	if err := r.NonRedisError(); err != nil {
		return nil, convertErr(err)
	}
	m, err := r.ToMessage()
	if err != nil && !rueidis.IsRedisNil(err) {
		return nil, convertErr(err)
	}
	return value(&m)
}

// value converts a reply as a RESP2 client sees it: a double or a big
// number as a string, a boolean as 1 or nil, a map as a flat array.
func value(m *rueidis.RedisMessage) (any, error) {
	if err := m.Error(); err != nil {
		if rueidis.IsRedisNil(err) {
			return nil, nil
		}
		return nil, convertErr(err)
	}
	switch {
	case m.IsInt64():
		return m.AsInt64()
	case m.IsBool():
		if b, _ := m.AsBool(); b {
			return int64(1), nil
		}
		return nil, nil
	case m.IsArray():
		vs, err := m.ToArray()
		if err != nil {
			return nil, err
		}
		return values(vs)
	case m.IsMap():
		kv, err := m.AsMap()
		if err != nil {
			return nil, err
		}
		var out []any
		for _, k := range slices.Sorted(maps.Keys(kv)) {
			v := kv[k]
			e, err := value(&v)
			if err != nil {
				return nil, err
			}
			out = append(out, k, e)
		}
		return out, nil
	case m.IsFloat64():
		f, err := m.AsFloat64()
		return strconv.FormatFloat(f, 'f', -1, 64), err
	}
	return m.ToAny()
}

// values converts the elements of an array; an element that is an error
// reply becomes a driver.Error in its place.
func values(vs []rueidis.RedisMessage) ([]any, error) {
	out := make([]any, len(vs))
	for i := range vs {
		v, err := value(&vs[i])
		if err != nil {
			var de driver.Error
			if !errors.As(err, &de) {
				return nil, err
			}
			v = de
		}
		out[i] = v
	}
	return out, nil
}

// convertErr converts an error of rueidis to driver's form: a server's
// error reply to a driver.Error (with the "ERR " prefix that rueidis
// strips put back), a closed client to one that wraps driver.ErrClosed.
func convertErr(err error) error {
	if rerr, ok := rueidis.IsRedisErr(err); ok {
		return driver.Error(restoreCode(rerr.Error()))
	}
	if errors.Is(err, rueidis.ErrClosing) {
		return fmt.Errorf("%w: %w", driver.ErrClosed, err)
	}
	return err
}

// restoreCode returns a server's error message as it was sent: rueidis
// removes a leading "ERR ", so a message that does not start with an
// upper-case error code had it.
func restoreCode(msg string) string {
	code, _, _ := strings.Cut(msg, " ")
	if len(code) < 2 {
		return "ERR " + msg
	}
	for _, r := range code {
		if !('A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '_' || r == '-') {
			return "ERR " + msg
		}
	}
	return msg
}

// New returns a dlock Client that keeps its locks through c (see
// dlock.NewFrom). Closing the Client does not close c.
func New(c rueidis.Client, opts ...dlock.Option) (*dlock.Client, error) {
	return dlock.NewFrom(Conn(c), opts...)
}
