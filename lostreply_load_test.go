package dlock_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/leakcheck"
	"github.com/dlockio/dlock/internal/redistest"
)

// cutServer starts a server reached through a proxy, and returns the
// server's direct client, the proxy and a client of the proxy (go-redis's
// default retries) that has made its connection.
func cutServer(t *testing.T) (*redis.Client, *redistest.Proxy, *redis.Client) {
	t.Helper()
	leakcheck.Check(t)
	s := redistest.Start(t, redistest.TCP())
	direct := s.Client(t)
	p := redistest.NewProxy(t, s.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr()})
	t.Cleanup(func() { rdb.Close() })
	if err := rdb.Ping(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	return direct, p, rdb
}

// cutOnceRun stalls the replies of p, waits until direct's server has run
// a command name (a commandstats name: "scan", "script|load"), then cuts
// every connection: that command's reply is lost. It returns at once; the
// returned func waits until the cut is done.
func cutOnceRun(t *testing.T, direct *redis.Client, p *redistest.Proxy, name string) func() {
	t.Helper()
	ctx := t.Context()
	direct.ConfigResetStat(ctx)
	p.StallReplies()
	done := make(chan struct{})
	go func() {
		defer close(done)
		ran := func() bool { // (no t.Fatal off the test's goroutine)
			info, err := direct.Info(ctx, "commandstats").Result()
			return err == nil && strings.Contains(info, "cmdstat_"+name+":calls=")
		}
		if !waitFor(10*time.Second, ran) {
			t.Errorf("the server never ran %s", name)
		}
		p.Cut()
	}()
	return func() { <-done }
}

// A SCRIPT LOAD whose reply is lost (the connection broke after the server
// ran it) is sent again by go-redis, as any command but a script call: the
// Client's scripts are all loaded before its first lease, whose extension
// and release find theirs (no NOSCRIPT, no EVAL).
func TestScriptLoadWithALostReplyIsSentAgain(t *testing.T) {
	t.Parallel()
	direct, p, rdb := cutServer(t)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.WithAutoExtend(false))
	cut := cutOnceRun(t, direct, p, "script|load")
	l, err := c.TryAcquire(ctx, "lost-load")
	cut()
	if err != nil {
		t.Fatalf("TryAcquire after a lost SCRIPT LOAD reply = %v", err)
	}
	if err := l.Extend(ctx, time.Minute); err != nil {
		t.Fatalf("Extend = %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release = %v", err)
	}
	if evals, noscripts := scriptMisses(t, ctx, direct); evals != 0 || noscripts != 0 {
		t.Errorf("the server ran %d EVALs and answered %d NOSCRIPTs, want 0: the lost load was sent again", evals, noscripts)
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// A SCAN whose reply is lost is sent again by go-redis: List still lists.
func TestListSendsAgainAScanWhoseReplyWasLost(t *testing.T) {
	t.Parallel()
	direct, p, rdb := cutServer(t)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.WithAutoExtend(false))
	l, err := c.TryAcquire(ctx, "listed")
	if err != nil {
		t.Fatal(err)
	}
	cut := cutOnceRun(t, direct, p, "scan")
	infos, err := c.List(ctx, "")
	cut()
	if err != nil {
		t.Fatalf("List after a lost SCAN reply = %v, want the held lock", err)
	}
	if len(infos) != 1 || infos[0].Name != "listed" {
		t.Errorf("List = %+v, want the lock listed", infos)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// List on a closed go-redis client returns go-redis's own error.
func TestListOnAClosedRedisClientReturnsItsError(t *testing.T) {
	t.Parallel()
	_, direct := setup(t)
	s := redis.NewClient(direct.Options())
	c := newClient(t, s, dlock.WithAutoExtend(false))
	s.Close()
	_, err := c.List(context.Background(), "")
	if want := "dlock: list: " + redis.ErrClosed.Error(); err == nil || err.Error() != want {
		t.Errorf("List on a closed client = %v, want %q", err, want)
	}
}

// On a Cluster List lists the locks of every master.
func TestListOnAClusterListsEveryMastersLocks(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds a Redis Cluster")
	}
	leakcheck.Check(t)
	_, cc := startCluster(t)
	ctx := t.Context()
	c := newClient(t, cc, dlock.WithAutoExtend(false))
	var held []*dlock.Lock
	for i := range 12 { // names on every master
		l, err := c.TryAcquire(ctx, fmt.Sprint("cl-list-", i))
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	infos, err := c.List(ctx, "cl-list-*")
	if err != nil {
		t.Fatalf("List = %v", err)
	}
	if len(infos) != len(held) {
		t.Errorf("List = %d locks, want %d", len(infos), len(held))
	}
	for _, l := range held {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// A SCRIPT LOAD lost on a connection that broke is sent again by go-redis,
// as any command but a script call: the first acquire finds its script,
// with no NOSCRIPT and no EVAL (a second round trip on the clock).
func TestScriptLoadLostOnABrokenConnectionIsSentAgain(t *testing.T) {
	t.Parallel()
	leakcheck.Check(t)
	s := redistest.Start(t, redistest.TCP())
	direct := s.Client(t)
	ctx := t.Context()
	loser := redistest.NewLoser("script")
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr(), Dialer: loser.Dial})
	t.Cleanup(func() { rdb.Close() })
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, rdb, dlock.WithAutoExtend(false))
	direct.ConfigResetStat(ctx)
	loser.Arm()
	l, err := c.TryAcquire(ctx, "lost-request")
	if err != nil {
		t.Fatalf("TryAcquire after a lost SCRIPT LOAD = %v", err)
	}
	if err := l.Extend(ctx, time.Minute); err != nil {
		t.Fatalf("Extend = %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release = %v", err)
	}
	if n := loser.Lost(); n != 1 {
		t.Fatalf("%d requests lost, want the first SCRIPT LOAD", n)
	}
	if evals, noscripts := scriptMisses(t, ctx, direct); evals != 0 || noscripts != 0 {
		t.Errorf("the server ran %d EVALs and answered %d NOSCRIPTs, want 0: the lost load was sent again", evals, noscripts)
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
}
