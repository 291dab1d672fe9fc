package dlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
)

// staleAndNewer returns two leases' fences and tokens on the lock name: a
// stale holder's (its lease deleted under it) and the newer holder's.
func staleAndNewer(t *testing.T, rdb *redis.Client, name string) (fa int64, ta string, fb int64, tb string) {
	t.Helper()
	ctx := t.Context()
	c := newClient(t, rdb, dlock.WithAutoExtend(false))
	a, err := c.TryAcquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	fa = fenceOf(t, a)
	rdb.Del(ctx, a.Key()) // a pauses; its lease is gone
	b, err := c.TryAcquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Release(context.Background()) })
	return fa, a.Token(), fenceOf(t, b), b.Token()
}

// push returns a Guard.Do func that appends v to the list key, counting
// its calls in calls.
func push(ctx context.Context, key, v string, calls *int) func(redis.Pipeliner) error {
	return func(p redis.Pipeliner) error {
		*calls++
		p.RPush(ctx, key, v)
		return nil
	}
}

// listIs fails the test unless the list key holds want.
func listIs(t *testing.T, rdb *redis.Client, key string, want ...string) {
	t.Helper()
	got, err := rdb.LRange(t.Context(), key, 0, -1).Result()
	if err != nil || len(got) != len(want) {
		t.Fatalf("%s = %q, %v, want %q", key, got, err, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%s = %q, want %q", key, got, want)
		}
	}
}

// A stale holder's Do is refused before its func runs, and none of its
// commands is applied; the newer holder's go on.
func TestGuardDoRefusesStaleHolderAndAppliesNone(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	g := dlock.NewGuard(rdb)
	fa, ta, fb, tb := staleAndNewer(t, rdb, "do-stale")
	var calls int
	if err := g.Do(ctx, "{r}", fb, tb, push(ctx, "{r}:log", "b1", &calls)); err != nil {
		t.Fatalf("newer holder's Do = %v", err)
	}
	if err := g.Do(ctx, "{r}", fa, ta, push(ctx, "{r}:log", "a1", &calls)); !errors.Is(err, dlock.ErrStaleFence) {
		t.Errorf("stale holder's Do = %v, want ErrStaleFence", err)
	}
	if err := g.Do(ctx, "{r}", fb, "another-token", push(ctx, "{r}:log", "x", &calls)); !errors.Is(err, dlock.ErrStaleFence) {
		t.Errorf("Do with an equal fence and another token = %v, want ErrStaleFence", err)
	}
	if err := g.Do(ctx, "{r}", fb, tb, push(ctx, "{r}:log", "b2", &calls)); err != nil {
		t.Errorf("newer holder's second Do = %v", err)
	}
	if calls != 2 {
		t.Errorf("funcs called %d times, want 2 (only the accepted ones)", calls)
	}
	listIs(t, rdb, "{r}:log", "b1", "b2")
}

// Write and Do share a resource's fence: a holder's write through either
// one refuses an older holder's through the other.
func TestGuardWriteAndDoShareTheFence(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	g := dlock.NewGuard(rdb)
	fa, ta, fb, tb := staleAndNewer(t, rdb, "do-shared")
	var calls int
	if err := g.Write(ctx, "{r}", "a1", fa, ta); err != nil {
		t.Fatal(err)
	}
	if err := g.Do(ctx, "{r}", fb, tb, push(ctx, "{r}:log", "b1", &calls)); err != nil {
		t.Fatalf("newer holder's Do after the older one's Write = %v", err)
	}
	if err := g.Write(ctx, "{r}", "a2", fa, ta); !errors.Is(err, dlock.ErrStaleFence) {
		t.Errorf("older holder's Write after a newer Do = %v, want ErrStaleFence", err)
	}
	if err := g.Write(ctx, "{r}", "b2", fb, tb); err != nil {
		t.Errorf("newer holder's Write after its Do = %v", err)
	}
	if err := g.Do(ctx, "{r}", fa, ta, push(ctx, "{r}:log", "a3", &calls)); !errors.Is(err, dlock.ErrStaleFence) {
		t.Errorf("older holder's Do after a newer Write = %v, want ErrStaleFence", err)
	}
	if v, f, err := g.Read(ctx, "{r}"); v != "b2" || f != fb || err != nil {
		t.Errorf("Read = %q, %d, %v, want %q, %d, nil", v, f, err, "b2", fb)
	}
	listIs(t, rdb, "{r}:log", "b1")
}

// doOvertaken runs g.Do of fence and token that appends v to the list
// {r}:log, while the lease of wf and wt writes the resource from another
// connection between Do's first read and its EXEC; it returns how often Do
// called its func, and Do's error.
func doOvertaken(t *testing.T, g *dlock.Guard, fence int64, token string, wf int64, wt, v string) (int, error) {
	ctx := t.Context()
	var calls int
	err := g.Do(ctx, "{r}", fence, token, func(p redis.Pipeliner) error {
		if calls++; calls == 1 {
			if err := g.Write(ctx, "{r}", "w", wf, wt); err != nil {
				t.Errorf("concurrent Write = %v", err)
			}
		}
		p.RPush(ctx, "{r}:log", v)
		return nil
	})
	return calls, err
}

// A write to the fence between Do's read and its EXEC aborts the
// transaction: Do reads again, and is refused if the write was newer, or
// applies its commands once if it was its own lease's.
func TestGuardDoReadsAgainAfterAConcurrentWrite(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	g := dlock.NewGuard(rdb)
	fa, ta, fb, tb := staleAndNewer(t, rdb, "do-race")
	if calls, err := doOvertaken(t, g, fa, ta, fb, tb, "a"); !errors.Is(err, dlock.ErrStaleFence) || calls != 1 {
		t.Errorf("Do overtaken by a newer Write = %v after %d calls, want ErrStaleFence after 1", err, calls)
	}
	listIs(t, rdb, "{r}:log")
	if calls, err := doOvertaken(t, g, fb, tb, fb, tb, "b"); err != nil || calls != 2 {
		t.Errorf("Do after its own lease's Write = %v after %d calls, want nil after 2", err, calls)
	}
	listIs(t, rdb, "{r}:log", "b")
}

