package torture

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/driver"
	"github.com/dlockio/dlock/internal/goredisdriver"
	"github.com/dlockio/dlock/internal/testopt"
)

// Modes of a round: how every Client of the round takes its locks.
const (
	ModePlain     = "plain"     // one node, WithUnfair
	ModeFair      = "fair"      // one node, fair FIFO waiting (the default)
	ModeReentrant = "reentrant" // one node, WithReentrant(true), nested holds
	ModeQuorum3   = "quorum3"   // NewRedlock over 3 nodes
	ModeQuorum5   = "quorum5"   // NewRedlock over 5 nodes
	ModeSemaphore = "semaphore" // one node, every name a semaphore of N permits, N drawn per round from SemPermits
	ModeElection  = "election"  // one node, every name an election: leaderships are the leases
	ModeNoScripts = "noscripts" // one node, WithoutScripts(): transactions instead of scripts, unfair
	ModeRW        = "rw"        // one node, every name a read-write lock, held for reads or writes
	ModeMulti     = "multi"     // one node, fair; half the acquisitions take several names at once (AcquireAll, TryAcquireAll, DoAll)
)

// Modes lists every mode, in the order rounds cycle through them.
var Modes = []string{ModePlain, ModeFair, ModeReentrant, ModeQuorum3, ModeQuorum5, ModeSemaphore, ModeElection, ModeNoScripts, ModeRW, ModeMulti}

// SemPermits are the sizes a semaphore round draws its N from (newPlan):
// every semaphore of the round has N permits, the sizer keeps its size at
// N or N+1 (size.go), and a hold of several permits takes 2 to N. With
// N = 2 such a hold takes every permit; with N = 3 a hold of 2 leaves one
// free, to be taken beside it, or held back from a waiter for 1 queued
// behind a waiter for 2 or 3 (check (d)'s queue rule).
var SemPermits = [...]int{2, 3}

// Fair reports whether a mode's Clients wait fairly (the default; see WithUnfair).
func Fair(mode string) bool { return mode == ModeFair || mode == ModeMulti }

// WorkerConfig is everything a worker needs; a worker process gets it as a
// JSON file.
type WorkerConfig struct {
	ID        string
	Seed      uint64
	Mode      string
	Names     []string
	Prefix    string        // key prefix of the round's locks
	TTL       time.Duration // the Clients' lease time
	Nodes     [][]string    // per lock node: addresses to pick from (proxies)
	GuardNet  string        // the fenced resource's server
	GuardAddr string
	GuardKey  string // prefix of the guarded resources' keys
	Stop      int64  // unix ns: no operation starts after it
	MaxOps    int
	History   string // the file this worker records its events in
	// Permits is the N of every semaphore of a semaphore round (one of
	// SemPermits); 1 in other rounds.
	Permits int
	// Sizer: this worker, and no other, changes the kept sizes of the
	// round's semaphores, and does nothing else (size.go).
	Sizer bool
}

// clientOpts are the randomly chosen go-redis and dlock settings of one worker.
type clientOpts struct {
	readTimeout time.Duration
	ctxTimeout  bool // go-redis ContextTimeoutEnabled
	maxRetries  int  // go-redis MaxRetries: -1 none, else retries after the first try
	pipelining  bool
	autoExtend  bool
	maxHold     bool    // MaxHold on the Client (optModes)
	meta        bool    // HolderMeta on the Client (optModes)
	driver      bool    // the Client made through package driver (NewFrom), on go-redis
	watchLoss   bool    // WatchLoss(true) on the Client (with the watchdog)
	refuse      float64 // the fraction of commands the driver refuses unsent (refuse.go)
}

