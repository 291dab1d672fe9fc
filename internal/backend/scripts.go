package backend

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/driver"
	"github.com/dlockio/dlock/internal/goredisdriver"
	"github.com/dlockio/dlock/internal/script"
)

// A timed call (an acquire, whose lease counts from when it was sent; an
// extension, which must land before the lease ends) has to be one round
// trip. A script run for the first time on a server is not: EVALSHA meets
// NOSCRIPT and the script goes again with EVAL, a second round trip that a
// slow link makes longer than a short lease. So a Node loads the scripts a
// lease needs into the server's cache before the first timed call of that
// kind of lease (Prepare, called by the Client before it starts counting
// the call's time), with SCRIPT LOAD, pipelined: one round trip, once per
// server and kind (two the first time: see serverCache.load). The script
// cache is the server's, shared by every connection,
// and emptied only when the server restarts empty, when a failover
// promotes a server that never had the scripts, or by SCRIPT FLUSH; a call
// that meets NOSCRIPT then loads back, in the same round trip as its own
// script, every script the Client had loaded there, so that the next
// timed calls are one round trip again. What a Node knows of a cache is a
// hint: every call still handles NOSCRIPT.

// loadable are the scripts a Node loads, each with its bit in a set
// (scriptSet): the engine's, and those each kind's file registers (loads).
// Guard's script runs on the resource's Redis, not the lock's.
var loadable = []*script.Script{script.Inspect, script.ForceRelease, script.RaiseFence, script.Fence, script.Uptime, script.Announce}

// loads returns the script of the file name.lua, registered in loadable:
// a package variable of the file of the kind that runs it names it once.
func loads(name string) *script.Script {
	s := script.Named(name)
	if slices.Contains(loadable, s) || len(loadable) == 64 {
		panic("backend: " + name + " registered twice, or a scriptSet has no bit left for it")
	}
	loadable = append(loadable, s)
	return s
}

// scriptSet is a set of scripts of loadable: bit i is loadable[i].
type scriptSet uint64

// setOf returns the set of ss; a script a Node does not load has no bit.
func setOf(ss ...*script.Script) scriptSet {
	var set scriptSet
	for _, s := range ss {
		if i := slices.Index(loadable, s); i >= 0 {
			set |= 1 << i
		}
	}
	return set
}

// need returns the scripts the lease c runs: its kind's, and those every
// lease of n runs (a quorum node's RaiseFence).
func (n Node) need(c *Claim) scriptSet {
	_, set := c.Kind.scripts()
	return set | n.extra
}

// serverCache is what a Node knows of one server's script cache, shared
// by the Node's copies: its one server's (a single server, or the master
// a Sentinel client follows), which on a Cluster keeps each master's.
type serverCache struct {
	loaded  atomic.Uint64                 // the scriptSet the server was seen to load
	reached atomic.Bool                   // the server answered a load
	refused atomic.Bool                   // the server refused SCRIPT LOAD (an ACL): not asked again
	loading atomic.Pointer[chan struct{}] // closed when the load in flight ends; nil if none
	masters sync.Map                      // on a Cluster: address -> *serverCache
}

// has reports whether the server has the scripts of set, or refuses to
// load them (calls then send what they miss with EVAL).
func (s *serverCache) has(set scriptSet) bool {
	return scriptSet(s.loaded.Load())&set == set || s.refused.Load()
}

// server returns what the Node knows of the script cache of the server
// that runs the scripts of key, and, on go-redis's Cluster, that server,
// the master of key's slot (nil otherwise: see loader).
func (n Node) server(ctx context.Context, key string) (*serverCache, *redis.Client, error) {
	cc, ok := n.uc.(*redis.ClusterClient)
	if !ok { // (one server; or a driver's deployment, one cache whose scripts every master loads)
		return n.caches, nil, nil
	}
	m, err := cc.MasterForKey(ctx, key)
	if err != nil {
		return nil, nil, err
	}
	addr := m.Options().Addr
	v, ok := n.caches.masters.Load(addr)
	if !ok {
		v, _ = n.caches.masters.LoadOrStore(addr, new(serverCache))
	}
	return v.(*serverCache), m, nil
}

// loader returns m, a Cluster's master (see server), as a Conn to load
// scripts on, on which go-redis may send a SCRIPT LOAD again (see
// goredisdriver.Loader); with m nil, the deployment (n.conn). It is made
// only where a load is sent: a Conn of m costs an allocation, which a
// Prepare that finds the scripts loaded does without.
func (n Node) loader(m *redis.Client) driver.Conn {
	if m == nil {
		return n.conn
	}
	return goredisdriver.Loader(m)
}

