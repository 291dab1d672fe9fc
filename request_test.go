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
// request (its watch subscribes after the acquisition returns), for 10s at
// most, and returns what l heard ("" if nothing).
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
