package dlock_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/redistest"
)

// heard waits for a release request on l, bounded; "" if none came.
func heard(l *dlock.Lock) string {
	select {
	case reason := <-l.ReleaseRequests():
		return reason
	case <-time.After(10 * time.Second):
		return ""
	}
}

// RequestRelease reaches every watching holder of the name, which decides:
// the lease stays held until it releases, a waiter is neither woken nor
// handed anything, and nothing is extended for it.
func TestReleaseRequestReachesTheWatchingHoldersAndReleasesNothing(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.LeaseTTL(30*time.Second), dlock.WatchLoss(true))
	sem, err := c.Semaphore("asked-sem", 2)
	if err != nil {
		t.Fatal(err)
	}
	a, err := sem.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, err := sem.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	subscribed(t, rdb, a.Key()+":ch")
	waiter := make(chan error, 1)
	go func() {
		l, err := sem.Acquire(ctx, dlock.MaxWait(20*time.Second))
		if err == nil {
			err = l.Release(ctx)
		}
		waiter <- err
	}()
	if !waitFor(10*time.Second, queuedAndListening(t, rdb, "asked-sem", 1)) {
		t.Fatal("the waiter never queued")
	}
	if err := c.RequestRelease(ctx, "asked-sem", "deploy 42"); err != nil {
		t.Fatal(err)
	}
	for _, l := range []*dlock.Lock{a, b} {
		if got := heard(l); got != "deploy 42" {
			t.Errorf("holder heard %q, want the reason %q", got, "deploy 42")
		}
		if err := l.Err(); err != nil {
			t.Errorf("a holder asked to release lost its lease: %v", err)
		}
	}
	select {
	case err := <-waiter:
		t.Fatalf("the waiter ended on a request, not a release: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	if err := a.Release(ctx); err != nil { // the holder's choice
		t.Fatal(err)
	}
	if err := <-waiter; err != nil {
		t.Errorf("the waiter, after the release: %v", err)
	}
	b.Release(ctx)
}

// A lease that is not watched has no request channel; bad input is refused.
func TestReleaseRequestsNeedAWatchedLease(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb)
	l, err := c.TryAcquire(ctx, "unwatched")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if l.ReleaseRequests() != nil {
		t.Error("an unwatched lease has a request channel")
	}
	for what, err := range map[string]error{
		"an empty name":    c.RequestRelease(ctx, "", "x"),
		"a long reason":    c.RequestRelease(ctx, "n", strings.Repeat("x", dlock.MaxMetaLen+1)),
		"an invalid UTF-8": c.RequestRelease(ctx, "n", "\xff"),
	} {
		if !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("RequestRelease with %s = %v, want ErrInvalid", what, err)
		}
	}
}

// Over a quorum and without scripts, the request reaches the holder too.
func TestReleaseRequestOverAQuorumAndWithoutScripts(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	var nodes []redis.UniversalClient
	for range 3 {
		nodes = append(nodes, redistest.Start(t).Client(t))
	}
	_, rdb := setup(t)
	for name, c := range map[string]*dlock.Client{
		"quorum":          newRedlock(t, nodes, 0, dlock.LeaseTTL(30*time.Second), dlock.WatchLoss(true)),
		"without scripts": newClient(t, rdb, dlock.WithoutScripts(), dlock.LeaseTTL(30*time.Second), dlock.WatchLoss(true)),
	} {
		l, err := c.TryAcquire(ctx, "asked")
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got := askUntilHeard(t, c, l, "drain"); got != "drain" {
			t.Errorf("%s: the holder heard %q, want %q", name, got, "drain")
		}
		l.Release(ctx)
	}
}

// askUntilHeard asks c to release l's lock for reason until l hears a
// request (its watch may be coming back after a broken connection), for
// 10s at most, and returns what l heard ("" if nothing).
func askUntilHeard(t *testing.T, c *dlock.Client, l *dlock.Lock, reason string) string {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		if err := c.RequestRelease(t.Context(), l.Name(), reason); err != nil {
			t.Fatalf("RequestRelease(%q) = %v", l.Name(), err)
		}
		select {
		case got := <-l.ReleaseRequests():
			return got
		case <-time.After(100 * time.Millisecond):
		}
	}
	return ""
}

