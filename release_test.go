package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlockio/dlock"
)

// go-redis re-sends a command whose reply was lost. A reentrant acquire that
// runs twice must count one hold, and a release that runs twice must
// report the release, not a loss.
func TestReSentRequestsAreIdempotent(t *testing.T) {
	t.Parallel()
	p, rdb, direct := proxied(t, 3, 5*time.Second) // the cut, not a timeout, ends the wait
	oldServer(t, direct)                           // (a lost release reply is told by the server's uptime)
	for _, m := range modes(t, rdb, false) {
		t.Run(m.name, func(t *testing.T) {
			name := "resent-" + m.name
			key := "dlock:{" + name + "}"
			c := m.new(t, pipelined(false))
			if warm, err := c.TryAcquire(m.ctx(t.Context()), name+"-warm"); err == nil { // the scripts are loaded
				warm.Release(t.Context())
			}
			var l *dlock.Lock
			err := stallThenCut(t, p, func() (err error) {
				l, err = c.TryAcquire(m.ctx(t.Context()), name)
				return err
			}, func() bool { return liveKeys(t.Context(), direct, key) == 1 })
			if err != nil {
				t.Fatalf("TryAcquire with its reply lost once = %v, want the lock", err)
			}
			if m.name == "reentrant" {
				info, _ := c.Inspect(t.Context(), name)
				if len(info.Owners) != 1 || info.Owners[0].Holds != 1 {
					t.Errorf("after a re-sent reentrant acquire: owners %+v, want one hold", info.Owners)
				}
			}
			err = stallThenCut(t, p, func() error { return l.Release(t.Context()) },
				func() bool { return liveKeys(t.Context(), direct, key) == 0 })
			if err != nil {
				t.Errorf("Release with its reply lost once = %v, want nil (it was held throughout)", err)
			}
			if n := liveKeys(t.Context(), direct, key); n != 0 {
				t.Errorf("lock key left after Release: a hold counted twice")
			}
		})
	}
}

// A release whose reply is lost is re-sent by go-redis after the next lease
// began, and that lease was extended: the re-sent copy must still report
// the release, not a loss (found by the fault checker, fair mode: the next
// lease's extension rewrote the lock's value and dropped what the release
// had left there).
func TestReSentReleaseAfterTheNextLeaseBegan(t *testing.T) {
	t.Parallel()
	p, rdb, direct := proxied(t, 3, 5*time.Second) // the cut, not a timeout, ends the wait
	oldServer(t, direct)                           // (a lost release reply is told by the server's uptime)
	for _, fair := range []bool{false, true} {
		t.Run(fmt.Sprint("fair=", fair), func(t *testing.T) {
			name := fmt.Sprint("resent-next-", fair)
			key := "dlock:{" + name + "}"
			l, next := leaseOverProxy(t, rdb, direct, fair, name)
			got := make(chan *dlock.Lock, 1)
			go func() { // waits (fair: queued) and takes the lock when it is released
				n, err := next.Acquire(t.Context(), name)
				if err != nil {
					t.Errorf("next Acquire = %v", err)
				}
				got <- n
			}()
			if fair && !waitFor(3*time.Second, func() bool { return direct.LLen(t.Context(), key+":q").Val() == 1 }) {
				t.Fatal("the next lease never queued")
			}
			var n *dlock.Lock
			err := stallThenCut(t, p, func() error { return l.Release(t.Context()) }, func() bool {
				if holderOf(direct.Get(t.Context(), key).Val()) == l.Token() {
					return false
				}
				n = <-got // the next lease holds it
				if n != nil {
					n.Extend(t.Context(), 5*time.Second) // rewrites the lock's value
				}
				return true
			})
			if err != nil {
				t.Errorf("Release with its reply lost, re-sent after the next lease began = %v, want nil", err)
			}
			if n != nil {
				if err := n.Release(t.Context()); err != nil {
					t.Errorf("the next lease's Release = %v", err)
				}
			}
		})
	}
}

// A re-sent release reports what the first copy did, not a false loss, also
// when the next lease has come and gone before the copy lands (on a
// contended lock, two releases fit easily into the time go-redis takes to
// re-send).
func TestReSentReleaseAfterTheNextLeaseEnded(t *testing.T) {
	t.Parallel()
	p, rdb, direct := proxied(t, 3, 5*time.Second) // the cut, not a timeout, ends the wait
	oldServer(t, direct)                           // (a lost release reply is told by the server's uptime)
	for _, fair := range []bool{false, true} {
		t.Run(fmt.Sprint("fair=", fair), func(t *testing.T) {
			ctx := t.Context()
			name := fmt.Sprint("model-resent-rel-", fair)
			key := "dlock:{" + name + "}"
			l, next := leaseOverProxy(t, rdb, direct, fair, name)
			err := stallThenCut(t, p, func() error { return l.Release(ctx) }, func() bool {
				if holderOf(direct.Get(ctx, key).Val()) == l.Token() {
					return false
				}
				// The first copy ran; its reply is held. The next lease comes and goes.
				n, err := next.TryAcquire(ctx, name)
				if err != nil {
					t.Errorf("next TryAcquire = %v", err)
					return true
				}
				if err := n.Release(ctx); err != nil {
					t.Errorf("next Release = %v", err)
				}
				return true
			})
			if err != nil {
				t.Errorf("Release whose first copy freed the lock, re-sent after the next lease came and went = %v, want nil (value now %q)",
					err, direct.Get(ctx, key).Val())
			}
		})
	}
}

