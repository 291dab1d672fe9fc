package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/leakcheck"
	"github.com/dlockio/dlock/internal/redisserver"
	"github.com/dlockio/dlock/internal/redistest"
	"github.com/dlockio/dlock/internal/testopt"
)

// helperEnv makes the test binary run as a contending worker process
// instead of running tests (see TestMain).
const helperEnv = "DLOCK_TEST_HELPER"

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(runHelper(mode))
	}
	// go-redis logs dial failures; the tests that cause them check the errors.
	redis.SetLogger(quietLogger{})
	// The examples that print their output run against a server of their own.
	srv, err := redisserver.Start(redisserver.TCP())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	addr = srv.Addr()
	code := m.Run()
	srv.Stop()
	os.Exit(sweep(code))
}

// sweep fails a passing run if a goroutine of dlock is still running once
// every test has ended (leakcheck.Sweep: those a timer started escape the
// per-test check).
func sweep(code int) int {
	if left := leakcheck.Sweep(); len(left) > 0 {
		fmt.Fprintf(os.Stderr, "%d goroutine(s) of dlock left running after the tests:\n\n%s\n", len(left), strings.Join(left, "\n\n"))
		if code == 0 {
			return 1
		}
	}
	return code
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// runHelper is the body of a worker process. Modes:
//
//	contend: take the lock DLOCK_NAME DLOCK_ROUNDS times and do the critical
//	         section of criticalSection each time;
//	hold:    take the lock DLOCK_NAME (a permit of the semaphore DLOCK_NAME
//	         if DLOCK_PERMITS is set, a read of the read-write lock if
//	         DLOCK_RW=r), print "held", and sleep until killed;
//	campaign, lead: see campaignHelper and leadHelper (election_test.go);
//	nest:    see nestHelper (deadlock_test.go);
//	pausedo: run Do on DLOCK_NAME and report, after the test pauses the
//	         process, whether fn's ctx knew of the loss ("lost") or not ("stale").
func runHelper(mode string) int {
	rdb := redis.NewClient(&redis.Options{Network: os.Getenv("DLOCK_NET"), Addr: os.Getenv("DLOCK_ADDR")})
	defer rdb.Close()
	ttl, _ := time.ParseDuration(os.Getenv("DLOCK_TTL"))
	delay, _ := time.ParseDuration(os.Getenv("DLOCK_LOCK_DELAY")) // unset: 0, none
	var (
		c   *dlock.Client
		err error
	)
	if addrs := os.Getenv("DLOCK_QUORUM"); addrs != "" { // locks on these nodes; the counter on DLOCK_ADDR
		var nodes []redis.UniversalClient
		for _, a := range strings.Split(addrs, ",") {
			n := redis.NewClient(&redis.Options{Addr: a, MaxRetries: -1})
			defer n.Close()
			nodes = append(nodes, n)
		}
		c, err = dlock.NewRedlock(nodes, 200*time.Millisecond, dlock.LeaseTTL(ttl), dlock.LockDelay(delay))
	} else {
		opts := []dlock.Option{dlock.LeaseTTL(ttl), dlock.LockDelay(delay), waiting(os.Getenv("DLOCK_FAIR") == "1"),
			dlock.WithReentrant(os.Getenv("DLOCK_REENTRANT") == "1")}
		if os.Getenv("DLOCK_NOSCRIPTS") == "1" {
			opts = append(opts, dlock.WithoutScripts())
		}
		c, err = dlock.New(rdb, opts...)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	name := os.Getenv("DLOCK_NAME")
	switch mode {
	case "contend":
		rounds, _ := strconv.Atoi(os.Getenv("DLOCK_ROUNDS"))
		var inside atomic.Int32
		if os.Getenv("DLOCK_REENTRANT") == "1" {
			if o, err := c.Owner(fmt.Sprint("proc-", os.Getpid())); err == nil {
				c = o
			}
			ctx = context.WithValue(ctx, ownerTestKey{}, true)
		}
		for range rounds {
			if err := criticalSection(ctx, c, rdb, name, &inside); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
		}
		return 0
	case "campaign": // lead DLOCK_ROUNDS terms of the election DLOCK_NAME (election_test.go)
		rounds, _ := strconv.Atoi(os.Getenv("DLOCK_ROUNDS"))
		return campaignHelper(ctx, c, rdb, name, rounds)
	case "lead": // win the election DLOCK_NAME, print "leading", sleep until killed
		return leadHelper(ctx, c, name)
	case "candidate": // campaign once, print "leading <fence>", resign (election_test.go)
		return candidateHelper(ctx, c, name)
	case "nest": // hold DLOCK_NAME, take DLOCK_INNER inside (deadlock_test.go)
		check, _ := time.ParseDuration(os.Getenv("DLOCK_DEADLOCK"))
		return nestHelper(ctx, c, rdb, name, os.Getenv("DLOCK_INNER"), check)
	case "pausedo":
		// Inside Do, watch for a moment when the lease's deadline has passed
		// but fn's ctx still says nothing: the test stops this process (for
		// longer than the TTL) while it loops.
		err := c.Do(ctx, name, func(ctx context.Context, l *dlock.Lock) error {
			fmt.Println("in")
			for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
				now := time.Now()
				err := ctx.Err()
				if vu := l.ValidUntil(); now.After(vu) { // vu read last: it only moves forward
					if err == nil {
						fmt.Println("stale")
					} else {
						fmt.Println("lost")
					}
					return nil
				}
			}
			fmt.Println("timeout")
			return nil
		})
		if err != nil && !errors.Is(err, dlock.ErrNotHeld) {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return 0
	case "hold": // with DLOCK_PERMITS set, a permit of the semaphore DLOCK_NAME; see DLOCK_RW
		acquire := func(ctx context.Context, opts ...dlock.LockOption) (*dlock.Lock, error) {
			return c.Acquire(ctx, name, opts...)
		}
		if n, _ := strconv.Atoi(os.Getenv("DLOCK_PERMITS")); n > 0 {
			s, err := c.Semaphore(name, n)
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 2
			}
			acquire = s.Acquire
		}
		if os.Getenv("DLOCK_RW") == "r" { // a read hold of the read-write lock DLOCK_NAME
			rw, err := c.RWMutex(name)
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 2
			}
			acquire = rw.Reader().Acquire
		}
		if _, err := acquire(ctx); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Println("held")
		time.Sleep(time.Minute)
		return 0
	}
	fmt.Fprintf(os.Stderr, "unknown helper mode %q\n", mode)
	return 2
}