// Many requests, none read, while holders release and acquire again and
// the Client closes: nothing blocks the hub (other holders still hear a
// request), nothing panics, and nothing is left running.
func TestUnreadReleaseRequestsBlockNothingWhileHoldersComeAndGo(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.LeaseTTL(30*time.Second), dlock.WatchLoss(true))
	asker := newClient(t, rdb)
	stop := make(chan struct{})
	spammed := make(chan error, 1)
	go func() {
		for i := 0; i < 2000; i++ {
			select {
			case <-stop:
				spammed <- nil
				return
			default:
			}
			if err := asker.RequestRelease(ctx, "spammed", "*"); err != nil {
				spammed <- err
				return
			}
		}
		spammed <- nil
	}()
	for range 20 {
		l, err := c.Acquire(ctx, "spammed", dlock.MaxWait(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	l, err := c.TryAcquire(ctx, "spammed")
	if err != nil {
		t.Fatal(err)
	}
	if got := askUntilHeard(t, asker, l, "last"); got == "" {
		t.Error("a holder heard no request while unread ones flowed")
	}
	close(stop)
	if err := <-spammed; err != nil {
		t.Errorf("RequestRelease = %v", err)
	}
	if err := c.Close(ctx); err != nil {
		t.Errorf("Close = %v", err)
	}
}

// Every kind of holder that watches its lease hears a request on its name:
// a reader and a writer of a read-write lock, an election's leader, a
// reentrant lock's holder, a downgraded writer.
func TestReleaseRequestReachesEveryKindOfWatchingHolder(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	opts := []dlock.Option{dlock.LeaseTTL(30 * time.Second), dlock.WatchLoss(true)}
	c := newClient(t, rdb, opts...)
	reentrant := newClient(t, rdb, append(opts, dlock.WithReentrant(true))...)
	rw, err := c.RWMutex("asked-rw")
	if err != nil {
		t.Fatal(err)
	}
	e, err := c.Election("asked-election")
	if err != nil {
		t.Fatal(err)
	}
	for what, acquire := range map[string]func() (*dlock.Lock, error){
		"a reader": func() (*dlock.Lock, error) { return rw.Reader().TryAcquire(ctx) },
		"a writer": func() (*dlock.Lock, error) { return rw.Writer().TryAcquire(ctx) },
		"a downgraded writer": func() (*dlock.Lock, error) {
			l, err := rw.Writer().TryAcquire(ctx)
			if err == nil {
				err = rw.Downgrade(ctx, l)
			}
			return l, err
		},
		"a leader": func() (*dlock.Lock, error) {
			ld, err := e.Campaign(ctx, "me")
			if err != nil {
				return nil, err
			}
			return ld.Lock(), nil
		},
		"a reentrant holder": func() (*dlock.Lock, error) { return reentrant.TryAcquire(ctx, "asked-reentrant") },
	} {
		l, err := acquire()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if got := askUntilHeard(t, c, l, what); got != what {
			t.Errorf("%s heard %q, want %q", what, got, what)
		}
		if err := l.Err(); err != nil {
			t.Errorf("%s asked to release: Err() = %v", what, err)
		}
		if err := l.Release(ctx); err != nil {
			t.Errorf("%s: Release = %v", what, err)
		}
	}
}

// A watched lease's request channel is one channel, the same for every
// goroutine that asks for it, while requests come in; an unwatched lease
// returned by the same Client has none.
func TestReleaseRequestsIsOneChannelForEveryGoroutine(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.LeaseTTL(30*time.Second))
	l, err := c.Acquire(ctx, "one-channel", dlock.WatchLoss(true))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	u, err := c.TryAcquire(ctx, "unwatched-beside")
	if err != nil {
		t.Fatal(err)
	}
	defer u.Release(ctx)
	subscribed(t, rdb, l.Key()+":ch")
	want := l.ReleaseRequests()
	if want == nil || u.ReleaseRequests() != nil {
		t.Fatalf("request channels: watched %v, unwatched %v; want one for the watched lease only", want, u.ReleaseRequests())
	}
	got := make(chan (<-chan string), 4)
	for range cap(got) {
		go func() { got <- l.ReleaseRequests() }()
	}
	if err := c.RequestRelease(ctx, "one-channel", "drain"); err != nil {
		t.Fatal(err)
	}
	for range cap(got) {
		if ch := <-got; ch != want {
			t.Errorf("ReleaseRequests from another goroutine = %v, want %v", ch, want)
		}
	}
	if reason := heard(l); reason != "drain" {
		t.Errorf("heard %q, want %q", reason, "drain")
	}
}
