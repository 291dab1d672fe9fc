package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/leakcheck"
	"github.com/dlockio/dlock/internal/redistest"
)

// noScriptUser makes the ACL user "noscript" on s, which may run every
// command but the scripting ones, and returns a client that logs in as it
// with opts (nil: s's own), closed in t's cleanup.
func noScriptUser(t *testing.T, s *redistest.Server, opts *redis.Options) *redis.Client {
	t.Helper()
	_, err := s.Do(t.Context(), "ACL", "SETUSER", "noscript", "on", ">pw", "~*", "&*", "+@all", "-@scripting")
	if err != nil {
		t.Fatal(err)
	}
	if opts == nil {
		opts = s.Options()
	}
	opts.Username, opts.Password = "noscript", "pw"
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { rdb.Close() })
	if err := rdb.Eval(t.Context(), "return 1", nil).Err(); err == nil || !strings.HasPrefix(err.Error(), "NOPERM") {
		t.Fatalf("EVAL as the noscript user = %v, want NOPERM", err)
	}
	return rdb
}

// A scripting Client whose Redis user may not run scripts says so, and
// names the mode to use; the script-free Client works for the same user.
func TestScriptingDeniedNamesTheMode(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	rdb := noScriptUser(t, s, nil)
	ctx := t.Context()
	for _, fair := range []bool{false, true} {
		c := newClient(t, rdb, waiting(fair))
		_, err1 := c.TryAcquire(ctx, "denied")
		_, err2 := c.Acquire(ctx, "denied")
		_, err3 := c.Inspect(ctx, "denied")
		for i, err := range []error{err1, err2, err3} {
			if err == nil || !strings.Contains(err.Error(), "scripting is denied to this Redis user") ||
				!strings.Contains(err.Error(), "dlock.WithoutScripts()") {
				t.Errorf("fair %v, call %d: error %v, want one that says scripting is denied and names WithoutScripts", fair, i+1, err)
			}
			if _, ok := errors.AsType[redis.Error](err); !ok {
				t.Errorf("fair %v, call %d: error %v does not wrap the server's reply", fair, i+1, err)
			}
		}
	}
	l, err := newClient(t, rdb, dlock.WithoutScripts()).TryAcquire(ctx, "denied")
	if err != nil {
		t.Fatalf("script-free TryAcquire as the noscript user = %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Errorf("script-free Release = %v", err)
	}
}

// The features that need scripts are refused with WithoutScripts, by name.
func TestWithoutScriptsRefusesWhatNeedsScripts(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	for _, tc := range []struct {
		opts []dlock.Option
		want string
	}{
		{[]dlock.Option{dlock.WithReentrant(true)}, "WithReentrant(true)"},
	} {
		_, err := dlock.New(rdb, append(tc.opts, dlock.WithoutScripts())...)
		if !errors.Is(err, dlock.ErrInvalid) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "WithoutScripts()") {
			t.Errorf("New(%s, WithoutScripts()) = %v, want ErrInvalid naming both", tc.want, err)
		}
	}
	if _, err := dlock.NewRedlock([]redis.UniversalClient{rdb}, 0, dlock.WithoutScripts()); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("NewRedlock(WithoutScripts()) = %v, want ErrInvalid", err)
	}
	c := newClient(t, rdb, dlock.WithoutScripts(), dlock.WithUnfair(dlock.ExponentialBackoff(time.Millisecond, 10*time.Millisecond)), dlock.WithReplicaAck(0, 0))
	if _, err := c.Semaphore("sem", 2); !errors.Is(err, dlock.ErrInvalid) || !strings.Contains(err.Error(), "WithoutScripts()") {
		t.Errorf("Semaphore of a script-free Client = %v, want ErrInvalid naming WithoutScripts", err)
	}
	if _, err := c.Election("e"); !errors.Is(err, dlock.ErrInvalid) || !strings.Contains(err.Error(), "WithoutScripts()") {
		t.Errorf("Election of a script-free Client = %v, want ErrInvalid naming WithoutScripts", err)
	}
	if _, err := c.TryAcquire(t.Context(), ""); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("TryAcquire(\"\") = %v, want ErrInvalid", err)
	}
	if _, err := c.TryAcquire(t.Context(), "x", dlock.LeaseTTL(time.Millisecond)); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("TryAcquire with LeaseTTL(1ms) = %v, want ErrInvalid", err)
	}
}