// Keys of the shared resource that criticalSection updates.
const (
	counterKey    = "test:counter"
	insideKey     = "test:inside"
	violationsKey = "test:violations"
)

// criticalSection takes name and, holding it, does a non-atomic
// read-modify-write of counterKey. It counts overlapping holders in Redis
// (insideKey, across processes) and in this process (inside); any overlap is
// recorded in violationsKey.
func criticalSection(ctx context.Context, c *dlock.Client, rdb *redis.Client, name string, inside *atomic.Int32) error {
	l, err := c.Acquire(ctx, name)
	if err != nil {
		return fmt.Errorf("Acquire(%q) = %v", name, err)
	}
	// With a reentrant Client and an owner in ctx, take it again, nested:
	// it must re-enter at once, and the lock stay held until both holds end.
	if _, ok := ctx.Value(ownerTestKey{}).(bool); ok {
		inner, err := c.TryAcquire(ctx, name)
		if err != nil {
			return fmt.Errorf("nested TryAcquire(%q) = %v, want re-entry", name, err)
		}
		outer := l
		defer func() {
			if err := outer.Release(context.WithoutCancel(ctx)); err != nil {
				rdb.Incr(ctx, violationsKey)
			}
		}()
		l = inner
	}
	if inside.Add(1) > 1 {
		rdb.Incr(ctx, violationsKey)
	}
	if n, _ := rdb.Incr(ctx, insideKey).Result(); n > 1 {
		rdb.Incr(ctx, violationsKey)
	}
	v, err := rdb.Get(ctx, counterKey).Int()
	if err != nil && err != redis.Nil {
		return err
	}
	time.Sleep(100 * time.Microsecond) // widen the window an overlap would need
	if err := rdb.Set(ctx, counterKey, v+1, 0).Err(); err != nil {
		return err
	}
	rdb.Decr(ctx, insideKey)
	inside.Add(-1)
	if err := l.Release(context.WithoutCancel(ctx)); err != nil {
		return fmt.Errorf("Release(%q) = %v", name, err)
	}
	return nil
}