// Worker drives one dlock.Client through a random sequence of operations
// and records what it did and saw.
type Worker struct {
	cfg     WorkerConfig
	rng     *rand.Rand
	opts    clientOpts
	rdbs    []*redis.Client
	closers []func() // the Driver's connections
	grdb    *redis.Client
	c       *dlock.Client
	sems    map[string]*dlock.Semaphore       // semaphore mode: the round's names
	elect   map[string]*dlock.Election        // election mode: the round's names
	rws     map[string]*dlock.RWMutex         // rw mode: the round's names
	won     map[*dlock.Lock]*dlock.Leadership // election mode: a campaign's Leadership, until its Lock's critical section
	guard   *dlock.Guard
	rec     *Recorder
	seq     int
	// stale holds handles kept after their critical section, to be released
	// (again, or for the first time after they lapsed) later, from the past.
	stale []*handle
	// pending holds handles whose Release failed with a Redis error: the
	// docs say Release may be called again.
	pending []*handle
	sizes   *sizes         // a sizer's state, nil for the other workers (size.go)
	hold    time.Duration  // the Client's max hold (MaxHold); 0: none
	meta    *string        // the Client's holder metadata (HolderMeta); nil: the default
	trace   tracer         // the parts a multi-lock call takes and gives back
	hook    *lostHook      // the Client's Lost hook, nil if none (losthook.go)
	via     []string       // the proxies it reaches the lock nodes through, one per node
	common  []dlock.Option // the options of its Client
	// mu guards rdbs, cut and done against the injector (see cutClient).
	mu   sync.Mutex
	cut  *cut // its Redis clients closed under its Client, until it makes a fresh one
	done bool // it no longer runs operations
}

// handle is a Lock with the id its events carry.
type handle struct {
	l     *dlock.Lock
	id    string
	own   string // reentrant owner, "" otherwise
	fence int64  // asked for right after the acquisition; 0 if it was refused (the lease was lost)
	// ttl is the lease time the watchdog extends to (the acquisition's,
	// then the last Extend's) and next, if not 0, when its run is due
	// as an Extend left it (see watchdogAt); set for acquire's handles.
	ttl  time.Duration
	next int64
	// n is how many permits of a semaphore the lease holds (AcquireN); 0
	// or 1: one.
	n int
}

// newHandle makes the handle of an acquisition and asks for its fence.
func (w *Worker) newHandle(l *dlock.Lock, own string) *handle {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	f, _ := l.Fence(ctx)
	h := &handle{l: l, id: w.newID(), own: own, fence: f}
	w.watch(l, h.id, f)
	return h
}