// Many goroutines of several script-free Clients, as a user that may not
// run scripts, contend for one lock: never two inside at once.
func TestWithoutScriptsMutualExclusion(t *testing.T) {
	t.Parallel()
	s, direct := setup(t)
	rdb := noScriptUser(t, s, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	const workers, rounds = 12, 15
	var (
		inside atomic.Int32
		wg     sync.WaitGroup
		errs   = make(chan error, workers)
	)
	for w := range workers {
		c := newClient(t, rdb, dlock.WithoutScripts(), dlock.LeaseTTL(2*time.Second))
		if w%2 == 1 { // a Client of its own for half of them, others share one
			c = newClient(t, rdb, dlock.WithoutScripts(), dlock.LeaseTTL(2*time.Second),
				dlock.WithUnfair(dlock.ExponentialBackoff(time.Millisecond, 20*time.Millisecond)))
		}
		wg.Go(func() {
			for range rounds {
				if err := criticalSection(ctx, c, rdb, "excl", &inside); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if v, _ := direct.Get(ctx, violationsKey).Int(); v != 0 {
		t.Errorf("%d mutual exclusion violations", v)
	}
	if n, _ := direct.Get(ctx, counterKey).Int(); n != workers*rounds {
		t.Errorf("counter = %d, want %d", n, workers*rounds)
	}
	if n := liveKeys(ctx, direct, "dlock:{excl}"); n != 0 {
		t.Error("the lock key is left after every holder released")
	}
}

// Release and Extend act only while the lease holds the lock: after it ran
// out and another took the lock, they report the loss and leave the new
// holder's lock alone. A lease's marker records what became of it.
func TestWithoutScriptsCompareAndAct(t *testing.T) {
	t.Parallel()
	s, direct := setup(t)
	rdb := noScriptUser(t, s, nil)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.WithoutScripts(), dlock.LeaseTTL(200*time.Millisecond), dlock.WithAutoExtend(false))
	old, err := c.TryAcquire(ctx, "cas")
	if err != nil {
		t.Fatal(err)
	}
	var next *dlock.Lock
	if !waitFor(5*time.Second, func() bool {
		next, err = c.TryAcquire(ctx, "cas", dlock.LeaseTTL(10*time.Second))
		return err == nil
	}) {
		t.Fatalf("the lock was not free after its lease ran out: %v", err)
	}
	if err := old.Extend(ctx, 5*time.Second); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Extend of the expired lease = %v, want ErrNotHeld", err)
	}
	if err := old.Release(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Release of the expired lease = %v, want ErrNotHeld", err)
	}
	if got := holderOf(direct.Get(ctx, "dlock:{cas}").Val()); got != next.Token() {
		t.Errorf("the lock holds %q after the old lease's Extend and Release, want the next lease %q", got, next.Token())
	}
	if m := direct.Get(ctx, "dlock:{cas}:r:"+old.Token()).Val(); m != "0" {
		t.Errorf("the old lease's marker = %q, want \"0\" (ended without the lock)", m)
	}
	if err := next.Extend(ctx, 3*time.Second); err != nil {
		t.Errorf("Extend of the holder = %v", err)
	}
	if ttl, err := next.TTL(ctx); err != nil || ttl > 3*time.Second || ttl < time.Second {
		t.Errorf("TTL after Extend(3s) = %v, %v", ttl, err)
	}
	if err := next.Release(ctx); err != nil {
		t.Errorf("Release of the holder = %v", err)
	}
	if m := direct.Get(ctx, "dlock:{cas}:r:"+next.Token()).Val(); m != "1" {
		t.Errorf("the released lease's marker = %q, want \"1\"", m)
	}
	if n := liveKeys(ctx, direct, "dlock:{cas}"); n != 0 {
		t.Error("the lock key is left after Release")
	}
}

// Fences rise from holder to holder, also when the counter is lost: the
// server's clock floors them, as with scripts.
func TestWithoutScriptsFencesRise(t *testing.T) {
	t.Parallel()
	s, direct := setup(t)
	rdb := noScriptUser(t, s, nil)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.WithoutScripts())
	var last int64
	for i := range 6 {
		l, err := c.Acquire(ctx, "fence")
		if err != nil {
			t.Fatal(err)
		}
		f := fenceOf(t, l)
		if again := fenceOf(t, l); again != f {
			t.Errorf("second Fence = %d, want %d", again, f)
		}
		if f <= last {
			t.Errorf("holder %d: fence %d, not above the last %d", i, f, last)
		}
		last = f
		l.Release(ctx)
		if i%2 == 1 {
			direct.Del(ctx, "dlock:{fence}:fence") // the counter is lost
		}
	}
	if f, _ := direct.Get(ctx, "dlock:{fence}:fence").Int64(); f != last && f != 0 {
		t.Errorf("the counter holds %d, want the last fence %d", f, last)
	}
	// A counter ahead of the clock is counted up from.
	direct.Set(ctx, "dlock:{fence}:fence", last+1_000_000_000_000, time.Minute)
	l, err := c.TryAcquire(ctx, "fence")
	if err != nil {
		t.Fatal(err)
	}
	if f := fenceOf(t, l); f != last+1_000_000_000_001 {
		t.Errorf("fence after a counter ahead of the clock = %d, want %d", f, last+1_000_000_000_001)
	}
	l.Release(ctx)
	// A fence of a lease that no longer holds the lock is refused.
	l, err = c.TryAcquire(ctx, "fence")
	if err != nil {
		t.Fatal(err)
	}
	direct.Del(ctx, "dlock:{fence}")
	if _, err := l.Fence(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Fence of a lease whose key is gone = %v, want ErrNotHeld", err)
	}
	// A foreign value at the fence key is reported; the lease stays held.
	direct.Del(ctx, "dlock:{fence}:fence")
	direct.RPush(ctx, "dlock:{fence}:fence", "not a counter")
	l, err = c.TryAcquire(ctx, "fence")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Fence(ctx); !errors.Is(err, dlock.ErrWrongType) {
		t.Errorf("Fence with a list at the fence key = %v, want ErrWrongType", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Errorf("Release after the failed Fence = %v", err)
	}
}

// Inspect, List and ForceRelease work without scripts, on what scripting
// Clients wrote too; a lock key of another type is reported, not taken.
func TestWithoutScriptsInspectAndForce(t *testing.T) {
	t.Parallel()
	s, direct := setup(t)
	rdb := noScriptUser(t, s, nil)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.WithoutScripts(), dlock.HolderMeta("job 7"))
	l, err := c.TryAcquire(ctx, "insp")
	if err != nil {
		t.Fatal(err)
	}
	fenceOf(t, l)
	_, err = c.TryAcquire(ctx, "insp")
	if !errors.Is(err, dlock.ErrNotAcquired) || !strings.Contains(err.Error(), "job 7") {
		t.Errorf("TryAcquire of a held lock = %v, want ErrNotAcquired naming the holder's metadata", err)
	}
	info, err := c.Inspect(ctx, "insp")
	if err != nil || !info.Held || info.Token != l.Token() || info.Fence == 0 || info.TTL <= 0 || info.Meta != "job 7" {
		t.Errorf("Inspect = %+v, %v", info, err)
	}
	// A reentrant lock and a semaphore, written by a scripting Client.
	re := asOwner(t, newClient(t, direct, dlock.WithReentrant(true)), "o")
	if _, err := re.TryAcquire(ctx, "re"); err != nil {
		t.Fatal(err)
	}
	sem, err := newClient(t, direct).Semaphore("sem", 3)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sem.TryAcquire(ctx); err != nil {
		t.Fatal(err)
	}
	if info, err := c.Inspect(ctx, "re"); err != nil || len(info.Owners) != 1 || info.Owners[0].Holds != 1 {
		t.Errorf("Inspect of a reentrant lock = %+v, %v", info, err)
	}
	if info, err := c.Inspect(ctx, "sem"); err != nil || len(info.Permits) != 1 {
		t.Errorf("Inspect of a semaphore = %+v, %v", info, err)
	}
	if _, err := c.TryAcquire(ctx, "re"); !errors.Is(err, dlock.ErrWrongType) {
		t.Errorf("script-free TryAcquire of a reentrant lock's name = %v, want ErrWrongType", err)
	}
	infos, err := c.List(ctx, "*")
	if err != nil || len(infos) != 3 {
		t.Errorf("List = %d locks, %v; want 3", len(infos), err)
	}
	for _, name := range []string{"insp", "re", "sem"} {
		if ok, err := c.ForceRelease(ctx, name); !ok || err != nil {
			t.Errorf("ForceRelease(%s) = %v, %v", name, ok, err)
		}
		if n := liveKeys(ctx, direct, "dlock:{"+name+"}"); n != 0 {
			t.Errorf("ForceRelease(%s) left the key", name)
		}
	}
	if err := l.Release(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Release after ForceRelease = %v, want ErrNotHeld", err)
	}
	direct.HSet(ctx, "dlock:{hash}", "field", "value")
	if _, err := c.ForceRelease(ctx, "hash"); !errors.Is(err, dlock.ErrWrongType) {
		t.Errorf("ForceRelease of a foreign hash = %v, want ErrWrongType", err)
	}
	if ok, err := c.ForceRelease(ctx, "free"); ok || err != nil {
		t.Errorf("ForceRelease of a free lock = %v, %v", ok, err)
	}
}

// A waiter is woken by the release (pub/sub) and takes the lock; Do and
// AcquireAll work as with scripts.
func TestWithoutScriptsWaiting(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	rdb := noScriptUser(t, s, nil)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.WithoutScripts(), dlock.WithUnfair(dlock.ExponentialBackoff(time.Minute, time.Minute)))
	l, err := c.TryAcquire(ctx, "wait")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		got <- c.Do(ctx, "wait", func(context.Context, *dlock.Lock) error { return nil }, dlock.MaxWait(30*time.Second))
	}()
	if !waitFor(5*time.Second, listeningOnAll(t, "wait", rdb)) { // then it sleeps on its (one minute) backoff
		t.Fatal("the waiter never subscribed")
	}
	l.Release(ctx)
	select {
	case err := <-got:
		if err != nil {
			t.Errorf("Do of a waiter = %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the waiter was not woken by the release")
	}
	ml, err := c.AcquireAll(ctx, []string{"a", "b", "wait"})
	if err != nil {
		t.Fatal(err)
	}
	if err := ml.Release(ctx); err != nil {
		t.Errorf("MultiLock Release = %v", err)
	}
	if l, err := c.Acquire(ctx, "x", dlock.MaxWait(0)); err != nil {
		t.Error(err)
	} else {
		l.Release(ctx)
	}
}

// With WithReplicaAck, the script-free acquire and extend WAIT on their
// transaction's connection: with replication stalled, an acquisition
// fails cleanly and leaves nothing, and an extension reports the missing
// acknowledgement.
func TestWithoutScriptsReplicaAck(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts a replica")
	}
	leakcheck.Check(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	master, _, link := replicated(t, ctx)
	rdb := noScriptUser(t, master, nil)
	c := newClient(t, rdb, dlock.WithoutScripts(), dlock.WithAutoExtend(false), dlock.WithReplicaAck(1, 2*time.Second))
	l, err := c.TryAcquire(ctx, "acked")
	if err != nil {
		t.Fatalf("acked TryAcquire = %v", err)
	}
	if err := l.Extend(ctx, time.Minute); err != nil {
		t.Errorf("acked Extend = %v", err)
	}
	link.Stall()
	_, err = c.TryAcquire(ctx, "stalled")
	if !errors.Is(err, dlock.ErrReplicaAck) || !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("acked TryAcquire with replication stalled = %v, want ErrReplicaAck and ErrNotAcquired", err)
	}
	if !waitFor(3*time.Second, func() bool { return !exists(ctx, master, "dlock:{stalled}") }) {
		t.Error("an unacknowledged acquisition left its key on the master")
	}
	if err := l.Extend(ctx, time.Minute); !errors.Is(err, dlock.ErrReplicaAck) {
		t.Errorf("acked Extend with replication stalled = %v, want ErrReplicaAck", err)
	}
	link.Cut()
	if err := l.Release(ctx); err != nil {
		t.Errorf("Release = %v", err)
	}
}