// ownerTestKey marks a context whose critical sections nest a second hold.
type ownerTestKey struct{}

// newClient returns dlock.New(rdb, opts...), failing the test if New
// refuses its arguments.
func newClient(tb testing.TB, rdb redis.UniversalClient, opts ...dlock.Option) *dlock.Client {
	tb.Helper()
	c, err := dlock.New(rdb, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// asOwner returns c's Client for owner (Client.Owner) when c is reentrant,
// and c itself otherwise.
func asOwner(tb testing.TB, c *dlock.Client, owner string) *dlock.Client {
	tb.Helper()
	o, err := c.Owner(owner)
	if err != nil {
		return c
	}
	return o
}

// newRedlock returns dlock.NewRedlock(nodes, nodeTimeout, opts...), failing
// the test if NewRedlock refuses its arguments.
func newRedlock(tb testing.TB, nodes []redis.UniversalClient, nodeTimeout time.Duration, opts ...dlock.Option) *dlock.Client {
	tb.Helper()
	c, err := dlock.NewRedlock(nodes, nodeTimeout, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// setup starts a server and returns it with a go-redis client for it. It
// checks for leaked goroutines when the test ends.
func setup(t *testing.T) (*redistest.Server, *redis.Client) {
	t.Helper()
	leakcheck.Check(t) // registered first: runs after the server is stopped
	s := redistest.Start(t)
	return s, s.Client(t)
}

// waitFor polls cond every 5ms until it is true or d passes.
func waitFor(d time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

// tooLate is the reason an attempt whose reply came back after its lease's
// validity had run out gives: the lease was given back, nothing is held.
const tooLate = "the reply came after the lease's validity had run out"

// noAnswer is the reason a node of a quorum that did not answer an attempt
// in time gives.
const noAnswer = "no answer within the node timeout"

// tryAcquireInTime is c.TryAcquire of a name nobody else takes, tried again
// (for up to 5s) while it failed for time alone: its reply came back after
// the lease's validity (on a loaded machine a round trip can outlast a lease
// of 100ms, and the library then gives the lease back: ErrNotAcquired,
// tooLate), or, over a quorum, too few nodes answered within a short node
// timeout (ErrNotAcquired, noAnswer; the nodes that granted were undone).
func tryAcquireInTime(ctx context.Context, c *dlock.Client, name string, opts ...dlock.LockOption) (*dlock.Lock, error) {
	for deadline := time.Now().Add(5 * time.Second); ; {
		l, err := c.TryAcquire(ctx, name, opts...)
		late := err != nil && (strings.Contains(err.Error(), tooLate) || strings.Contains(err.Error(), noAnswer))
		if err == nil || !errors.Is(err, dlock.ErrNotAcquired) || !late || !time.Now().Before(deadline) {
			return l, err
		}
	}
}

// lostToLag is LostToLag (export_test.go), which the package's own tests
// use too.
func lostToLag(t *testing.T, err error, lag, ttl time.Duration) bool {
	t.Helper()
	return dlock.LostToLag(t, err, lag, ttl)
}

// closedWithin reports whether ch closes within d.
func closedWithin(ch <-chan struct{}, d time.Duration) bool {
	select {
	case <-ch:
		return true
	default:
	}
	select {
	case <-ch:
		return true
	case <-time.After(d):
		return false
	}
}

// fenceOf returns the lease's fence, asking Redis the first time; it fails
// the test if none can be issued.
func fenceOf(t testing.TB, l *dlock.Lock) int64 {
	t.Helper()
	f, err := l.Fence(t.Context())
	if err != nil {
		t.Errorf("Fence of %q = %v", l.Name(), err)
	}
	return f
}

// liveKeys counts the keys that exist and are not a released lock's
// tombstone (a string starting with "~", which is a free lock).
func liveKeys(ctx context.Context, rdb redis.Cmdable, keys ...string) int64 {
	var n int64
	for _, k := range keys {
		switch rdb.Type(ctx, k).Val() {
		case "none":
		case "string":
			if !strings.HasPrefix(rdb.Get(ctx, k).Val(), "~") {
				n++
			}
		default:
			n++
		}
	}
	return n
}

// holderOf returns the lease token a plain lock's value names: the value
// up to its notes (see lib.lua).
func holderOf(v string) string {
	token, _, _ := strings.Cut(v, " ")
	return token
}

// leaseOverProxy takes name with a Client that reaches Redis through the
// proxied rdb (no pipelining, no watchdog, its scripts loaded first, so
// that a stalled reply is the command's own), and returns the lease and a
// second Client on the direct connection, to take the lock next.
func leaseOverProxy(t *testing.T, rdb, direct *redis.Client, fair bool, name string) (*dlock.Lock, *dlock.Client) {
	t.Helper()
	c := newClient(t, rdb, waiting(fair), pipelined(false), dlock.WithAutoExtend(false))
	next := newClient(t, direct, waiting(fair), dlock.WithAutoExtend(false))
	if warm, err := c.TryAcquire(t.Context(), name+"-warm"); err == nil {
		warm.Release(t.Context())
	}
	l, err := c.TryAcquire(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	return l, next
}

// pipelined turns the batcher on or off: the API always pipelines, and a
// test that runs both checks that the fast path behaves as the slow one.
func pipelined(on bool) dlock.Option { return testopt.Pipelining(on) }

// waiting returns the option of fair waiting (the default: an option that
// changes nothing) or of unfair waiting.
func waiting(fair bool) dlock.Option {
	if fair {
		return dlock.WithObserver(dlock.Observer{})
	}
	return dlock.WithUnfair(nil)
}

// mode makes Clients of one kind over the same Redis deployment.
type mode struct {
	name string
	new  func(tb testing.TB, opts ...dlock.Option) *dlock.Client
	ctx  func(context.Context) context.Context // the owner, for a reentrant Client
}

// modes returns the single-node modes over rdb, and with quorum set a
// quorum of 3 fresh nodes.
func modes(t *testing.T, rdb redis.UniversalClient, quorum bool) []mode {
	t.Helper()
	// The default node timeout, TTL/50, is a few ms for these tests' short
	// TTLs: too tight for a loaded machine. A test's own option wins.
	return modesAt(t, rdb, quorum, 100*time.Millisecond)
}

// modesAt is modes, with the quorum's node timeout at nodeTimeout: far
// above a loaded machine's round trip, for tests whose leases allow it
// and whose point is not the node timeout. (A node that misses it makes
// an acquisition fail, and leaves its grant on the other nodes to be
// undone, which a retry may meet.)
func modesAt(t *testing.T, rdb redis.UniversalClient, quorum bool, nodeTimeout time.Duration) []mode {
	t.Helper()
	plain := func(ctx context.Context) context.Context { return ctx }
	ms := []mode{
		{"plain", func(tb testing.TB, o ...dlock.Option) *dlock.Client {
			return newClient(tb, rdb, append(o, dlock.WithUnfair(nil))...)
		}, plain},
		{"fair", func(tb testing.TB, o ...dlock.Option) *dlock.Client {
			return newClient(tb, rdb, o...)
		}, plain},
		{"reentrant", func(tb testing.TB, o ...dlock.Option) *dlock.Client {
			return asOwner(tb, newClient(tb, rdb, append(o, dlock.WithReentrant(true))...), "owner-a")
		}, plain},
	}
	if quorum {
		_, nodes := startQuorum(t, 3)
		ms = append(ms, mode{"quorum", func(tb testing.TB, o ...dlock.Option) *dlock.Client {
			return newRedlock(tb, nodes, nodeTimeout, o...)
		}, plain})
	}
	return ms
}

// proxied starts a TCP server behind a proxy and returns the proxy, a
// client through it and a client straight to the server.
func proxied(t *testing.T, retries int, readTimeout time.Duration) (*redistest.Proxy, *redis.Client, *redis.Client) {
	t.Helper()
	s := redistest.Start(t, redistest.TCP())
	p := redistest.NewProxy(t, s.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: retries, ReadTimeout: readTimeout})
	t.Cleanup(func() { rdb.Close() })
	if err := rdb.Ping(t.Context()).Err(); err != nil { // a pooled connection, its handshake done
		t.Fatal(err)
	}
	return p, rdb, s.Client(t)
}

// stallThenCut runs op while replies are stalled, waits until cond shows
// that the command ran on the server, then cuts the connection: go-redis
// re-sends the command, which runs a second time.
func stallThenCut(t *testing.T, p *redistest.Proxy, op func() error, cond func() bool) error {
	t.Helper()
	p.StallReplies()
	errc := make(chan error, 1)
	go func() { errc <- op() }()
	if !waitFor(3*time.Second, cond) {
		t.Error("the command never reached the server")
	}
	p.Cut()
	select {
	case err := <-errc:
		return err
	case <-time.After(5 * time.Second):
		t.Fatal("the call did not return 5s after the cut")
		return nil
	}
}

// countGoroutines counts the test's goroutines that run a function whose
// name or file contains substr (see leakcheck.Count).
func countGoroutines(t testing.TB, substr string) int { return leakcheck.Count(t, substr) }

// refusingDialer is a go-redis Dialer whose connections the test can cut,
// and which can refuse new ones for a while: Redis unreachable from one
// process (a partition, a proxy or a failover in between) while it lives,
// with its data, for everyone else.
type refusingDialer struct {
	refuse atomic.Bool
	mu     sync.Mutex
	conns  []net.Conn
}

func (d *refusingDialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if d.refuse.Load() {
		return nil, &net.OpError{Op: "dial", Net: network, Err: syscall.ECONNREFUSED}
	}
	var nd net.Dialer
	c, err := nd.DialContext(ctx, network, addr)
	if err == nil {
		d.mu.Lock()
		d.conns = append(d.conns, c)
		d.mu.Unlock()
	}
	return c, err
}

// cutAndRefuse closes every connection made so far and refuses new ones
// until allow.
func (d *refusingDialer) cutAndRefuse() {
	d.refuse.Store(true)
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.conns {
		c.Close()
	}
	d.conns = nil
}

func (d *refusingDialer) allow() { d.refuse.Store(false) }

// refusable returns a client of s whose connections go through a
// refusingDialer (go-redis's retries off).
func refusable(t *testing.T, s *redistest.Server) (*redis.Client, *refusingDialer) {
	t.Helper()
	d := &refusingDialer{}
	opts := s.Options()
	opts.Dialer, opts.MaxRetries = d.dial, -1
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { rdb.Close() })
	return rdb, d
}

// warm makes c load the scripts of kind by taking and giving back a hold
// of that kind on name.
func warm(t *testing.T, ctx context.Context, c *dlock.Client, kind, name string) {
	t.Helper()
	l, err := holdAs(t, ctx, c, kind, name, dlock.MaxWait(0))
	if err != nil {
		t.Fatalf("warming the %s scripts: %v", kind, err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("warming the %s scripts: Release = %v", kind, err)
	}
}

// holdAs waits for a hold of kind on name through c ("fair": a lock, a
// semaphore's permit of 1, a read-write lock's write, an election's
// campaign), as Acquire does with opts.
func holdAs(t *testing.T, ctx context.Context, c *dlock.Client, kind, name string, opts ...dlock.LockOption) (*dlock.Lock, error) {
	t.Helper()
	switch kind {
	case "semaphore":
		return newSemaphore(t, c, name, 1).Acquire(ctx, opts...)
	case "rw":
		return newRW(t, c, name).Writer().Acquire(ctx, opts...)
	case "election":
		ld, err := newElection(t, c, name).Campaign(ctx, "candidate", opts...)
		if err != nil {
			return nil, err
		}
		return ld.Lock(), nil
	}
	return c.Acquire(ctx, name, opts...)
}

// long skips a long timing or fault scenario under -short (the quick check
// before a commit); the full suite runs it.
func long(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("a long timing or fault scenario: runs without -short")
	}
}

// pauseAfter is a go-redis hook that, once armed, sleeps for pause after
// the first command for which match is true has returned: a client paused
// (GC, scheduling) between two requests of one operation.
type pauseAfter struct {
	match   func(args []any) bool
	pause   time.Duration
	once    sync.Once
	reached chan struct{} // if set, closed when the pause begins
	until   chan struct{} // if set, the pause ends when it is closed (or after pause)
}

func (h *pauseAfter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *pauseAfter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if h.match(cmd.Args()) {
			h.once.Do(func() {
				if h.reached != nil {
					close(h.reached)
				}
				select {
				case <-h.until: // (nil: never)
				case <-time.After(h.pause):
				}
			})
		}
		return err
	}
}

func (h *pauseAfter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// isMarkerGet matches a GET of a lease's marker key ("...:r:<token>"),
// what Resume reads first (Seq).
func isMarkerGet(args []any) bool {
	if len(args) != 2 {
		return false
	}
	name, _ := args[0].(string)
	key, _ := args[1].(string)
	return strings.EqualFold(name, "get") && strings.Contains(key, ":r:")
}

// claimWithinRedis fails t if l claims a validity past what Redis gives
// the lock key (its PTTL from now, plus a small allowance for the round
// trip).
func claimWithinRedis(t *testing.T, rdb *redis.Client, l *dlock.Lock, who string) {
	t.Helper()
	// The claim is read first: an extension landing meanwhile only moves
	// Redis's deadline later.
	claim, held := l.ValidUntil(), l.Err() == nil
	pttl, err := rdb.PTTL(t.Context(), l.Key()).Result()
	if err != nil {
		t.Fatal(err)
	}
	redisUntil := time.Now().Add(pttl)
	if held && claim.After(redisUntil.Add(50*time.Millisecond)) {
		t.Errorf("%s claims validity until %v from now, but Redis keeps the lock only %v more (Err=%v)",
			who, time.Until(claim).Round(time.Millisecond), pttl, l.Err())
	}
}

// setupTCP is setup with a server on TCP (the proxy's target).
func setupTCP(t *testing.T) (*redistest.Server, *redis.Client) {
	leakcheck.Check(t)
	s := redistest.Start(t, redistest.TCP())
	return s, s.Client(t)
}

// lateCopyClient returns a go-redis client through a new proxy to s that
// re-sends a command whose reply takes over 200ms (go-redis retries a read
// timeout), and the proxy.
func lateCopyClient(t *testing.T, s *redistest.Server) (*redis.Client, *redistest.Proxy) {
	p := redistest.NewProxy(t, s.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ReadTimeout: 200 * time.Millisecond, MaxRetries: 3})
	t.Cleanup(func() { rdb.Close() })
	return rdb, p
}

// lateFirstCopy runs op while the proxy holds the first copy of its
// request for 700ms: go-redis times out after 200ms and re-sends it, the
// re-sent copy goes through at once and op returns, and the first copy
// lands ~500ms later. It returns when op has returned.
func lateFirstCopy(p *redistest.Proxy, op func()) {
	p.Delay(700*time.Millisecond, 0)
	done := make(chan struct{})
	go func() { defer close(done); op() }()
	time.Sleep(100 * time.Millisecond)
	p.Delay(0, 0)
	<-done
}

// oldServer waits until the server behind rdb has been up for 2 s: a clean
// lease found gone by a release whose reply was lost counts as released
// only on a server certainly up since before the lease began (INFO's
// uptime is in whole seconds).
func oldServer(t *testing.T, rdb *redis.Client) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		info, err := rdb.Info(t.Context(), "server").Result()
		if err != nil {
			t.Fatal(err)
		}
		var up int
		if i := strings.Index(info, "uptime_in_seconds:"); i >= 0 {
			fmt.Sscan(info[i+len("uptime_in_seconds:"):], &up)
		}
		if up >= 2 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("server up %ds after 10s", up)
		}
	}
}