// TestConcurrentReleaseHonoursItsContext: while one Release of a Lock
// waits on a Redis that froze, a second Release with a 100ms context
// waits for the first (up to go-redis's timeouts, 10s here) instead of
// returning when its context ends.
func TestConcurrentReleaseHonoursItsContext(t *testing.T) {
	t.Parallel()
	srv, rdb := setup(t)
	c := newClient(t, rdb, dlock.LeaseTTL(time.Minute)) // outlives the freeze
	l, err := c.TryAcquire(t.Context(), "rel")
	if err != nil {
		t.Fatal(err)
	}
	srv.Pause()
	first := make(chan error, 1)
	go func() { first <- l.Release(context.Background()) }()
	time.Sleep(50 * time.Millisecond) // the first is in flight
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	start := time.Now()
	err = l.Release(ctx)
	took := time.Since(start)
	cancel()
	if took > time.Second {
		t.Errorf("a second Release with a 100ms context returned after %v (%v): it waited for the first, whatever its context", took.Round(time.Millisecond), err)
	}
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("the second Release = %v, want an error matching its context's", err)
	}
	srv.Resume()
	if err := <-first; err != nil {
		t.Logf("the first Release: %v", err)
	}
	if err := l.Release(context.Background()); err != nil {
		t.Errorf("a Release once Redis answers again = %v, want nil", err)
	}
	if n := liveKeys(context.Background(), rdb, l.Key()); n != 0 {
		t.Errorf("the lock is still held after its Release")
	}
}

// ForceRelease deletes only what is a dlock lock.
func TestForceReleaseRefusesForeignKey(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	rdb.SAdd(ctx, "dlock:{set}", "someone's data")
	rdb.HSet(ctx, "dlock:{hash}", "field", "value")
	for _, name := range []string{"set", "hash"} {
		if _, err := newClient(t, rdb).ForceRelease(ctx, name); !errors.Is(err, dlock.ErrWrongType) {
			t.Errorf("ForceRelease(%s) = %v, want ErrWrongType", name, err)
		}
		if n := liveKeys(ctx, rdb, "dlock:{"+name+"}"); n != 1 {
			t.Errorf("ForceRelease(%s) deleted a key that is not a lock", name)
		}
	}
}

// ForceRelease deletes only the holding it read: the holder's token, not the
// whole value, which changes with every extension ("e<n>"); a lock whose
// holder is alive and extending must be forced, not reported "not held".
func TestForceReleaseOfAnExtendedLock(t *testing.T) {
	t.Parallel()
	p, rdb, direct := proxied(t, -1, 5*time.Second)
	ctx := t.Context()
	name := "model-force"
	key := "dlock:{" + name + "}"
	l, err := newClient(t, direct, dlock.WithAutoExtend(false)).TryAcquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	op := newClient(t, rdb)
	p.Delay(20*time.Millisecond, 0) // the operator's requests take 20ms to arrive
	stop := make(chan struct{})
	extended := make(chan struct{})
	go func() { // the holder extends while the operator's ForceRelease is on its way
		defer close(extended)
		for i := 0; i < 40; i++ {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			l.Extend(ctx, 10*time.Second)
		}
	}()
	deleted, err := op.ForceRelease(ctx, name)
	close(stop)
	<-extended
	p.Delay(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !deleted && liveKeys(ctx, direct, key) == 1 {
		t.Errorf("ForceRelease = false (\"was not held\") while the lock is held: value %q", direct.Get(ctx, key).Val())
	}
}

// A fair Lock whose lease was taken over: its clean release names the lock
// key as its marker key (KEYS[5]); it must leave the new holder's lock
// alone.
func TestCleanFairReleaseLeavesAnotherHoldersLock(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.LeaseTTL(20*time.Second))
	l, err := c.TryAcquire(ctx, "f")
	if err != nil {
		t.Fatal(err)
	}
	other := strings.Repeat("Z", 22)
	rdb.Set(ctx, l.Key(), other, 15*time.Second)
	// a queue entry, so that release_fair reaches its later branches
	rdb.RPush(ctx, l.Key()+":q", l.Token())
	rdb.HSet(ctx, l.Key()+":qw", l.Token(), "99999999999999:1000")
	err = l.Release(ctx)
	if err == nil {
		t.Errorf("Release of a taken-over lease = nil")
	}
	if v := rdb.Get(ctx, l.Key()).Val(); v != other {
		t.Errorf("lock key = %q after the release, want %q", v, other)
	}
	if d := rdb.PTTL(ctx, l.Key()).Val(); d <= 10*time.Second {
		t.Errorf("lock key's PTTL = %v after the release", d)
	}
	if n := rdb.LLen(ctx, l.Key()+":q").Val(); n != 0 {
		t.Errorf("queue len %d", n)
	}
	if n := rdb.Exists(ctx, l.Key()+":r:"+l.Token()).Val(); n != 0 {
		t.Errorf("clean lease left a marker")
	}
}

