package backend

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/driver"
	"github.com/dlockio/dlock/internal/script"
)

// NewNodeFrom returns the backend of one deployment reached through a
// driver (another Redis client than go-redis). The driver sends each
// command once and pipelines concurrent callers' commands itself, so there
// is no batcher; replica acknowledgement and the script-free mode need
// go-redis (the caller refuses them).
func NewNodeFrom(d driver.Conn, c Config) Node {
	d = guard{d}
	n := NewNode(nil, c)
	if c.Sharded {
		n.clock = nil // which master read the clock is unknown: readings of several would compare as one server's
	}
	n.rdb, n.d, n.retries = drv{d}, d, d.Info().Retries
	return n
}

// guard keeps a driver's calls to their contexts: some clients (rueidis)
// make a command that finds its connection being dialled wait for that
// dial, whatever its own context. From a call that failed without a reply
// until troubleFor passes without another, each call runs on a goroutine
// of its own and its caller leaves when its context ends (whether the
// command was sent is then unknown). Healthy, a call reads one atomic.
type guard struct{ driver.Conn }

// troubleFor is how long calls stay guarded after a failure: twice a
// usual dial timeout (5 s), so that a dial that a failure started ends
// within it.
const troubleFor = 10 * time.Second

// lastNoReply is when a driver call last failed without a reply (ns since
// epoch, on the monotonic clock; 0: never). It is one for the process:
// Clients that share a client share its dials.
var (
	lastNoReply atomic.Int64
	epoch       = time.Now()
)

// guarded runs f, which returns its result and whether it failed without a
// reply, as guard says.
func guarded[T any](ctx context.Context, f func() (T, bool)) (T, error) {
	run := func() T {
		r, noReply := f()
		if noReply {
			lastNoReply.Store(max(int64(time.Since(epoch)), 1))
		}
		return r
	}
	if t := lastNoReply.Load(); t == 0 || int64(time.Since(epoch))-t >= int64(troubleFor) {
		return run(), nil
	}
	done := make(chan T, 1)
	go func() { done <- run() }()
	select {
	case r := <-done:
		return r, nil
	case <-ctx.Done():
		var zero T
		return zero, fmt.Errorf("%w: %w", ErrLeftInFlight, ctx.Err())
	}
}

// noReply reports whether err says that a call got no reply.
func noReply(err error) bool {
	var rerr driver.Error
	return err != nil && !errors.As(err, &rerr) && !errors.Is(err, driver.ErrClosed)
}

func (g guard) Do(ctx context.Context, args ...any) (any, error) {
	r, err := guarded(ctx, func() (driver.Result, bool) {
		v, err := g.Conn.Do(ctx, args...)
		return driver.Result{Val: v, Err: err}, noReply(err)
	})
	if err != nil {
		return nil, err
	}
	return r.Val, r.Err
}

func (g guard) DoMulti(ctx context.Context, cmds ...[]any) []driver.Result {
	rs, err := guarded(ctx, func() ([]driver.Result, bool) {
		rs := g.Conn.DoMulti(ctx, cmds...)
		return rs, slices.ContainsFunc(rs, func(r driver.Result) bool { return noReply(r.Err) })
	})
	if err != nil {
		rs = make([]driver.Result, len(cmds))
		for i := range rs {
			rs[i].Err = err
		}
	}
	return rs
}

func (g guard) Masters(ctx context.Context) ([]driver.Conn, error) {
	type masters struct {
		ms  []driver.Conn
		err error
	}
	r, err := guarded(ctx, func() (masters, bool) {
		ms, err := g.Conn.Masters(ctx)
		return masters{ms, err}, noReply(err)
	})
	if err == nil {
		err = r.err
	}
	for i, m := range r.ms {
		r.ms[i] = guard{m}
	}
	return r.ms, err
}

// drv runs a Node's scripts and commands through a driver. It implements
// commander, so the scripts' calls and replies read as they do through
// go-redis.
type drv struct{ d driver.Conn }

func (c drv) Do(ctx context.Context, args ...any) *redis.Cmd {
	cmd := redis.NewCmd(ctx, args...)
	if err := ctx.Err(); err != nil {
		cmd.SetErr(NotSent(err))
		return cmd
	}
	v, err := c.d.Do(ctx, args...)
	setReply(cmd, v, err)
	return cmd
}

