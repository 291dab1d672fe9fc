package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
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
	time.Sleep(100 * time.Millisecond) // the waiter has tried and sleeps on its (one minute) backoff
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
	if testing.Short() {
		t.Skip("starts a replica")
	}
	leakcheck.Check(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	fast := redistest.Args("--repl-diskless-sync-delay", "0")
	master := redistest.Start(t, redistest.TCP(), fast)
	link := redistest.NewProxy(t, master.Addr()) // replication crosses it
	replica := redistest.Start(t, redistest.TCP(), fast, redistest.Args("--replicaof", "127.0.0.1", strconv.Itoa(link.Port())))
	if !replicaAcks(ctx, master, replica) {
		t.Fatal("the replica never synced")
	}
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
