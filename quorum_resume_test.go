package dlock_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/redistest"
)

// proxiedNode returns a client (no retries, readTimeout: 0 for the
// default) to srv through a new proxy, and the proxy.
func proxiedNode(t *testing.T, srv *redistest.Server, readTimeout time.Duration) (*redis.Client, *redistest.Proxy) {
	t.Helper()
	p := redistest.NewProxy(t, srv.Addr())
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, DialTimeout: 500 * time.Millisecond, ReadTimeout: readTimeout})
	t.Cleanup(func() { c.Close() })
	if err := c.Ping(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	return c, p
}

// evalsFailing returns a client (no retries) to srv whose script calls
// fail unsent while missing runs.
func evalsFailing(t *testing.T, srv *redistest.Server) (*redis.Client, *missing) {
	m := new(missing)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	c.AddHook(failEvals{&m.down, &m.refused})
	t.Cleanup(func() { c.Close() })
	return c, m
}

// missing fails a node's script calls (see evalsFailing).
type missing struct {
	down    atomic.Bool
	refused atomic.Int64
}

// during runs f, a Resume, with the node's script calls failing, and
// keeps them failing until one was refused: a quorum's call to a node
// runs on even once the others settled the outcome, and on a loaded
// machine may start after f returned (its extension would then land).
func (m *missing) during(t *testing.T, f func()) {
	t.Helper()
	m.down.Store(true)
	defer m.down.Store(false)
	n := m.refused.Load()
	f()
	if !waitFor(5*time.Second, func() bool { return m.refused.Load() > n }) {
		t.Fatal("the node missed no script call of the resume")
	}
}

// takenWithin tries, for up to d (0: once), to take name with a new
// Client over nodes, and gives it back; it returns the last try's error.
func takenWithin(t *testing.T, nodes []redis.UniversalClient, name string, d time.Duration) error {
	c := newRedlock(t, nodes, 200*time.Millisecond, dlock.LeaseTTL(10*time.Second))
	var err error
	waitFor(d, func() bool {
		var l *dlock.Lock
		if l, err = c.TryAcquire(t.Context(), name); err == nil {
			l.Release(t.Context())
		}
		return err == nil
	})
	return err
}

// numberedEverywhere extends l (over the quorum of direct) to a shorter
// lease time, a numbered extension, until every node records the same one
// (the extension returns once a majority applied it; on a loaded machine
// a node's call may fail to dial): it returns that marker, "e<n>".
func numberedEverywhere(t *testing.T, direct []redis.UniversalClient, l *dlock.Lock) string {
	t.Helper()
	ctx := t.Context()
	var ms []string
	same := func() bool {
		ms = nil
		for _, n := range direct {
			ms = append(ms, n.Get(ctx, l.Key()+":r:"+l.Token()).Val())
		}
		return strings.HasPrefix(ms[0], "e") && !slices.ContainsFunc(ms, func(m string) bool { return m != ms[0] })
	}
	for range 5 {
		if err := l.Extend(ctx, 8*time.Second); err != nil {
			t.Fatal(err)
		}
		if waitFor(time.Second, same) {
			return ms[0]
		}
	}
	t.Fatalf("the nodes' markers after five numbered extensions: %q", ms)
	return ""
}

// resumedMissingNode2 takes name on the quorum of srvs (direct: clients
// to each) with a Lock that records a numbered extension on every node,
// and resumes its lease with a second Client over nodes 0, 1 (node1: a
// client to it) and 2, whose script calls fail unsent meanwhile: node 2
// misses the resume, and still records the first Lock's extension. Both
// Clients have the options more too. It returns both Locks.
func resumedMissingNode2(t *testing.T, srvs []*redistest.Server, direct []redis.UniversalClient, node1 redis.UniversalClient, name string, more ...dlock.Option) (first, resumed *dlock.Lock) {
	t.Helper()
	ctx := t.Context()
	missed, node2 := evalsFailing(t, srvs[2])
	opts := append([]dlock.Option{dlock.LeaseTTL(10 * time.Second), dlock.WithAutoExtend(false)}, more...)
	first = firstLease(t, newRedlock(t, direct, 200*time.Millisecond, opts...), name)
	mark := numberedEverywhere(t, direct, first)
	resumer := newRedlock(t, []redis.UniversalClient{direct[0], node1, missed}, 200*time.Millisecond, opts...)
	var err error
	node2.during(t, func() { resumed, err = resumer.TryAcquire(ctx, name, dlock.Resume(first.Token())) })
	if err != nil {
		t.Fatalf("resume on nodes 0 and 1 = %v", err)
	}
	if m := direct[2].Get(ctx, first.Key()+":r:"+first.Token()).Val(); m != mark {
		t.Fatalf("node 2's marker after the resume = %q, want the first Lock's %q", m, mark)
	}
	return first, resumed
}

