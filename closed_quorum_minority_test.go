package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
)

// ownClients returns a go-redis client of its own for each node, closed at
// the test's end.
func ownClients(t *testing.T, nodes []redis.UniversalClient) []redis.UniversalClient {
	var mine []redis.UniversalClient
	for _, n := range nodes {
		m := redis.NewClient(&redis.Options{Addr: n.(*redis.Client).Options().Addr})
		t.Cleanup(func() { m.Close() })
		mine = append(mine, m)
	}
	return mine
}

// listening waits until a client listens for name's releases on each of
// nodes.
func listening(t *testing.T, ctx context.Context, nodes []redis.UniversalClient, name string) {
	t.Helper()
	ch := "dlock:{" + name + "}:ch"
	for i, n := range nodes {
		if !waitFor(5*time.Second, func() bool { return n.PubSubNumSub(ctx, ch).Val()[ch] > 0 }) {
			t.Fatalf("the waiter never listened on node %d", i)
		}
	}
}

// Over a quorum of three with one node's Redis client closed, a majority
// still answers: a waiting Acquire is handed the lock once its holder
// releases it (the closed node's hub does not end the wait), and the
// lock extends and releases.
func TestQuorumWithOneClientClosedStillAcquiresWaitsExtendsAndReleases(t *testing.T) {
	t.Parallel()
	_, nodes := startQuorum(t, 3)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	const name = "closed-minority"
	holder := newRedlock(t, nodes, time.Second)
	held, err := holder.TryAcquire(ctx, name, dlock.LeaseTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	mine := ownClients(t, nodes)
	c := newRedlock(t, mine, time.Second)
	t.Cleanup(func() { c.Close(context.WithoutCancel(ctx)) })
	mine[0].Close()
	got := make(chan error, 1)
	var l *dlock.Lock
	go func() {
		var err error
		l, err = c.Acquire(ctx, name, dlock.LeaseTTL(10*time.Second), dlock.MaxWait(20*time.Second))
		got <- err
	}()
	listening(t, ctx, nodes[1:], name)
	select {
	case err := <-got:
		t.Fatalf("the wait ended with %v while the lock was held; want it to wait", err)
	case <-time.After(200 * time.Millisecond): // (the closed node's hub tries again after 20, 40, 80ms)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("the wait after the holder's release ended with %v; want the lock", err)
	}
	if err := l.Extend(ctx, 10*time.Second); err != nil {
		t.Errorf("Extend with one node's client closed = %v; want nil", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Errorf("Release with one node's client closed = %v; want nil", err)
	}
}

// A quorum wait ends with ErrClosed, before its MaxWait, once two of its
// three nodes' Redis clients are closed under it: no majority can answer.
func TestQuorumWaitEndsWithErrClosedWhenAMajorityOfClientsCloseUnderIt(t *testing.T) {
	t.Parallel()
	_, nodes := startQuorum(t, 3)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	const name = "closed-majority"
	if _, err := newRedlock(t, nodes, time.Second).TryAcquire(ctx, name, dlock.LeaseTTL(time.Minute)); err != nil {
		t.Fatal(err)
	}
	mine := ownClients(t, nodes)
	c := newRedlock(t, mine, time.Second)
	t.Cleanup(func() { c.Close(context.WithoutCancel(ctx)) })
	got := make(chan error, 1)
	go func() {
		_, err := c.Acquire(ctx, name, dlock.LeaseTTL(10*time.Second), dlock.MaxWait(20*time.Second))
		got <- err
	}()
	listening(t, ctx, nodes[:2], name)
	mine[0].Close()
	mine[1].Close()
	select {
	case err := <-got:
		if !errors.Is(err, dlock.ErrClosed) {
			t.Errorf("the wait ended with %v; want ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the wait went on 10s after a majority of its clients were closed")
	}
}