// NewWorker connects a worker's clients as cfg and its seed say.
func NewWorker(cfg WorkerConfig) (*Worker, error) {
	rec, err := NewRecorder(cfg.History, cfg.ID)
	if err != nil {
		return nil, err
	}
	w := &Worker{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, 0x7041)), rec: rec}
	if cfg.Sizer {
		w.sizes = &sizes{known: map[string]int{}, quiet: map[string]time.Time{}}
	}
	w.opts = clientOpts{
		readTimeout: []time.Duration{200 * time.Millisecond, 300 * time.Millisecond}[w.rng.IntN(2)],
		ctxTimeout:  w.rng.IntN(2) == 0,
		maxRetries:  []int{3, 3, 1, -1}[w.rng.IntN(4)],
		pipelining:  w.rng.IntN(2) == 0,
		autoExtend:  w.rng.IntN(5) != 0,
	}
	if optModes(cfg.Mode) {
		w.opts.maxHold, w.opts.meta = w.rng.IntN(4) == 0, w.rng.IntN(4) == 0
	}
	w.opts.driver = cfg.Mode != ModeNoScripts && (Driver != nil || w.rng.IntN(3) == 0) // (WithoutScripts needs New)
	w.opts.watchLoss = w.opts.autoExtend && w.rng.IntN(3) == 0
	var via []string
	for _, addrs := range cfg.Nodes {
		via = append(via, addrs[w.rng.IntN(len(addrs))])
	}
	w.grdb = redis.NewClient(&redis.Options{Network: cfg.GuardNet, Addr: cfg.GuardAddr, PoolSize: 4})
	w.guard = dlock.NewGuard(w.grdb)
	how := testopt.Pipelining(w.opts.pipelining) // the checker runs both paths
	if cfg.Mode == ModeNoScripts {
		how = dlock.WithoutScripts() // (pipelining does not apply)
	}
	common := []dlock.Option{dlock.LeaseTTL(cfg.TTL), dlock.WithPrefix(cfg.Prefix), dlock.WithAutoExtend(w.opts.autoExtend), how}
	if w.opts.maxHold {
		w.hold = w.maxHold()
		common = append(common, dlock.MaxHold(w.hold))
	}
	if w.opts.meta {
		m := metas[w.rng.IntN(len(metas))]
		w.meta = &m
		common = append(common, dlock.HolderMeta(m))
	}
	if w.opts.watchLoss {
		common = append(common, dlock.WatchLoss(true))
	}
	if multiShare(cfg.Mode) > 0 {
		common = append(common, dlock.WithObserver(w.trace.observer()))
	}
	if w.opts.autoExtend {
		common = append(common, dlock.WithObserver((&jeopardies{rec: w.rec}).observer()))
	}
	if cfg.Mode == ModeSemaphore {
		common = append(common, dlock.WithObserver(queued(rec)))
	}
	if w.hook = newLostHook(w); w.hook != nil {
		common = append(common, dlock.WithObserver(w.hook.observer()))
	}
	w.via, w.common = via, common
	if err := w.connect(); err != nil {
		w.closeConns()
		w.grdb.Close()
		w.rec.Close()
		return nil, err
	}
	w.rec.Add(Event{Op: OpConfig, Inv: now(), Note: fmt.Sprintf("auto=%v ctxtimeout=%v retries=%d pipelining=%v readtimeout=%v maxhold=%v meta=%v driver=%v refuse=%g%% losthook=%v",
		w.opts.autoExtend, w.opts.ctxTimeout, w.opts.maxRetries, w.opts.pipelining, w.opts.readTimeout, w.hold, w.meta != nil, w.opts.driver, 100*w.opts.refuse, w.hook != nil), Via: strings.Join(via, " ")})
	return w, nil
}

// connect makes the worker's Redis clients, through the proxies w.via,
// and its Client on them, with the options w.common.
func (w *Worker) connect() error {
	var (
		nodes   []redis.UniversalClient
		conns   []driver.Conn
		rdbs    []*redis.Client
		closers []func()
		err     error
	)
	for _, addr := range w.via {
		rdb := redis.NewClient(&redis.Options{
			Addr: addr, DialTimeout: 500 * time.Millisecond,
			ReadTimeout: w.opts.readTimeout, WriteTimeout: w.opts.readTimeout,
			ContextTimeoutEnabled: w.opts.ctxTimeout, MaxRetries: w.opts.maxRetries, PoolSize: poolSize,
		})
		rdbs = append(rdbs, rdb)
		nodes = append(nodes, rdb)
		conns = append(conns, goredisdriver.Conn(rdb))
		if Driver != nil && w.opts.driver {
			conn, closeConn, derr := Driver(addr, w.opts.readTimeout)
			if derr != nil {
				err = derr
				break
			}
			conns[len(conns)-1] = conn
			closers = append(closers, closeConn)
		}
	}
	w.mu.Lock() // (the injector closes them: see cutClient)
	w.rdbs, w.closers = rdbs, closers
	w.mu.Unlock()
	if err != nil {
		return err
	}
	if w.opts.driver {
		w.opts.refuse = w.refusals(conns)
	}
	own := append(w.common[:len(w.common):len(w.common)], waiting(Fair(w.cfg.Mode)), dlock.WithReentrant(w.cfg.Mode == ModeReentrant))
	var c *dlock.Client
	switch quorum := w.cfg.Mode == ModeQuorum3 || w.cfg.Mode == ModeQuorum5; {
	case quorum && w.opts.driver:
		c, err = dlock.NewRedlockFrom(conns, nodeTimeout, w.common...)
	case quorum:
		c, err = dlock.NewRedlock(nodes, nodeTimeout, w.common...)
	case w.opts.driver:
		c, err = dlock.NewFrom(conns[0], own...)
	default:
		c, err = dlock.New(nodes[0], own...)
	}
	if err != nil {
		return err
	}
	w.c = c
	if w.cfg.Mode == ModeSemaphore {
		if w.cfg.Permits < 2 {
			return fmt.Errorf("torture: a semaphore round's worker config has Permits = %d, want one of %v", w.cfg.Permits, SemPermits)
		}
		w.sems = map[string]*dlock.Semaphore{}
		for _, name := range w.cfg.Names {
			if w.sems[name], err = w.c.Semaphore(name, w.cfg.Permits); err != nil {
				break
			}
		}
	}
	if err == nil && w.cfg.Mode == ModeElection {
		w.elect = map[string]*dlock.Election{}
		w.won = map[*dlock.Lock]*dlock.Leadership{}
		for _, name := range w.cfg.Names {
			if w.elect[name], err = w.c.Election(name); err != nil {
				break
			}
		}
	}
	if err == nil && w.cfg.Mode == ModeRW {
		w.rws = map[string]*dlock.RWMutex{}
		for _, name := range w.cfg.Names {
			if w.rws[name], err = w.c.RWMutex(name); err != nil {
				break
			}
		}
	}
	return err
}

