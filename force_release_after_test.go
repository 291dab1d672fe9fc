package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/leakcheck"
	"github.com/dlockio/dlock/internal/redistest"
)

// A Redlock ForceRelease that reports no error ends the forced lease for
// good also when its holder, not knowing of the force, then releases the
// lease: the setting of
// TestRedlockForceReleaseEndsALeaseLongerThanTheMarkerWindowForGood (five
// nodes, the forcer cannot reach node 4, the first copies of a
// three-minute acquire held 65 s on nodes 0-2), but the holder calls
// Release right after the force. Its release finds the lock gone on nodes
// 0-3 and sets the lease's marker there to "0" for its own window, a
// minute, over the force's three minutes and a minute: the late copies
// that land at 65 s grant the lease again on nodes 0-2, a majority, so no
// new client can take the lock for three minutes, and a Resume of the
// forced token takes it over.
func TestRedlockForceReleaseEndsALeaseForGoodThoughItsHolderReleasesIt(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("waits past the force's one-minute marker window; run without -short")
	}
	leakcheck.Check(t)
	ctx := t.Context()
	const n = 5
	var srvs []*redistest.Server
	var holderNodes, forcerNodes, otherNodes []redis.UniversalClient
	var delayed []*redistest.Proxy
	client := func(addr string, read time.Duration) *redis.Client {
		retries := -1
		if read > 0 { // (the holder's nodes 0-2: a lost reply is asked again)
			retries = 3
		}
		c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: retries, DialTimeout: 200 * time.Millisecond, ReadTimeout: read})
		t.Cleanup(func() { c.Close() })
		return c
	}
	for i := range n {
		s := redistest.Start(t, redistest.TCP())
		srvs = append(srvs, s)
		hAddr, read := s.Addr(), time.Duration(0)
		if i < 3 { // the holder reaches nodes 0-2 through a proxy that will hold its first copy
			p := redistest.NewProxy(t, s.Addr())
			delayed = append(delayed, p)
			hAddr, read = p.Addr(), 150*time.Millisecond
		}
		holderNodes = append(holderNodes, client(hAddr, read))
		fAddr := s.Addr()
		if i == 4 { // the forcer cannot reach node 4
			fAddr = "127.0.0.1:1" // (nothing listens there)
		}
		forcerNodes = append(forcerNodes, client(fAddr, 0))
		otherNodes = append(otherNodes, client(s.Addr(), 0))
	}
	holder := newRedlock(t, holderNodes, 2*time.Second, dlock.WithAutoExtend(false))
	defer holder.Close(context.WithoutCancel(ctx))
	forcer := newRedlock(t, forcerNodes, 2*time.Second)
	defer forcer.Close(context.WithoutCancel(ctx))
	other := newRedlock(t, otherNodes, 2*time.Second)
	defer other.Close(context.WithoutCancel(ctx))

	// Every client's connections and scripts first, undelayed.
	for _, c := range []*dlock.Client{holder, other} {
		w := firstLease(t, c, "force-rel-warm")
		if err := w.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	forcer.ForceRelease(ctx, "force-rel-warm") // (node 4 fails it)

	// The first copy of the acquire is held 65 s on nodes 0-2; the copy
	// asked again after its reply was lost goes through at once.
	for _, p := range delayed {
		p.Delay(65*time.Second, 0)
	}
	type result struct {
		l   *dlock.Lock
		err error
	}
	got := make(chan result, 1)
	go func() {
		l, err := holder.TryAcquire(ctx, "force-rel", dlock.LeaseTTL(3*time.Minute))
		got <- result{l, err}
	}()
	held := func() bool {
		for _, p := range delayed {
			if p.HeldRequests() == 0 {
				return false
			}
		}
		return true
	}
	if !waitFor(5*time.Second, held) {
		t.Fatal("the holder's first copies did not reach the proxies")
	}
	for _, p := range delayed {
		p.Delay(0, 0)
	}
	r := <-got
	if r.err != nil {
		t.Fatalf("TryAcquire = %v", r.err)
	}
	l := r.l
	defer l.Release(context.WithoutCancel(ctx))
	key := dlock.DefaultPrefix + "{force-rel}"
	t.Logf("the lease is on %d of %d nodes; %d first copies still held", keysOn(ctx, srvs, key), n, delayed[0].HeldRequests()+delayed[1].HeldRequests()+delayed[2].HeldRequests())

	ok, ferr := forcer.ForceRelease(ctx, "force-rel")
	t.Logf("ForceRelease = %v, %v; the lease is on %d of %d nodes", ok, ferr, keysOn(ctx, srvs, key), n)
	if !ok || ferr != nil { // (ended on nodes 0-3, a majority: no error)
		t.Fatalf("ForceRelease = %v, %v; want true, nil", ok, ferr)
	}
	// The holder, not knowing of the force, releases the lease (its work
	// done): the lock is no longer its own on nodes 0-3, and the release
	// marks the lease ended there for its window, a minute.
	if err := l.Release(ctx); err == nil {
		t.Log("the holder's Release after the force reported no error")
	} else {
		t.Logf("the holder's Release after the force = %v", err)
	}
	// The first copies land, 65 s after they were sent.
	if !waitFor(80*time.Second, func() bool {
		return delayed[0].HeldRequests()+delayed[1].HeldRequests()+delayed[2].HeldRequests() == 0
	}) {
		t.Fatal("the holder's first copies did not land")
	}
	time.Sleep(100 * time.Millisecond)
	t.Logf("after the late copies landed: the lease is on %d of %d nodes", keysOn(ctx, srvs, key), n)
	if nl, err := other.TryAcquire(ctx, "force-rel"); err != nil {
		t.Errorf("a new holder's TryAcquire after a ForceRelease that reported no error = %v; want the lock", err)
	} else {
		nl.Release(ctx)
	}
	if rl, err := other.TryAcquire(ctx, "force-rel", dlock.Resume(l.Token())); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("a Resume of the forced lease after a ForceRelease that reported no error = %v; want ErrNotHeld", err)
		if err == nil {
			rl.Release(ctx)
		}
	}
}