// A resumed Lock whose resume missed node 2 (which still records the
// first Lock's numbered extension) releases the lock on nodes 0 and 1,
// node 1's reply coming after the node timeout: the release was carried
// out by a majority and no other Lock resumed the lease, so Release
// reports no error: the first Lock's marker on node 2 (no resumer id)
// does not stop the release there (drives in lib.lua).
func TestRedlockResumedReleaseWithALaggardAndASlowReplyIsReleased(t *testing.T) {
	t.Parallel()
	srvs, direct := startQuorum(t, 3)
	ctx := t.Context()
	slow, p1 := proxiedNode(t, srvs[1], 0)
	_, r := resumedMissingNode2(t, srvs, direct, slow, "laggard-slow")

	p1.Delay(0, time.Second) // node 1 runs the release, its reply comes after the node timeout
	err := r.Release(ctx)
	if !waitFor(5*time.Second, func() bool { return direct[1].Exists(ctx, r.Key()).Val() == 0 }) {
		t.Fatal("node 1 never ran the release")
	}
	if direct[0].Exists(ctx, r.Key()).Val() != 0 {
		t.Fatal("node 0 still holds the lock after the release")
	}
	if err != nil {
		t.Errorf("Release of the resumed Lock, carried out on nodes 0 and 1 (node 2 missed the resume, node 1 answered late) = %v; want nil: no other Lock resumed the lease", err)
	}
}

// A resumed Lock's Release that succeeds also frees node 2, which missed
// the resume and still holds the lease's token: with node 0 down (a
// minority), another Client takes the lock at once, not once the first
// Lock's lease has run out on node 2.
func TestRedlockResumedReleaseFreesTheNodeItsResumeMissed(t *testing.T) {
	t.Parallel()
	srvs, direct := startQuorum(t, 3)
	ctx := t.Context()
	_, r := resumedMissingNode2(t, srvs, direct, direct[1], "laggard-left")
	if err := r.Release(ctx); err != nil {
		t.Fatalf("Release of the resumed Lock = %v", err)
	}
	srvs[0].Kill()
	if err := takenWithin(t, direct, "laggard-left", 0); err != nil {
		t.Errorf("TryAcquire after the release, node 0 down = %v; node 2 still holds the released lease's token for %v", err, direct[2].PTTL(ctx, r.Key()).Val())
	}
}

// The first Lock's Release, after another Lock resumed its lease on
// nodes 0 and 1 (node 2 missed the resume), with node 1's reply coming
// after the node timeout, deletes the lease only on node 2: it reports
// the lease resumed elsewhere (ErrNotHeld), not released, and the resumed
// Lock still holds the lock on a majority.
func TestRedlockSupersededReleaseWithASlowNodeIsNotReleased(t *testing.T) {
	t.Parallel()
	srvs, direct := startQuorum(t, 3)
	ctx := t.Context()
	slow, p1 := proxiedNode(t, srvs[1], 0)
	missed, node2 := evalsFailing(t, srvs[2])
	opts := []dlock.Option{dlock.LeaseTTL(10 * time.Second), dlock.WithAutoExtend(false)}
	// On a loaded machine an attempt before the one that succeeded may
	// hold node 1 until its undo lands there: take the lock again until
	// every node holds the first Lock's lease.
	holder := newRedlock(t, []redis.UniversalClient{direct[0], slow, direct[2]}, 200*time.Millisecond, opts...)
	var first *dlock.Lock
	everywhere := func() bool {
		return !slices.ContainsFunc(direct, func(n redis.UniversalClient) bool {
			return !strings.HasPrefix(n.Get(ctx, first.Key()).Val(), first.Token())
		})
	}
	for i := 0; first == nil || !waitFor(time.Second, everywhere); i++ {
		if first != nil {
			first.Release(ctx)
		}
		if i == 5 {
			t.Fatal("five first Locks, none of them on every node")
		}
		first = firstLease(t, holder, "superseded-slow")
	}
	var r *dlock.Lock
	var err error
	node2.during(t, func() { // node 2 misses the resume
		r, err = newRedlock(t, []redis.UniversalClient{direct[0], direct[1], missed}, 200*time.Millisecond, opts...).TryAcquire(ctx, "superseded-slow", dlock.Resume(first.Token()))
	})
	if err != nil {
		t.Fatalf("resume on nodes 0 and 1 = %v", err)
	}

	p1.Delay(0, time.Second)
	err = first.Release(ctx)
	if !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("the superseded Lock's Release (node 0: resumed, node 1: late, node 2: missed the resume) = %v; want ErrNotHeld", err)
	}
	if err := r.Extend(ctx, 10*time.Second); err != nil {
		t.Errorf("the resumed Lock's Extend after the superseded Lock's Release = %v", err)
	}
	if takenWithin(t, direct, "superseded-slow", 0) == nil {
		t.Error("another Client took the lock the resumed Lock holds on a majority")
	}
	if err := r.Release(ctx); err != nil {
		t.Errorf("the resumed Lock's Release = %v", err)
	}
}

