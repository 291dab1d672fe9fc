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

// overOwnClients returns a go-redis client of its own for each node, and a
// Redlock Client over them (a node timeout of 1s), closed at the test's end.
func overOwnClients(t *testing.T, nodes []redis.UniversalClient) ([]redis.UniversalClient, *dlock.Client) {
	mine := ownClients(t, nodes)
	c := newRedlock(t, mine, time.Second)
	t.Cleanup(func() { c.Close(context.Background()) })
	return mine, c
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
	mine, c := overOwnClients(t, nodes)
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
	mine, c := overOwnClients(t, nodes)
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

// Over a quorum, a minority of nodes whose Redis client is closed does not
// make an error match ErrClosed: an attempt that one node granted, one
// could not answer in time and one could not send, which no majority
// decided, matches ErrNotAcquired, not ErrClosed (a caller that stops on
// ErrClosed would stop while a majority of the Client's clients still
// work), and the closed node's own error still says so. Once a majority is
// closed, the error matches ErrClosed.
func TestQuorumErrorMatchesErrClosedOnlyWhenAMajorityIsClosed(t *testing.T) {
	t.Parallel()
	srvs, nodes := startQuorum(t, 3)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	mine, c := overOwnClients(t, nodes)
	mine[0].Close()
	srvs[1].Pause()
	_, err := c.TryAcquire(ctx, "closed-split")
	srvs[1].Resume()
	q, ok := errors.AsType[*dlock.QuorumError](err)
	if !ok || !errors.Is(err, dlock.ErrNotAcquired) || errors.Is(err, dlock.ErrClosed) {
		t.Fatalf("TryAcquire granted by one node of three, one paused, one client closed = %v; want a QuorumError, ErrNotAcquired, not ErrClosed", err)
	}
	if !errors.Is(q.Nodes[0], dlock.ErrClosed) {
		t.Errorf("node 0's error = %v; want ErrClosed", q.Nodes[0])
	}
	mine[1].Close()
	if _, err := c.TryAcquire(ctx, "closed-split"); !errors.Is(err, dlock.ErrClosed) {
		t.Errorf("TryAcquire with two of three clients closed = %v; want ErrClosed", err)
	}
}

// Over a quorum with one node's Redis client closed, an extension that
// another node could not answer for a while is tried again, as it is with
// every client open: the closed node's error does not make the quorum's
// error one that cannot pass.
func TestQuorumExtendRetriesANodeBlipWithOneClientClosed(t *testing.T) {
	t.Parallel()
	srvs, nodes := startQuorum(t, 3)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	mine, c := overOwnClients(t, nodes)
	l, err := c.TryAcquire(ctx, "closed-blip", dlock.LeaseTTL(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	mine[0].Close()
	srvs[1].Pause()
	resumed := time.AfterFunc(2500*time.Millisecond, func() { srvs[1].Resume() }) // (after the first try's node timeout)
	defer resumed.Stop()
	if err := l.Extend(ctx, 20*time.Second); err != nil {
		t.Errorf("Extend through a node's 2.5s pause, with another node's client closed = %v; want it tried again, and nil", err)
	}
}