// poolSize is each lock node client's go-redis pool size; check (f) bounds
// the connections a worker ends with by it.
const poolSize = 8

// nodeTimeout is a quorum Client's per-node timeout: far below the TTL,
// far above a loaded machine's round trip.
const nodeTimeout = 150 * time.Millisecond

// drainMax bounds how long a worker waits for dlock's background clean-up
// before closing its connections (Client.Close): an Acquire whose context
// ended mid-call undoes its attempt in a goroutine (retried for at most
// 10s), and closing the go-redis client under it would leave a queue entry
// or a lease behind until it expires.
const drainMax = 15 * time.Second

// Close waits for dlock's background clean-up, then closes the worker's
// connections and its history.
func (w *Worker) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), drainMax)
	if err := w.c.Close(ctx); err != nil {
		w.rec.Add(Event{Op: OpLeftover, Inv: now(), Ret: now(), Note: "Client.Close: " + err.Error()})
	}
	cancel()
	w.closeConns()
	w.grdb.Close()
	w.rec.Close()
}

// closeConns closes the worker's connections to the lock nodes.
func (w *Worker) closeConns() {
	for _, rdb := range w.rdbs {
		rdb.Close()
	}
	for _, c := range w.closers {
		c()
	}
}

// Driver, if set, makes every worker's Client through package driver (but
// in ModeNoScripts, which needs go-redis): it returns a connection to the
// node at addr, whose commands time out after timeout, and what closes it.
// A process sets it before RunProcess and Run: the checker then runs on
// another Redis client.
var Driver func(addr string, timeout time.Duration) (conn driver.Conn, close func(), err error)

// Run performs operations until the stop time or MaxOps, then releases
// every handle it still has. It never panics: a panic that escapes Do is
// recovered and recorded.
func (w *Worker) Run() {
	for i := 0; i < w.cfg.MaxOps && now() < w.cfg.Stop; i++ {
		w.step()
		if !w.renewIfCut() {
			break
		}
	}
	w.finish()
	w.endCuts()
	for i, rdb := range w.rdbs {
		st := rdb.PoolStats()
		w.rec.Add(Event{Op: OpPool, Inv: now(), Arg: int64(st.TotalConns), Bound: poolSize, Note: fmt.Sprint("node", i)})
	}
}