// setReply gives cmd a driver's reply: a nil reply reads as go-redis's
// redis.Nil, a closed driver as redis.ErrClosed.
func setReply(cmd *redis.Cmd, v any, err error) {
	switch {
	case errors.Is(err, driver.ErrClosed):
		cmd.SetErr(fmt.Errorf("%w: %w", redis.ErrClosed, err))
	case err != nil:
		cmd.SetErr(err)
	case v == nil:
		cmd.SetErr(redis.Nil)
	default:
		cmd.SetVal(v)
	}
}

// prepareFrom is prepare's load through a driver: the scripts of set go to
// every master (on a Cluster; the server otherwise), each master's in one
// write, and s records what all of them loaded. To a deployment that has
// not answered yet, first goes alone before the others (see
// serverCache.load).
func (n Node) prepareFrom(ctx context.Context, s *serverCache, set scriptSet, first *script.Script) error {
	masters, err := n.d.Masters(ctx)
	if err != nil {
		if neverSent(err) {
			return err
		}
		return nil
	}
	if bit := scriptBits[first]; !s.reached.Load() && set&bit != 0 {
		if err := loadOn(ctx, masters, bit, s); err != nil {
			return err
		}
		if set &^= bit; set == 0 {
			return nil
		}
	}
	return loadOn(ctx, masters, set, s)
}

// loadOn loads the scripts of set on each of masters at once, and records
// in s those that all of them loaded. It returns an error only if every
// load never left the client (see neverSent).
func loadOn(ctx context.Context, masters []driver.Conn, set scriptSet, s *serverCache) error {
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		all      = set
		unsent   error
		sentSome bool
	)
	for _, m := range masters {
		wg.Go(func() {
			rs := m.DoMulti(ctx, loadCmds(set)...)
			mu.Lock()
			defer mu.Unlock()
			all &= s.outcome(set, stringCmds(ctx, rs))
			for _, r := range rs {
				if neverSent(r.Err) {
					unsent = r.Err
				} else {
					sentSome = true
				}
			}
		})
	}
	wg.Wait()
	if len(masters) > 0 {
		s.loaded.Or(uint32(all))
	}
	if unsent != nil && !sentSome {
		return unsent
	}
	return nil
}

// loadCmds returns SCRIPT LOAD of each script of set, in loadable's order.
func loadCmds(set scriptSet) [][]any {
	cmds := make([][]any, 0, len(loadable))
	for i, sc := range loadable {
		if set&(1<<i) != 0 {
			cmds = append(cmds, []any{"script", "load", sc.Source()})
		}
	}
	return cmds
}

// stringCmds gives a driver's replies to SCRIPT LOAD the form that
// serverCache.record reads.
func stringCmds(ctx context.Context, rs []driver.Result) []*redis.StringCmd {
	loads := make([]*redis.StringCmd, len(rs))
	for i, r := range rs {
		loads[i] = redis.NewStringCmd(ctx)
		if r.Err != nil {
			loads[i].SetErr(r.Err)
		}
	}
	return loads
}

// rerunFrom is rerun through a driver: on one server, every script the
// Node had loaded there goes back with s's EVALSHA in one write; on a
// Cluster s goes with EVAL, and the next Prepare loads the scripts on
// every master again.
func (n Node) rerunFrom(ctx context.Context, s *script.Script, keys []string, args []any) *redis.Cmd {
	srv := &n.caches.single
	if n.d.Info().Cluster || srv.refused.Load() {
		srv.loaded.Store(0)
		return n.eval(ctx, s, keys, args)
	}
	set := scriptSet(srv.loaded.Swap(0)) | scriptBits[s]
	cmds := loadCmds(set)
	eval := evalArgs("evalsha", s.Hash(), keys, args)
	rs := n.d.DoMulti(ctx, append(cmds, eval)...)
	srv.record(set, stringCmds(ctx, rs[:len(rs)-1]))
	cmd := redis.NewCmd(ctx, eval...)
	last := rs[len(rs)-1]
	if setReply(cmd, last.Val, last.Err); noScript(cmd.Err()) {
		return n.eval(ctx, s, keys, args)
	}
	return cmd
}