// Prepare loads the scripts of the lease c into the script cache of the
// server its calls go to, unless that server is known to have them (see
// Backend). With a load of the same server already in flight it sends
// none: it waits for that one (or for ctx, up to loadWait) and returns.
// It reports a load that never left the client (the connection could not
// be made): the timed call would fail alike, and need not try. Another failed load is
// not reported, nor one in flight that was of other scripts (another kind
// of lease): the call that follows runs its script anyway (rerun).
func (n Node) Prepare(ctx context.Context, c *Claim) error {
	need := n.need(c)
	s, m, err := n.server(ctx, c.Lock)
	if err != nil || s.has(need) {
		return nil // (an error: the call meets it too)
	}
	done := make(chan struct{})
	if !s.loading.CompareAndSwap(nil, &done) {
		if wait := s.loading.Load(); wait != nil { // (nil: it ended meanwhile)
			Await(ctx, []<-chan struct{}{*wait}, loadWait)
		}
		return nil
	}
	first, _ := c.Kind.scripts() // (the script the acquisition runs)
	return s.loadWithin(ctx, n.loader(m), need, first, done)
}

// loadWithin runs the load of Prepare, which set s.loading to done, and
// returns its error, or nil once ctx ends. The load runs on its own
// goroutine, so that the caller leaves at ctx's end even through a client
// that does not watch ctx while it waits for a reply (go-redis without
// ContextTimeoutEnabled, up to its read timeout, or for ever without
// one); the load then ends on its own, for the next call. (Apart from
// Prepare, whose every call would otherwise pay for the variables the
// goroutine captures.)
func (s *serverCache) loadWithin(ctx context.Context, conn driver.Conn, need scriptSet, first *script.Script, done chan struct{}) error {
	var err error // (read once done is closed)
	go func() {
		err = s.load(ctx, conn, need&^scriptSet(s.loaded.Load()), first)
		s.loading.Store(nil)
		close(done)
	}()
	if Await(ctx, []<-chan struct{}{done}, loadWait) {
		return err
	}
	return nil // (ctx ended: the call that follows sends nothing; or loadWait passed: it runs its script anyway, see rerun)
}

// loadWait bounds how long a call waits for a load of its scripts, its own
// or one in flight: a load whose reply never comes (a half-open connection
// on a client without a read timeout) does not hold every later call of
// the server until its context ends, or for ever. A call that goes on
// without the scripts still runs them (rerun); against a server that
// answers, a load takes far less.
const loadWait = 2 * time.Second

// prepared reports whether Prepare has nothing to do for the lease c.
func (n Node) prepared(ctx context.Context, c *Claim) bool {
	s, _, err := n.server(ctx, c.Lock)
	return err != nil || s.has(n.need(c))
}

// load sends SCRIPT LOAD of the scripts of set to the servers of conn
// (every master of a driver's Cluster; the one server otherwise), each
// server's in one write, and records those that all of them loaded. But to
// a deployment that has not answered this Node yet, first (the call's own
// script) goes alone before the others, which follow only if it loaded.
// So against a server that cannot be reached a load costs one command, as
// the call itself would, and no more connection attempts (go-redis tries a
// pipeline on two pools); and a load opens a connection of each of the
// pools go-redis keeps apart, one for single commands, one for pipelines,
// off the clock: a new connection's handshake (HELLO, CLIENT SETINFO)
// costs round trips of its own. It returns the error of a load that never
// left the client (see neverSent), else nil.
func (s *serverCache) load(ctx context.Context, conn driver.Conn, set scriptSet, first *script.Script) error {
	masters, err := conn.Masters(ctx)
	if err != nil {
		if neverSent(err) {
			return err
		}
		return nil
	}
	if bit := setOf(first); !s.reached.Load() && set&bit != 0 {
		err := s.loadOn(ctx, masters, bit)
		if err != nil || set == bit || scriptSet(s.loaded.Load())&bit == 0 {
			return err
		}
		set &^= bit
	}
	return s.loadOn(ctx, masters, set)
}