// step runs one randomly chosen operation.
func (w *Worker) step() {
	name := w.cfg.Names[w.rng.IntN(len(w.cfg.Names))]
	if w.elect != nil && w.rng.IntN(6) == 0 {
		w.readLeader(name)
		return
	}
	if w.sizes != nil { // the sizer does nothing else
		w.resize(name)
		time.Sleep(w.dur(0, w.cfg.TTL/10))
		return
	}
	if share := multiShare(w.cfg.Mode); share > 0 && w.rng.IntN(100) < share {
		w.multi([]string{OpAcquire, OpTry, OpDo}[w.rng.IntN(3)])
		return
	}
	switch r := w.rng.IntN(100); {
	case r < 35:
		w.acquire(name, OpAcquire)
	case r < 55:
		w.acquire(name, OpTry)
	case r < 85:
		w.do(name)
	case r < 93:
		w.lateRelease()
	default:
		time.Sleep(w.dur(0, w.cfg.TTL/20))
	}
}

// dur returns a random duration in [lo, hi).
func (w *Worker) dur(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(w.rng.Int64N(int64(hi-lo)))
}

// newID returns a fresh handle or critical-section id.
func (w *Worker) newID() string {
	w.seq++
	return fmt.Sprintf("%s#%d", w.cfg.ID, w.seq)
}

// owner picks the owner of a reentrant acquisition: one of two owners of
// this worker, so that the same Client contends with itself ("" in other
// modes).
func (w *Worker) owner() string {
	if w.cfg.Mode != ModeReentrant {
		return ""
	}
	return fmt.Sprintf("%s-o%d", w.cfg.ID, w.rng.IntN(2))
}

// client returns the Client to acquire through for own: the worker's, or
// its Owner Client for a reentrant owner.
func (w *Worker) client(own string) *dlock.Client {
	if own == "" {
		return w.c
	}
	c, err := w.c.Owner(own)
	if err != nil {
		panic(err) // the worker's Client is reentrant whenever it names an owner
	}
	return c
}

// target is what an acquisition takes: a lock name through a Client, or a
// permit of a semaphore.
type target interface {
	Acquire(ctx context.Context, opts ...dlock.LockOption) (*dlock.Lock, error)
	TryAcquire(ctx context.Context, opts ...dlock.LockOption) (*dlock.Lock, error)
	Do(ctx context.Context, fn func(context.Context, *dlock.Lock) error, opts ...dlock.LockOption) error
}

// lockName is the lock name through the Client c, taken with opts.
type lockName struct {
	c    *dlock.Client
	name string
	opts []dlock.LockOption
}

func (n lockName) Acquire(ctx context.Context, opts ...dlock.LockOption) (*dlock.Lock, error) {
	return n.c.Acquire(ctx, n.name, append(n.opts[:len(n.opts):len(n.opts)], opts...)...)
}
func (n lockName) TryAcquire(ctx context.Context, opts ...dlock.LockOption) (*dlock.Lock, error) {
	return n.c.TryAcquire(ctx, n.name, append(n.opts[:len(n.opts):len(n.opts)], opts...)...)
}
func (n lockName) Do(ctx context.Context, fn func(context.Context, *dlock.Lock) error, opts ...dlock.LockOption) error {
	return n.c.Do(ctx, n.name, fn, append(n.opts[:len(n.opts):len(n.opts)], opts...)...)
}

// candidate campaigns in an election: its leadership is the lease.
type candidate struct {
	e     *dlock.Election
	value string
	won   map[*dlock.Lock]*dlock.Leadership // where a campaign leaves its Leadership (nil: nowhere)
}

func (c candidate) Acquire(ctx context.Context, opts ...dlock.LockOption) (*dlock.Lock, error) {
	return c.campaign(ctx, opts...)
}
func (c candidate) TryAcquire(ctx context.Context, opts ...dlock.LockOption) (*dlock.Lock, error) {
	return c.campaign(ctx, append(opts, dlock.MaxWait(0))...)
}
func (c candidate) Do(ctx context.Context, fn func(context.Context, *dlock.Lock) error, opts ...dlock.LockOption) error {
	return c.e.Do(ctx, c.value, func(ctx context.Context, ld *dlock.Leadership) error { return fn(ctx, ld.Lock()) }, opts...)
}