// slowEvals delays the replies of a go-redis client's script calls by d
// while d > 0: the scripts run at once, their callers hear of it late.
type slowEvals struct{ d *atomic.Int64 }

func (h slowEvals) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h slowEvals) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.wait([]redis.Cmder{cmd})
		return err
	}
}
func (h slowEvals) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		h.wait(cmds)
		return err
	}
}
func (h slowEvals) wait(cmds []redis.Cmder) {
	for _, cmd := range cmds {
		if strings.HasPrefix(cmd.Name(), "eval") {
			time.Sleep(time.Duration(h.d.Load()))
			return
		}
	}
}

// A resume whose extension nodes 0 and 1 answer only after the node
// timeout fails (a QuorumError), though the extension ran there: the
// first Lock is then superseded on every node, and its Release sends
// nothing. The lease must not be left held by nobody for the resume's
// lease time: another Client takes the lock once the first Lock's lease
// time has passed, at the latest: the resume's extension, whose outcome
// is unknown, is undone.
func TestRedlockFailedResumeLeavesNoLeaseDrivenByNobody(t *testing.T) {
	t.Parallel()
	srvs, direct := startQuorum(t, 3)
	ctx := t.Context()
	var d atomic.Int64
	var nodes []redis.UniversalClient
	for i, s := range srvs {
		if i == 2 {
			nodes = append(nodes, direct[2])
			continue
		}
		c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
		c.AddHook(slowEvals{&d})
		t.Cleanup(func() { c.Close() })
		nodes = append(nodes, c)
	}
	first := firstLease(t, newRedlock(t, direct, 200*time.Millisecond, dlock.LeaseTTL(2*time.Second), dlock.WithAutoExtend(false)), "orphan")
	resumer := newRedlock(t, nodes, 200*time.Millisecond, dlock.LeaseTTL(30*time.Second), dlock.WithAutoExtend(false))
	d.Store(int64(time.Second))
	if r, err := resumer.TryAcquire(ctx, "orphan", dlock.Resume(first.Token())); err == nil {
		r.Release(ctx)
		t.Fatal("the resume, answered in time by node 2 alone, succeeded")
	} else {
		t.Logf("resume: %v", err)
	}
	d.Store(0)
	t.Logf("first Lock's Release: %v", first.Release(ctx))
	if err := takenWithin(t, direct, "orphan", 5*time.Second); err != nil {
		t.Errorf("TryAcquire 5s after the failed resume and the first Lock's Release = %v; the lease is held, by no Lock, for %v more", err, direct[0].PTTL(ctx, first.Key()).Val())
	}
}

// A failed attempt whose requests to nodes 0 and 1 are held in the
// network past the Redis client's read timeout (node 2 granted it alone)
// leaves no lease once they land: the calls ended without a reply, so
// they may have left a grant, and the undo, which waits for each node's
// call, is sent to both.
func TestRedlockAttemptHeldPastTheReadTimeoutLeavesNoLease(t *testing.T) {
	t.Parallel()
	srvs, direct := startQuorum(t, 3)
	ctx := t.Context()
	n0, p0 := proxiedNode(t, srvs[0], 300*time.Millisecond)
	n1, p1 := proxiedNode(t, srvs[1], 300*time.Millisecond)
	c := newRedlock(t, []redis.UniversalClient{n0, n1, direct[2]}, 100*time.Millisecond, dlock.LeaseTTL(5*time.Second))
	if err := firstLease(t, c, "held-warm").Release(ctx); err != nil { // (the scripts loaded)
		t.Fatal(err)
	}
	p0.Delay(time.Second, 0)
	p1.Delay(time.Second, 0)
	_, err := c.TryAcquire(ctx, "held")
	p0.Delay(0, 0)
	p1.Delay(0, 0)
	if !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire with nodes 0 and 1 held = %v, want ErrNotAcquired", err)
	}
	if !waitFor(5*time.Second, func() bool { return p0.HeldRequests() == 0 && p1.HeldRequests() == 0 }) {
		t.Fatal("the held requests never landed")
	}
	key := "dlock:{held}"
	if !waitFor(3*time.Second, func() bool { n, _ := keyOnNodes(ctx, toClients(direct), key); return n == 0 }) {
		_, vals := keyOnNodes(ctx, toClients(direct), key)
		t.Errorf("the lock on the nodes 3s after the held requests landed: %q; want none", vals)
	}
	if err := takenWithin(t, direct, "held", 0); err != nil {
		t.Errorf("another Client's TryAcquire after the failed attempt = %v", err)
	}
}