// clusterWithoutScripts checks the script-free mode on the cluster of
// TestCluster, as a user that may not run scripts on any node: locks on
// every master, contention, fences, and a waiter woken over sharded pub/sub.
func clusterWithoutScripts(t *testing.T, nodes []*redistest.Server) {
	ctx := t.Context()
	var addrs []string
	for _, n := range nodes {
		if _, err := n.Do(ctx, "ACL", "SETUSER", "noscript", "on", ">pw", "~*", "&*", "+@all", "-@scripting"); err != nil {
			t.Fatal(err)
		}
		addrs = append(addrs, n.Addr())
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, Username: "noscript", Password: "pw"})
	t.Cleanup(func() { cc.Close() })
	c := newClient(t, cc, dlock.WithoutScripts(), dlock.LeaseTTL(2*time.Second))
	var last int64
	for i := range 30 {
		l, err := c.TryAcquire(ctx, fmt.Sprint("ns-", i))
		if err != nil {
			t.Fatalf("script-free TryAcquire on the cluster = %v", err)
		}
		if f := fenceOf(t, l); f <= 0 {
			t.Errorf("fence %d", f)
		}
		if err := l.Extend(ctx, 3*time.Second); err != nil {
			t.Errorf("Extend = %v", err)
		}
		// Inspect's one MULTI (its TIME has no key) goes to the master of
		// the lock's slot, whichever master that is.
		if info, err := c.Inspect(ctx, fmt.Sprint("ns-", i)); err != nil || info.Token != l.Token() || info.Fence <= 0 || info.TTL <= 0 {
			t.Errorf("Inspect on the cluster = %+v, %v; want the holder %q, its fence and lease", info, err, l.Token())
		}
		if err := l.Release(ctx); err != nil {
			t.Errorf("Release = %v", err)
		}
	}
	var (
		wg     sync.WaitGroup
		inside atomic.Int32
		bad    atomic.Int32
	)
	for range 6 {
		wg.Go(func() {
			for range 10 {
				l, err := c.Acquire(ctx, "ns-contended", dlock.MaxWait(30*time.Second))
				if err != nil {
					t.Errorf("Acquire = %v", err)
					return
				}
				if inside.Add(1) > 1 {
					bad.Add(1)
				}
				f, _ := l.Fence(ctx)
				if old := atomic.LoadInt64(&last); f <= old {
					bad.Add(1)
				}
				atomic.StoreInt64(&last, f)
				inside.Add(-1)
				l.Release(ctx)
			}
		})
	}
	wg.Wait()
	if n := bad.Load(); n != 0 {
		t.Errorf("%d overlaps or fences not above the last holder's", n)
	}
}