// A clean lease (every acquire answered) ends without a marker in every
// mode with scripts (an undo's marker: TestMarkersOutliveLaterLeases).
func TestCleanReleaseLeavesNoMarker(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	markers := func(name string) []string {
		return rdb.Keys(ctx, "dlock:{"+name+"}:r:*").Val()
	}
	for _, m := range modes(t, rdb, false) {
		t.Run(m.name, func(t *testing.T) {
			c := m.new(t, dlock.WithAutoExtend(false))
			name := "clean-" + m.name
			l, err := c.TryAcquire(m.ctx(ctx), name)
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Release(m.ctx(ctx)); err != nil {
				t.Fatal(err)
			}
			if got := markers(name); len(got) != 0 {
				t.Errorf("a clean release left markers %v", got)
			}
		})
	}
}

// A lease known lost (its validity ran out with Redis gone) is reported
// lost by its Release and by Do, whatever error Redis's absence gives the
// release: errors.Is(err, ErrNotHeld) holds, as the guide promises.
func TestALeaseKnownLostIsReportedLostWithRedisDown(t *testing.T) {
	t.Parallel()
	for _, via := range []string{"Release", "Do"} {
		t.Run(via, func(t *testing.T) {
			s, rdb := setup(t)
			c := newClient(t, rdb, dlock.LeaseTTL(600*time.Millisecond))
			ctx := t.Context()
			if via == "Do" {
				err := c.Do(ctx, "down-do", func(ctx context.Context, _ *dlock.Lock) error {
					s.Kill()
					<-ctx.Done() // the lease runs out unextended
					return ctx.Err()
				})
				if !errors.Is(err, dlock.ErrNotHeld) {
					t.Fatalf("Do whose lease was lost with Redis down = %v, want ErrNotHeld", err)
				}
				return
			}
			l, err := c.Acquire(ctx, "down-release")
			if err != nil {
				t.Fatal(err)
			}
			s.Kill()
			select {
			case <-l.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("the lease was never found lost")
			}
			if err := l.Release(ctx); !errors.Is(err, dlock.ErrNotHeld) {
				t.Fatalf("Release of a lease known lost, Redis down = %v, want ErrNotHeld", err)
			}
		})
	}
}

// A Lock whose lease another Lock resumed, and which has not learnt it,
// reports the takeover at its Release (ErrNotHeld) and deletes nothing;
// a repeated Release returns nil, and its Observers see one release.
func TestReleaseOfALockResumedElsewhereIsReportedOnceAndLeavesTheLease(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	var releases []error
	var mu sync.Mutex
	end := func(_ context.Context, e *dlock.Event) {
		if e.Op == dlock.OpRelease {
			mu.Lock()
			releases = append(releases, e.Err)
			mu.Unlock()
		}
	}
	old := newClient(t, rdb, dlock.WithAutoExtend(false), dlock.WithObserver(dlock.Observer{End: end}))
	a, err := old.TryAcquire(ctx, "resumed-then-released")
	if err != nil {
		t.Fatal(err)
	}
	next := newClient(t, rdb, dlock.WithAutoExtend(false))
	b, err := next.TryAcquire(ctx, "resumed-then-released", dlock.Resume(a.Token()))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Extend(ctx, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	err = a.Release(ctx)
	if !errors.Is(err, dlock.ErrNotHeld) || !strings.Contains(err.Error(), "another Lock resumed the lease") {
		t.Errorf("the superseded Lock's Release = %v, want ErrNotHeld for the resume", err)
	}
	if err := a.Release(ctx); err != nil {
		t.Errorf("the repeated Release = %v, want nil", err)
	}
	mu.Lock()
	if len(releases) != 1 || !errors.Is(releases[0], dlock.ErrNotHeld) {
		t.Errorf("Observers saw releases %v, want one, ErrNotHeld", releases)
	}
	mu.Unlock()
	if err := b.Err(); err != nil {
		t.Fatalf("the resuming Lock lost the lease: %v", err)
	}
	if n, err := rdb.Exists(ctx, b.Key()).Result(); err != nil || n != 1 {
		t.Errorf("the lock key after the superseded Release: exists %d, %v", n, err)
	}
	if err := b.Release(ctx); err != nil {
		t.Errorf("the resuming Lock's Release = %v", err)
	}
}