// loadOn loads the scripts of set on each of masters at once, and records
// those that all of them loaded. It returns an error only if every load
// never left the client (see neverSent).
func (s *serverCache) loadOn(ctx context.Context, masters []driver.Conn, set scriptSet) error {
	replies := make([][]driver.Result, len(masters)) // each master's
	var wg sync.WaitGroup
	for i, m := range masters {
		wg.Go(func() {
			if cmds := loadCmds(set); len(cmds) == 1 { // (alone: go-redis sends it on its pool for single commands)
				v, err := m.Do(ctx, cmds[0]...)
				replies[i] = []driver.Result{{Val: v, Err: err}}
			} else {
				replies[i] = m.DoMulti(ctx, cmds...)
			}
		})
	}
	wg.Wait()
	all, sentSome := set, false
	var unsent error
	for _, rs := range replies {
		all &= s.outcome(set, rs)
		for _, r := range rs {
			if neverSent(r.Err) {
				unsent = r.Err
			} else {
				sentSome = true
			}
		}
	}
	if len(masters) > 0 {
		s.loaded.Or(uint64(all))
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

// outcome reads the loads of the scripts of set (in loadable's order): it
// notes a server that answered, and a server that refuses SCRIPT LOAD (an
// error reply that is not a passing state, such as NOPERM), and returns
// the scripts loaded.
func (s *serverCache) outcome(set scriptSet, loads []driver.Result) scriptSet {
	var ok scriptSet
	for _, r := range loads {
		bit := set & -set // (the first script of set: loads are in loadable's order)
		set &^= bit
		switch err := r.Err; {
		case err == nil:
			ok |= bit
			s.reached.Store(true)
		case isRedisError(err):
			s.reached.Store(true)
			if !Transient(err) {
				s.refused.Store(true)
			}
		}
	}
	return ok
}

// isRedisError reports whether err is an error reply of the server.
func isRedisError(err error) bool {
	return errors.As(err, new(redis.Error)) && !closed(err)
}

// closed reports whether err says the client was closed: go-redis's, or a
// driver's.
func closed(err error) bool {
	return errors.Is(err, redis.ErrClosed) || errors.Is(err, driver.ErrClosed)
}

// MatchClosed is err, made to match driver.ErrClosed too if it says that a
// go-redis client was closed, as a driver's closed client's does.
func MatchClosed(err error) error {
	if errors.Is(err, redis.ErrClosed) && !errors.Is(err, driver.ErrClosed) {
		return Detailed(err.Error(), err, driver.ErrClosed)
	}
	return err
}

// noScript reports whether err is a NOSCRIPT reply: the server's script
// cache lacks the script.
func noScript(err error) bool {
	return err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT"))
}

// run runs the script s on keys with args, with EVALSHA, as
// redis.Script.Run does; if the server lacks it, see rerun. keys and args
// are copied into the command, so that they may point into the lease's
// Claim (see Claim) and stay on the caller's stack.
func (n Node) run(ctx context.Context, s *script.Script, keys []any, args ...any) (any, error) {
	cmd := evalsha(s, keys, args)
	if v, err := n.do(ctx, cmd...); !noScript(err) {
		return v, err
	}
	return n.rerun(ctx, s, cmd)
}

// evalsha returns the command that runs s on keys with args: "evalsha",
// digest, numkeys, keys…, argv….
func evalsha(s *script.Script, keys, args []any) []any {
	cmd := make([]any, 0, 3+len(keys)+len(args))
	cmd = append(cmd, "evalsha", s.Arg(), len(keys))
	return append(append(cmd, keys...), args...)
}

// asEval returns cmd, an EVALSHA of s, as the EVAL that sends s itself.
func asEval(s *script.Script, cmd []any) []any {
	return append([]any{"eval", s.Source()}, cmd[2:]...)
}

// firstKey returns the first key of cmd, an EVALSHA: the one whose server
// runs it.
func firstKey(cmd []any) string {
	key, _ := driver.String(cmd[3])
	return key
}

// rerun runs cmd, an EVALSHA of the script s, again after the server
// answered NOSCRIPT: its script cache was emptied. In one round trip it
// loads back every script the Node had loaded there, s among them, and
// runs cmd on the same connection; if that cannot be done (the server
// refuses SCRIPT LOAD, a Cluster's slot moved), it sends s with EVAL, as
// redis.Script.Run does. Either way the call costs the one round trip
// more that the NOSCRIPT did, and the next timed calls find their scripts.
// Through a driver, on a Cluster, s goes with EVAL, and the next Prepare
// loads the scripts on every master again.
func (n Node) rerun(ctx context.Context, s *script.Script, cmd []any) (any, error) {
	if n.uc == nil && n.conn.Info().Cluster { // (a driver's)
		n.caches.loaded.Store(0)
	} else if srv, m, err := n.server(ctx, firstKey(cmd)); err == nil && !srv.refused.Load() {
		r := srv.pipelined(ctx, n.loader(m), scriptSet(srv.loaded.Swap(0))|setOf(s), cmd)[0]
		if !noScript(r.Err) && !redis.HasErrorPrefix(r.Err, "MOVED ") && !redis.HasErrorPrefix(r.Err, "ASK ") { // (a Cluster's slot moved)
			return r.Val, r.Err
		}
	}
	return n.do(ctx, asEval(s, cmd)...)
}

// pipelined sends on conn, in one round trip, SCRIPT LOAD of the scripts
// of set, then cmds (a script call, and the waits for its
// acknowledgements); it records the loads, and returns cmds' replies. The
// script call goes once, and the pipeline with it (see Grant.Once).
func (s *serverCache) pipelined(ctx context.Context, conn driver.Conn, set scriptSet, cmds ...[]any) []driver.Result {
	loads := loadCmds(set)
	rs := conn.DoMulti(ctx, append(loads, cmds...)...)
	s.loaded.Or(uint64(s.outcome(set, rs[:len(loads)])))
	return rs[len(loads):]
}