// The script-free mode's transactions against requests that arrive late,
// twice or not at all: a write to a watched key between a transaction's
// reads and its EXEC (what a request delayed in the network meets) must
// abort the EXEC, and a reply lost must leave nothing held by nobody.

// holdTx is a go-redis hook that holds the first transaction (MULTI …
// EXEC) with a command that match accepts, after the transaction's reads
// and before it is sent, until the test calls let; meanwhile the test
// writes what a concurrent client would.
type holdTx struct {
	match func(args []any) bool
	fn    func() // if set, called instead of holding the transaction
	once  sync.Once
	held  chan []any // the matching command's arguments
	go_   chan struct{}
}

func newHoldTx(match func(args []any) bool) *holdTx {
	return &holdTx{match: match, held: make(chan []any, 1), go_: make(chan struct{})}
}

func (h *holdTx) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *holdTx) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h *holdTx) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 0 && cmds[0].Name() == "multi" {
			for _, cmd := range cmds {
				if h.match(cmd.Args()) {
					h.once.Do(func() {
						if h.fn != nil {
							h.fn()
							return
						}
						h.held <- cmd.Args()
						<-h.go_
					})
					break
				}
			}
		}
		return next(ctx, cmds)
	}
}

// wait returns the held command's arguments.
func (h *holdTx) wait(t *testing.T) []any {
	t.Helper()
	select {
	case args := <-h.held:
		return args
	case <-time.After(10 * time.Second):
		t.Fatal("the transaction was never sent")
		return nil
	}
}

func (h *holdTx) let() { close(h.go_) }

// cmdIs reports whether args is the command name (any case) with the
// given arguments after it, as text.
func cmdIs(args []any, name string, want ...string) bool {
	if len(args) < 1+len(want) || !strings.EqualFold(fmt.Sprint(args[0]), name) {
		return false
	}
	for i, w := range want {
		if w != "" && fmt.Sprint(args[1+i]) != w {
			return false
		}
	}
	return true
}

// hooked returns a noscript user's client of s that holds a transaction as
// h says, and a script-free Client of it with opts.
func hooked(t *testing.T, s *redistest.Server, h *holdTx, opts ...dlock.Option) *dlock.Client {
	t.Helper()
	rdb := noScriptUser(t, s, nil)
	rdb.AddHook(h)
	return newClient(t, rdb, append(opts, dlock.WithoutScripts(), dlock.WithAutoExtend(false))...)
}