func (c candidate) campaign(ctx context.Context, opts ...dlock.LockOption) (*dlock.Lock, error) {
	ld, err := c.e.Campaign(ctx, c.value, opts...)
	if err != nil {
		return nil, err
	}
	if c.won != nil {
		c.won[ld.Lock()] = ld
	}
	return ld.Lock(), nil
}

// target returns what an acquisition of name for own takes, with the
// per-call options opts: a permit of the name's semaphore (semaphore
// mode), a campaign (election mode), a read or a write (rw mode), or the
// lock through the owner's Client.
func (w *Worker) target(own, name string, opts []dlock.LockOption) target {
	var t target
	switch {
	case w.sems[name] != nil:
		t = w.sems[name]
	case w.elect[name] != nil:
		t = candidate{w.elect[name], w.cfg.ID, w.won}
	case w.rws[name] != nil:
		t = rwSide(w.rws[name], w.rng.IntN(3) == 0)
	default:
		return lockName{w.client(own), name, opts}
	}
	if len(opts) > 0 {
		t = withOpts{t, opts}
	}
	return t
}

// targetN is target, but for n permits at once of a semaphore (n > 1):
// Semaphore.AcquireN.
func (w *Worker) targetN(own, name string, opts []dlock.LockOption, n int) target {
	s := w.sems[name]
	if s == nil || n <= 1 {
		return w.target(own, name, opts)
	}
	var t target = permitsN{s, n}
	if len(opts) > 0 {
		t = withOpts{t, opts}
	}
	return t
}

// permitsN is a hold of n permits of a semaphore at once: AcquireN, and
// for one attempt AcquireN with MaxWait(0), as the docs say (there is no
// TryAcquireN). There is no Do of several permits.
type permitsN struct {
	s *dlock.Semaphore
	n int
}

func (p permitsN) Acquire(ctx context.Context, opts ...dlock.LockOption) (*dlock.Lock, error) {
	return p.s.AcquireN(ctx, p.n, opts...)
}
func (p permitsN) TryAcquire(ctx context.Context, opts ...dlock.LockOption) (*dlock.Lock, error) {
	return p.s.AcquireN(ctx, p.n, append(opts[:len(opts):len(opts)], dlock.MaxWait(0))...)
}
func (p permitsN) Do(context.Context, func(context.Context, *dlock.Lock) error, ...dlock.LockOption) error {
	panic("torture: the workload runs no Do of several permits")
}

// permits draws how many permits an acquisition takes: in semaphore
// rounds one Acquire or TryAcquire in three takes 2 to N at once
// (AcquireN); else 1. Other rounds draw nothing, so their seeds replay as
// before.
func (w *Worker) permits() int {
	if w.sems == nil || w.rng.IntN(3) != 0 {
		return 1
	}
	return 2 + w.rng.IntN(w.cfg.Permits-1)
}

// queued is the Observer of a semaphore round's Client that records when
// an acquisition starts to wait (OpQueued): its first attempt, which puts
// it in the queue, has returned by then, so its place dates from no
// later. A worker waits for one acquisition at a time, so the worker and
// the name say which. Check (d) needs it to tell who may be ahead of whom
// (see aheadOf).
func queued(rec *Recorder) dlock.Observer {
	return dlock.Observer{Waiting: func(_ context.Context, name string, delta int) {
		if delta > 0 {
			rec.Add(Event{Name: name, Op: OpQueued, Inv: now()})
		}
	}}
}

// withOpts is a target taken with the per-call options opts.
type withOpts struct {
	t    target
	opts []dlock.LockOption
}