// Bad input is refused with ErrInvalid, a func's error is returned as it
// is, and a cancelled context fails Do: nothing is applied.
func TestGuardDoRefusesBadInputAndAppliesNothingOnError(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	g := dlock.NewGuard(rdb)
	var calls int
	fn := push(ctx, "{r}:log", "x", &calls)
	for _, in := range []struct {
		res   string
		fence int64
		token string
		fn    func(redis.Pipeliner) error
	}{{"", 1, "t", fn}, {"{r}", 0, "t", fn}, {"{r}", -1, "t", fn}, {"{r}", 1, "", fn}, {"{r}", 1, "t", nil}} {
		if err := g.Do(ctx, in.res, in.fence, in.token, in.fn); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("Do(%q, %d, %q, nil func %v) = %v, want ErrInvalid", in.res, in.fence, in.token, in.fn == nil, err)
		}
	}
	conn := rdb.Conn()
	defer conn.Close()
	if err := dlock.NewGuard(conn).Do(ctx, "{r}", 1, "t", fn); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("Do through a client that cannot WATCH = %v, want ErrInvalid", err)
	}

	boom := errors.New("boom")
	err := g.Do(ctx, "{r}", 1, "t", func(p redis.Pipeliner) error {
		p.RPush(ctx, "{r}:log", "x")
		return boom
	})
	if err != boom {
		t.Errorf("Do whose func fails = %v, want its error", err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := g.Do(cancelled, "{r}", 1, "t", fn); !errors.Is(err, context.Canceled) {
		t.Errorf("Do with a cancelled context = %v, want context.Canceled", err)
	}
	if n, err := rdb.Exists(ctx, "{r}", "{r}:log").Result(); n != 0 || err != nil || calls != 0 {
		t.Errorf("after refused Dos: %d keys (%v), func called %d times, want none", n, err, calls)
	}
}

// An EXEC whose reply is lost (the connection cut once Redis ran it) may
// have applied Do's commands: Do's error says so, rather than a bare
// network error a caller would take for nothing done, with or without the
// client's retries (which never re-send a transaction).
func TestGuardDoSaysItsCommandsMayHaveBeenAppliedWhenTheExecReplyIsLost(t *testing.T) {
	t.Parallel()
	for _, retries := range []int{-1, 3} {
		p, rdb, direct := proxied(t, retries, 0)
		ctx := t.Context()
		g := dlock.NewGuard(rdb)
		done := make(chan error, 1)
		go func() {
			done <- g.Do(ctx, "{r}", 5, "t", func(pp redis.Pipeliner) error {
				p.StallReplies() // (WATCH's and HMGET's replies are in: EXEC's is held)
				pp.Incr(ctx, "{r}:n")
				return nil
			})
		}()
		if !waitFor(5*time.Second, func() bool { return direct.Get(ctx, "{r}:n").Val() == "1" }) {
			t.Fatalf("retries %d: the transaction never ran", retries)
		}
		p.Cut()
		var err error
		select {
		case err = <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("retries %d: Do did not return 5s after the cut", retries)
		}
		if err == nil || !strings.Contains(err.Error(), "may have been applied") {
			t.Errorf("retries %d: Do whose EXEC reply was lost = %v, want an error saying its commands may have been applied", retries, err)
		}
		if n := direct.Get(ctx, "{r}:n").Val(); n != "1" {
			t.Errorf("retries %d: counter %q after one Do, want 1 (no transaction re-sent)", retries, n)
		}
	}
}

// A write to the resource between Do's read and its EXEC, on every try,
// ends Do after doTries tries, each of which ran fn once, with an error
// that says so; none of fn's commands is applied. A conflict on one try
// only is read again and applied once.
func TestGuardDoGivesUpAfterAConflictOnEveryTry(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	g := dlock.NewGuard(rdb)
	other := rdb.Conn() // (the conflicting writes go outside the WATCH's connection)
	defer other.Close()
	conflicting := func(upTo int, calls *int) func(redis.Pipeliner) error {
		return func(p redis.Pipeliner) error {
			if *calls++; *calls <= upTo {
				other.HSet(ctx, "{r}", "touched", *calls) // (not the fence: the WATCH alone aborts)
			}
			p.RPush(ctx, "{r}:log", "x")
			return nil
		}
	}
	calls := 0
	err := g.Do(ctx, "{r}", 3, "t", conflicting(1000, &calls))
	if err == nil || err.Error() != `dlock: guarded do "{r}": the fence changed during each of 16 tries` || calls != 16 {
		t.Errorf("Do conflicted on every try = %v after %d calls of fn, want the 16 tries' error after 16", err, calls)
	}
	if n := rdb.Exists(ctx, "{r}:log").Val(); n != 0 || rdb.HGet(ctx, "{r}", "fence").Val() != "" {
		t.Errorf("after a Do that gave up: its commands or its fence were applied")
	}
	calls = 0
	if err := g.Do(ctx, "{r}", 3, "t", conflicting(1, &calls)); err != nil || calls != 2 {
		t.Errorf("Do conflicted once = %v after %d calls of fn, want nil after 2", err, calls)
	}
	listIs(t, rdb, "{r}:log", "x")
	if f := rdb.HGet(ctx, "{r}", "fence").Val(); f != "3" {
		t.Errorf("fence after the Do = %q, want 3", f)
	}
}