// The undo of a lease (it writes the lease's marker) that lands between
// the acquire's reads and its EXEC aborts the EXEC: the lock is not taken
// for nobody.
func TestWithoutScriptsUndoBeforeExecTakesNothing(t *testing.T) {
	t.Parallel()
	s, direct := setup(t)
	ctx := t.Context()
	h := newHoldTx(func(args []any) bool { return cmdIs(args, "set", "dlock:{undo}") })
	c := hooked(t, s, h)
	errc := make(chan error, 1)
	go func() {
		_, err := c.TryAcquire(ctx, "undo")
		errc <- err
	}()
	args := h.wait(t)
	token := fmt.Sprint(args[2])
	direct.Set(ctx, "dlock:{undo}:r:"+token, "0", time.Minute) // the lease's undo
	h.let()
	if err := <-errc; !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("TryAcquire whose lease was undone before its EXEC = %v, want ErrNotAcquired", err)
	}
	if n := liveKeys(ctx, direct, "dlock:{undo}"); n != 0 {
		t.Errorf("the lock key exists: %q, a lease held by nobody", direct.Get(ctx, "dlock:{undo}").Val())
	}
}

// A release whose lease ran out, and whose lock another lease took,
// between its reads and its EXEC deletes nothing: it reports the loss.
func TestWithoutScriptsLateReleaseKeepsTheNextHolder(t *testing.T) {
	t.Parallel()
	s, direct := setup(t)
	ctx := t.Context()
	h := newHoldTx(func(args []any) bool { return cmdIs(args, "del", "dlock:{late}") })
	c := hooked(t, s, h)
	l, err := c.TryAcquire(ctx, "late")
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- l.Release(ctx) }()
	h.wait(t)
	direct.Set(ctx, "dlock:{late}", "next-lease", 10*time.Second) // expired, taken by another
	h.let()
	if err := <-errc; !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Release after the lock passed to another before its EXEC = %v, want ErrNotHeld", err)
	}
	if v := direct.Get(ctx, "dlock:{late}").Val(); v != "next-lease" {
		t.Errorf("the lock holds %q, want the next lease's (the late release deleted it)", v)
	}
	if m := direct.Get(ctx, "dlock:{late}:r:"+l.Token()).Val(); m != "0" {
		t.Errorf("the lease's marker = %q, want \"0\"", m)
	}
}

// An older extension that reads before a newer one writes, and would act
// after it, must not cut short what the newer one set; nor may its Lock
// claim the lease for its own terms: the newer extension, which it did not
// send (a Lock's own are one at a time), came from a Lock that resumed it.
func TestWithoutScriptsOlderExtendCannotCutNewer(t *testing.T) {
	t.Parallel()
	s, direct := setup(t)
	ctx := t.Context()
	h := newHoldTx(func(args []any) bool { return cmdIs(args, "pexpire", "dlock:{ext}") })
	c := hooked(t, s, h)
	l, err := c.TryAcquire(ctx, "ext")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	errc := make(chan error, 1)
	go func() { errc <- l.Extend(ctx, 500*time.Millisecond) }()
	h.wait(t)
	// A newer extension of the lease (a higher sequence number) lands first.
	direct.Set(ctx, "dlock:{ext}:r:"+l.Token(), "e1000", 30*time.Second)
	direct.PExpire(ctx, "dlock:{ext}", 30*time.Second)
	h.let()
	if err := <-errc; !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("the older Extend = %v, want ErrNotHeld (superseded by another Lock's extension)", err)
	}
	if left := direct.PTTL(ctx, "dlock:{ext}").Val(); left < 20*time.Second {
		t.Errorf("the lock's PTTL is %v after the older Extend(500ms) landed, want the newer 30s kept", left)
	}
}

// A fence issued by someone else between a fence's reads and its EXEC
// makes it read again and issue one above.
func TestWithoutScriptsFenceRaceStaysMonotonic(t *testing.T) {
	t.Parallel()
	s, direct := setup(t)
	ctx := t.Context()
	h := newHoldTx(func(args []any) bool { return cmdIs(args, "set", "dlock:{fr}:fence") })
	c := hooked(t, s, h)
	l, err := c.TryAcquire(ctx, "fr")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	got := make(chan int64, 1)
	go func() {
		f, _ := l.Fence(ctx)
		got <- f
	}()
	h.wait(t)
	const other = int64(1) << 60
	direct.Set(ctx, "dlock:{fr}:fence", other, time.Minute)
	h.let()
	if f := <-got; f != other+1 {
		t.Errorf("fence after another was issued before the EXEC = %d, want %d", f, other+1)
	}
}

// proxiedNoScript starts a TCP server behind a proxy and returns the
// proxy, a noscript user's client through it, and a client straight to the
// server.
func proxiedNoScript(t *testing.T, retries int, readTimeout time.Duration) (*redistest.Proxy, *redis.Client, *redis.Client) {
	t.Helper()
	s := redistest.Start(t, redistest.TCP())
	p := redistest.NewProxy(t, s.Addr())
	rdb := noScriptUser(t, s, &redis.Options{Addr: p.Addr(), MaxRetries: retries, ReadTimeout: readTimeout})
	return p, rdb, s.Client(t)
}