func (o withOpts) Acquire(ctx context.Context, opts ...dlock.LockOption) (*dlock.Lock, error) {
	return o.t.Acquire(ctx, append(o.opts[:len(o.opts):len(o.opts)], opts...)...)
}
func (o withOpts) TryAcquire(ctx context.Context, opts ...dlock.LockOption) (*dlock.Lock, error) {
	return o.t.TryAcquire(ctx, append(o.opts[:len(o.opts):len(o.opts)], opts...)...)
}
func (o withOpts) Do(ctx context.Context, fn func(context.Context, *dlock.Lock) error, opts ...dlock.LockOption) error {
	return o.t.Do(ctx, fn, append(o.opts[:len(o.opts):len(o.opts)], opts...)...)
}

// rwHold is the read or the write of a read-write lock. Each hold it
// takes carries its kind as holder metadata, so its token says whether it
// is a write (see IsWrite) and the checks need nothing else.
type rwHold struct {
	l    *dlock.RWLocker
	meta dlock.LockOption
}

// rwSide returns the write of rw if write is set, else its read.
func rwSide(rw *dlock.RWMutex, write bool) target {
	if write {
		return rwHold{rw.Writer(), dlock.HolderMeta(rwWrite)}
	}
	return rwHold{rw.Reader(), dlock.HolderMeta(rwRead)}
}

// The holder metadata of reads and writes in rw mode.
const (
	rwRead  = "r"
	rwWrite = "w"
)

// IsWrite reports whether the lease with token tok is a write of a
// read-write lock of an rw round: its token ends with its metadata.
func IsWrite(tok string) bool { return strings.HasSuffix(tok, "."+rwWrite) }

func (s rwHold) Acquire(ctx context.Context, opts ...dlock.LockOption) (*dlock.Lock, error) {
	return s.l.Acquire(ctx, append(opts, s.meta)...)
}
func (s rwHold) TryAcquire(ctx context.Context, opts ...dlock.LockOption) (*dlock.Lock, error) {
	return s.l.TryAcquire(ctx, append(opts, s.meta)...)
}
func (s rwHold) Do(ctx context.Context, fn func(context.Context, *dlock.Lock) error, opts ...dlock.LockOption) error {
	return s.l.Do(ctx, fn, append(opts, s.meta)...)
}

// opCtx returns a context for one acquisition: a short or a generous
// deadline, sometimes cancelled earlier at a random point. dl is when it
// ends (deadline or cancel), the instant check (d) measures lateness from.
func (w *Worker) opCtx() (ctx context.Context, cancel context.CancelFunc, dl int64) {
	return w.opCtxIn(context.Background())
}

// opCtxIn is opCtx, derived from parent.
func (w *Worker) opCtxIn(parent context.Context) (ctx context.Context, cancel context.CancelFunc, dl int64) {
	ttl := w.cfg.TTL
	timeout := w.dur(ttl/50, ttl/5)
	if w.rng.IntN(2) == 0 {
		timeout = w.dur(ttl/2, 3*ttl)
	}
	ctx, cancel = context.WithTimeout(parent, timeout)
	end := time.Now().Add(timeout)
	if w.rng.IntN(5) == 0 {
		at := w.dur(0, timeout)
		t := time.AfterFunc(at, cancel)
		stop := cancel
		cancel = func() { t.Stop(); stop() }
		end = time.Now().Add(at)
	}
	return ctx, cancel, end.UnixNano()
}

// lateBound is how long after its context ended a call may still return:
// the undo of a failed attempt (2s in dlock) and, when go-redis does not
// watch the context, its read timeouts and retries, plus scheduling slack.
func (w *Worker) lateBound() int64 {
	b := 2*time.Second + 2*time.Second
	if !w.opts.ctxTimeout {
		tries := time.Duration(max(w.opts.maxRetries, 0) + 1)
		b += 2 * tries * (2*w.opts.readTimeout + 512*time.Millisecond)
	}
	return int64(b)
}

// waiting returns the option of fair waiting (the default: an option that
// changes nothing) or of unfair waiting.
func waiting(fair bool) dlock.Option {
	if fair {
		return dlock.WithObserver(dlock.Observer{})
	}
	return dlock.WithUnfair(nil)
}