// A request delayed in the network past its caller's timeout lands after
// the caller's undo, with or without go-redis's retries: it takes nothing.
func TestWithoutScriptsDelayedAcquireTakesNothing(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a long fault/timing scenario; run without -short")
	}
	for _, retries := range []int{-1, 3} {
		p, rdb, direct := proxiedNoScript(t, retries, 300*time.Millisecond)
		c := newClient(t, rdb, dlock.WithoutScripts(), dlock.LeaseTTL(5*time.Second))
		for _, delayAt := range []time.Duration{0, 3 * time.Millisecond} {
			name := fmt.Sprint("delayed-", retries, "-", delayAt)
			start := time.Now()
			done := make(chan struct{})
			if delayAt == 0 {
				p.Delay(time.Second, 0)
			}
			go func() {
				defer close(done)
				if delayAt > 0 { // later in the transaction: its reads pass
					time.Sleep(delayAt)
					p.Delay(time.Second, 0)
				}
				time.Sleep(100 * time.Millisecond)
				p.Delay(0, 0) // the undo goes straight through
			}()
			l, err := c.TryAcquire(t.Context(), name)
			<-done
			if l != nil {
				if err := l.Release(t.Context()); err != nil {
					t.Errorf("%s: Release = %v", name, err)
				}
			} else if !errors.Is(err, dlock.ErrNotAcquired) && err == nil {
				t.Errorf("%s: TryAcquire = nil Lock, nil error", name)
			}
			time.Sleep(time.Until(start.Add(1500 * time.Millisecond))) // what was delayed has landed
			if n := liveKeys(t.Context(), direct, "dlock:{"+name+"}"); n != 0 {
				t.Errorf("%s: the lock key exists after the delayed request landed: a lease held by nobody", name)
			}
		}
	}
}

// An acquire or release whose reply is lost (the transaction ran; go-redis
// does not send a transaction's commands again on another connection)
// leaves nothing held: the acquire's undo ends the lease, and a release
// tried again reports the release.
func TestWithoutScriptsLostRepliesLeaveNothing(t *testing.T) {
	t.Parallel()
	p, rdb, direct := proxiedNoScript(t, 3, 5*time.Second) // the cut, not a timeout, ends the wait
	key := "dlock:{lost}"
	// lostReply runs op with the replies stalled from its transaction on
	// (its reads answered), and cuts the connection once cond shows that
	// the transaction ran.
	lostReply := func(cmd string, op func() error, cond func() bool) error {
		h := newHoldTx(func(args []any) bool { return cmdIs(args, cmd, key) })
		h.fn = p.StallReplies
		rdb.AddHook(h)
		errc := make(chan error, 1)
		go func() { errc <- op() }()
		if !waitFor(5*time.Second, cond) {
			t.Errorf("the %s transaction never ran", cmd)
		}
		p.Cut()
		select {
		case err := <-errc:
			return err
		case <-time.After(10 * time.Second):
			t.Fatal("the call did not return 10s after the cut")
			return nil
		}
	}
	c := newClient(t, rdb, dlock.WithoutScripts(), dlock.WithAutoExtend(false))
	var l *dlock.Lock
	err := lostReply("set", func() (err error) {
		l, err = c.TryAcquire(t.Context(), "lost")
		return err
	}, func() bool { return liveKeys(t.Context(), direct, key) == 1 })
	if err == nil {
		t.Fatal("TryAcquire whose EXEC's reply was lost succeeded: was the transaction sent again?")
	}
	if !waitFor(5*time.Second, func() bool { return liveKeys(t.Context(), direct, key) == 0 }) {
		t.Errorf("the lock key is left after the acquire's reply was lost (TryAcquire: %v)", err)
	}
	c = newClient(t, rdb, dlock.WithoutScripts(), dlock.WithAutoExtend(false))
	if l, err = c.TryAcquire(t.Context(), "lost"); err != nil {
		t.Fatal(err)
	}
	err = lostReply("del", func() error { return l.Release(t.Context()) },
		func() bool { return liveKeys(t.Context(), direct, key) == 0 })
	if err == nil {
		t.Error("Release whose EXEC's reply was lost succeeded: was the transaction sent again?")
	}
	if err := l.Release(t.Context()); err != nil {
		t.Errorf("Release tried again after its reply was lost = %v, want nil (it was held until then)", err)
	}
}

// A foreign value at a name's fence key reads as no fence, as it does with
// scripts: Inspect of the name still tells its holder, and List still lists
// every name.
func TestNoScriptsInspectReadsAForeignFenceKeyAsNoFence(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.WithAutoExtend(false), dlock.WithoutScripts())
	scripted := newClient(t, rdb, dlock.WithAutoExtend(false))
	l, err := c.TryAcquire(ctx, "nsf-a")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if _, err := c.TryAcquire(ctx, "nsf-b"); err != nil {
		t.Fatal(err)
	}
	rdb.HSet(ctx, l.Key()+":fence", "x", "1")
	for what, c := range map[string]*dlock.Client{"without scripts": c, "with scripts": scripted} {
		if info, err := c.Inspect(ctx, "nsf-a"); err != nil || info.Token != l.Token() || info.Fence != 0 {
			t.Errorf("%s: Inspect = %+v, %v, want the holder %q and fence 0", what, info, err, l.Token())
		}
		if infos, err := c.List(ctx, "nsf-*"); err != nil || len(infos) != 2 {
			t.Errorf("%s: List = %d names, %v, want 2", what, len(infos), err)
		}
	}
}

// A script-free acquisition of a name held as another kind names what the
// key holds, as one with scripts does, not only Redis's WRONGTYPE words.
func TestNoScriptsAcquireOfAnotherKindNamesWhatTheKeyHolds(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.WithAutoExtend(false), dlock.WithoutScripts())
	s, err := newClient(t, rdb).Semaphore("nsk-sem", 2)
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Release(ctx)
	rdb.SAdd(ctx, "dlock:{nsk-set}", "x")
	for name, want := range map[string]string{"nsk-sem": "a semaphore", "nsk-set": "a set"} {
		_, err := c.TryAcquire(ctx, name)
		if !errors.Is(err, dlock.ErrWrongType) || !strings.Contains(err.Error(), "holds "+want) {
			t.Errorf("script-free TryAcquire of %s = %v, want ErrWrongType naming %s", name, err, want)
		}
	}
}

// churnHook runs fn before every MULTI … EXEC whose commands match.
type churnHook struct {
	match func(args []any) bool
	fn    func(ctx context.Context)
	runs  atomic.Int32
}

func (h *churnHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *churnHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h *churnHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 0 && cmds[0].Name() == "multi" && slices.ContainsFunc(cmds, func(c redis.Cmder) bool { return h.match(c.Args()) }) {
			h.runs.Add(1)
			h.fn(ctx)
		}
		return next(ctx, cmds)
	}
}

// A lock in heavy churn: every time a script-free attempt has read it
// free, another lease takes it and lets it go again before the attempt's
// EXEC. The attempt takes the free lock with SET NX, as acquire.lua would
// at that moment; it does not fail for writes to a key it never needed
// unchanged (the transaction aborted try after try), nor does a wait end
// with that error.
func TestWithoutScriptsAcquireInChurnTakesTheFreeLock(t *testing.T) {
	t.Parallel()
	s, direct := setup(t)
	ctx := t.Context()
	h := &churnHook{
		match: func(args []any) bool { return cmdIs(args, "set", "dlock:{churn}") },
		fn: func(ctx context.Context) { // another lease's whole hold
			direct.Set(ctx, "dlock:{churn}", "another-lease", time.Minute)
			direct.Del(ctx, "dlock:{churn}")
		},
	}
	rdb := noScriptUser(t, s, nil)
	rdb.AddHook(h)
	c := newClient(t, rdb, dlock.WithoutScripts(), dlock.WithAutoExtend(false))
	for _, op := range []struct {
		name    string
		acquire func() (*dlock.Lock, error)
	}{
		{"TryAcquire", func() (*dlock.Lock, error) { return c.TryAcquire(ctx, "churn") }},
		{"Acquire with MaxWait", func() (*dlock.Lock, error) { return c.Acquire(ctx, "churn", dlock.MaxWait(2*time.Second)) }},
	} {
		h.runs.Store(0)
		l, err := op.acquire()
		if err != nil {
			t.Errorf("%s of a lock taken and let go before each EXEC = %v after %d tries, want the lock", op.name, err, h.runs.Load())
			continue
		}
		if got := holderOf(direct.Get(ctx, "dlock:{churn}").Val()); got != l.Token() {
			t.Errorf("%s: the lock holds %q, want the lease %q", op.name, got, l.Token())
		}
		if err := l.Release(ctx); err != nil {
			t.Errorf("%s: Release = %v", op.name, err)
		}
	}
}

// failingPipelines fails, unsent, with err every pipeline of the kind
// named in on ("multi": a MULTI … EXEC; "reads": any other), as a hook of
// the Redis client may (a circuit breaker that opened): the hook's error,
// none on the commands.
type failingPipelines struct {
	on  atomic.Value // string
	err error
}

func (h *failingPipelines) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *failingPipelines) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h *failingPipelines) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		kind := "reads"
		if len(cmds) > 0 && cmds[0].Name() == "multi" {
			kind = "multi"
		}
		if h.on.Load() == kind {
			return h.err
		}
		return next(ctx, cmds)
	}
}

// A script-free operation whose reads or whose EXEC a hook of the Redis
// client fails before they are sent fails: no lock is granted, released,
// extended, fenced, inspected or forced on reads or writes that never
// happened.
func TestWithoutScriptsPipelineFailedUnsentFailsTheOperation(t *testing.T) {
	t.Parallel()
	s, direct := setup(t)
	ctx := t.Context()
	h := &failingPipelines{err: errors.New("circuit open")}
	h.on.Store("")
	rdb := noScriptUser(t, s, nil)
	rdb.AddHook(h)
	c := newClient(t, rdb, dlock.WithoutScripts(), dlock.WithAutoExtend(false), dlock.LeaseTTL(10*time.Second))
	for _, failed := range []string{"reads", "multi"} {
		h.on.Store(failed)
		if l, err := c.TryAcquire(ctx, "unsent"); !errors.Is(err, h.err) {
			t.Errorf("%s failed: TryAcquire = %v (a Lock: %v), want the hook's error", failed, err, l != nil)
		}
		h.on.Store("")
		if !waitFor(5*time.Second, func() bool { return liveKeys(ctx, direct, "dlock:{unsent}") == 0 }) {
			t.Fatalf("%s failed: the lock key is left after the failed attempt", failed)
		}
		l, err := c.TryAcquire(ctx, "unsent")
		if err != nil {
			t.Fatal(err)
		}
		h.on.Store(failed)
		ectx, cancel := context.WithTimeout(ctx, 200*time.Millisecond) // (Extend tries again until its ctx ends)
		if err := l.Extend(ectx, time.Minute); err == nil {
			t.Errorf("%s failed: Extend = nil, want an error", failed)
		}
		cancel()
		ectx, cancel = context.WithTimeout(ctx, 200*time.Millisecond)
		if err := l.Extend(ectx, 5*time.Second); err == nil || errors.Is(err, dlock.ErrNotHeld) { // (shorter: numbered, a GET each)
			t.Errorf("%s failed: a numbered Extend = %v, want an error, not ErrNotHeld", failed, err)
		}
		cancel()
		if left := direct.PTTL(ctx, l.Key()).Val(); left > 10*time.Second {
			t.Errorf("%s failed: the lock's PTTL is %v, want at most the lease's 10s", failed, left)
		}
		if f, err := l.Fence(ctx); !errors.Is(err, h.err) {
			t.Errorf("%s failed: Fence = %d, %v; want the hook's error", failed, f, err)
		}
		if err := l.Release(ctx); !errors.Is(err, h.err) {
			t.Errorf("%s failed: Release = %v, want the hook's error", failed, err)
		}
		if info, err := c.Inspect(ctx, "unsent"); failed == "multi" && !errors.Is(err, h.err) { // (its reads are a MULTI)
			t.Errorf("%s failed: Inspect = %+v, %v; want the hook's error", failed, info, err)
		}
		if ok, err := c.ForceRelease(ctx, "unsent"); !errors.Is(err, h.err) {
			t.Errorf("%s failed: ForceRelease = %v, %v; want the hook's error", failed, ok, err)
		}
		if got := holderOf(direct.Get(ctx, l.Key()).Val()); got != l.Token() {
			t.Errorf("%s failed: the lock holds %q, want the lease %q still", failed, got, l.Token())
		}
		h.on.Store("")
		if err := l.Release(ctx); err != nil {
			t.Errorf("%s failed: Release once the hook passes = %v", failed, err)
		}
	}
}

// Another program's values where a lease's keys are end a script-free
// Lock's Release, Extend and Fence as they end a scripting one's: a lock
// key replaced with a hash or a list is a lost lease, but for a numbered
// extension, which reads it with GET (WRONGTYPE), whatever the marker
// holds; a marker of another type fails only a numbered
// extension of a lease that still holds the lock (extend.lua reads the
// marker only then): one whose lock is gone or another's is not held.
func TestWithoutScriptsForeignValuesEndAsWithScripts(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	clients := map[string]*dlock.Client{
		"without scripts": newClient(t, rdb, dlock.WithAutoExtend(false), dlock.WithoutScripts()),
		"with scripts":    newClient(t, rdb, dlock.WithAutoExtend(false)),
	}
	ops := map[string]func(*dlock.Lock) error{
		"Extend (unnumbered)": func(l *dlock.Lock) error { return l.Extend(ctx, 20*time.Second) },
		"Extend (numbered)":   func(l *dlock.Lock) error { return l.Extend(ctx, 2*time.Second) }, // shorter than the lease
		"Release":             func(l *dlock.Lock) error { return l.Release(ctx) },
		"Fence": func(l *dlock.Lock) error {
			_, err := l.Fence(ctx)
			return err
		},
	}
	for i, tc := range []struct {
		spoiled         string
		lock            func(key string) // the lock key's new value (after a DEL); nil: kept
		marker          bool             // a hash at the lease's marker
		numbered, other error            // the numbered extension's outcome, the others'
	}{
		{"a hash at the lock key", func(key string) { rdb.HSet(ctx, key, "field", "value") }, false, dlock.ErrWrongType, dlock.ErrNotHeld},
		{"a list at the lock key", func(key string) { rdb.RPush(ctx, key, "x") }, false, dlock.ErrWrongType, dlock.ErrNotHeld},
		{"a hash at the marker", nil, true, dlock.ErrWrongType, nil},
		{"a hash at the lock key and at the marker", func(key string) { rdb.HSet(ctx, key, "field", "value") }, true, dlock.ErrWrongType, dlock.ErrNotHeld},
		{"the lock gone, a hash at the marker", func(string) {}, true, dlock.ErrNotHeld, dlock.ErrNotHeld},
		{"the lock another's, a hash at the marker", func(key string) { rdb.Set(ctx, key, "another-lease", time.Minute) }, true, dlock.ErrNotHeld, dlock.ErrNotHeld},
	} {
		for op, do := range ops {
			want := tc.other
			if op == "Extend (numbered)" {
				want = tc.numbered
			}
			for mode, c := range clients {
				// A reply after the lease's validity ran out makes the
				// loss the answer, in either mode: a case whose validity
				// ran out during the call runs again, on a new lease, so
				// that the answer compared is given within it.
				for try := 1; ; try++ {
					l, err := c.TryAcquire(ctx, fmt.Sprintf("foreign-%d-%s-%s-%d", i, op, mode, try), dlock.LeaseTTL(10*time.Second))
					if err != nil {
						t.Fatal(err)
					}
					if tc.lock != nil {
						rdb.Del(ctx, l.Key())
						tc.lock(l.Key())
					}
					if tc.marker {
						rdb.HSet(ctx, l.Key()+":r:"+l.Token(), "field", "value")
					}
					err = do(l)
					if time.Now().Before(l.ValidUntil()) {
						if !errors.Is(err, want) {
							t.Errorf("%s, %s %s = %v, want %v", tc.spoiled, mode, op, err, want)
						}
						break
					}
					if try == 5 {
						t.Fatalf("%s, %s %s: the lease's validity ran out during each of %d calls (the last: %v)", tc.spoiled, mode, op, try, err)
					}
					t.Logf("%s, %s %s: the lease's validity ran out during the call (%v): again", tc.spoiled, mode, op, err)
				}
			}
		}
	}
}
