package dlock_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/goredisdriver"
	"github.com/dlockio/dlock/internal/leakcheck"
	"github.com/dlockio/dlock/internal/redistest"
)

// Durable grants (WithDurableGrants) need WAITAOF: these tests run on
// Valkey (redistest.Valkey), with an append-only file, except the one that
// pins the refusal of a server without WAITAOF (redis-server 7.0).

// durableServer starts a valkey-server with an append-only file synced as
// fsync says ("everysec", "no").
func durableServer(t *testing.T, fsync string) (*redistest.Server, *redis.Client) {
	t.Helper()
	leakcheck.Check(t)
	s := redistest.Start(t, redistest.Valkey(t), redistest.Args("--appendonly", "yes", "--appendfsync", fsync))
	return s, s.Client(t)
}

// durableTryAcquire is c.TryAcquire (c with durable grants, the file
// fsynced every second) of a name nobody else takes, tried again (for up to
// 10s) while the grant was not made durable in time: a loaded machine can
// keep the server's fsync past a short bound, and the grant is then undone
// (ErrNotDurable).
func durableTryAcquire(ctx context.Context, c *dlock.Client, name string) (*dlock.Lock, error) {
	var l *dlock.Lock
	var err error
	waitFor(10*time.Second, func() bool { l, err = c.TryAcquire(ctx, name); return !errors.Is(err, dlock.ErrNotDurable) })
	return l, err
}

// waitAOFCalls is how many WAITAOF commands s ran since it started.
func waitAOFCalls(ctx context.Context, s *redistest.Server) int {
	v := info(ctx, s, "commandstats", "cmdstat_waitaof") // calls=N,usec=…
	calls, _, _ := strings.Cut(strings.TrimPrefix(v, "calls="), ",")
	n, _ := strconv.Atoi(calls)
	return n
}

// A lease granted with durable grants is in the append-only file when its
// holder learns of it: the server killed (SIGKILL) at once and restarted
// on its files still has it, so a second holder is refused and the first
// still extends it. (A SIGKILL loses no write the server had replied to,
// even without WAITAOF: the file was written before the reply, and the
// kernel keeps what was written. Only a crash of the machine loses what
// was not fsynced, which a test cannot inject; so what fails here without
// the option is that the grant and the extension waited for the file.)
func TestDurableGrantSurvivesACrashRestart(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	s, rdb := durableServer(t, "everysec")
	c := newClient(t, rdb, dlock.WithDurableGrants(3*time.Second), dlock.WithAutoExtend(false), dlock.LeaseTTL(time.Minute))
	other := newClient(t, rdb, dlock.LeaseTTL(time.Minute))
	for round := range 3 {
		name := "durable-" + strconv.Itoa(round)
		before := waitAOFCalls(ctx, s)
		l, err := c.TryAcquire(ctx, name)
		if err != nil {
			t.Fatalf("round %d: durable TryAcquire = %v", round, err)
		}
		if n := waitAOFCalls(ctx, s) - before; n != 1 {
			t.Errorf("round %d: the grant ran %d WAITAOF, want 1", round, n)
		}
		s.Restart() // SIGKILL, then the same files
		if _, err := other.TryAcquire(ctx, name); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Errorf("round %d: TryAcquire after a crash-restart = %v, want ErrNotAcquired (the durable lease kept)", round, err)
		}
		before = waitAOFCalls(ctx, s)
		if err := l.Extend(ctx, time.Minute); err != nil {
			t.Errorf("round %d: Extend after a crash-restart = %v, want nil", round, err)
		}
		if n := waitAOFCalls(ctx, s) - before; n != 1 {
			t.Errorf("round %d: the extension ran %d WAITAOF, want 1", round, n)
		}
		if err := l.Release(ctx); err != nil {
			t.Errorf("round %d: Release = %v", round, err)
		}
	}
}

// A grant or an extension that the append-only file does not have within
// the timeout (appendfsync no: never fsynced) is reported as not durable;
// the grant is undone, the extension leaves the lease held.
func TestDurableGrantNotInTheFileInTimeIsUndone(t *testing.T) {
	t.Parallel()
	for _, mode := range []struct {
		name string
		opt  dlock.Option
	}{
		{"fair", nil}, // (the default)
		{"unfair", dlock.WithUnfair(nil)},
		{"without scripts", dlock.WithoutScripts()},
	} {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			s, rdb := durableServer(t, "everysec")
			// Extend tries again until little of the lease is left: a short one.
			opts := []dlock.Option{dlock.WithDurableGrants(300 * time.Millisecond), dlock.WithAutoExtend(false), dlock.LeaseTTL(4 * time.Second)}
			if mode.opt != nil {
				opts = append(opts, mode.opt)
			}
			c := newClient(t, rdb, opts...)
			l, err := durableTryAcquire(ctx, c, "kept")
			if err != nil {
				t.Fatalf("durable TryAcquire = %v", err)
			}
			if _, err := s.Do(ctx, "CONFIG", "SET", "appendfsync", "no"); err != nil {
				t.Fatal(err)
			}
			_, err = c.TryAcquire(ctx, "late")
			if !errors.Is(err, dlock.ErrNotDurable) || !errors.Is(err, dlock.ErrNotAcquired) {
				t.Errorf("TryAcquire never fsynced = %v, want ErrNotDurable and ErrNotAcquired", err)
			}
			if !waitFor(5*time.Second, func() bool { return !exists(ctx, s, "dlock:{late}") }) {
				t.Error("a grant not made durable left its key")
			}
			if err := l.Extend(ctx, time.Minute); !errors.Is(err, dlock.ErrNotDurable) || errors.Is(err, dlock.ErrNotHeld) {
				t.Errorf("Extend never fsynced = %v, want ErrNotDurable, not ErrNotHeld", err)
			}
			if err := l.Err(); err != nil {
				t.Errorf("after an extension not made durable: Err() = %v, want nil", err)
			}
			if err := l.Release(ctx); err != nil {
				t.Errorf("Release = %v", err)
			}
		})
	}
}

// Every kind's grants and extensions wait for the append-only file, and
// one the file does not have in time fails as not durable.
func TestDurableGrantsCoverEveryKind(t *testing.T) {
	t.Parallel()
	for _, k := range []struct {
		kind string
		opts []dlock.Option
		take func(ctx context.Context, c *dlock.Client, name string) (*dlock.Lock, error)
	}{
		{"reentrant", []dlock.Option{dlock.WithReentrant(true)}, func(ctx context.Context, c *dlock.Client, name string) (*dlock.Lock, error) {
			return asOwner(t, c, "owner").TryAcquire(ctx, name)
		}},
		{"semaphore", nil, func(ctx context.Context, c *dlock.Client, name string) (*dlock.Lock, error) {
			return newSemaphore(t, c, name, 2).TryAcquire(ctx)
		}},
		{"read-write", nil, func(ctx context.Context, c *dlock.Client, name string) (*dlock.Lock, error) {
			return newRW(t, c, name).Writer().TryAcquire(ctx)
		}},
	} {
		t.Run(k.kind, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			s, rdb := durableServer(t, "everysec")
			// The grant and the extension that the file has get 2s: a
			// loaded machine can keep an fsync past 300ms, and Extend then
			// tries again (a third WAITAOF). The take never fsynced gets
			// 300ms, on a Client of its own.
			c := newClient(t, rdb, append(k.opts, dlock.WithDurableGrants(2*time.Second), dlock.WithAutoExtend(false))...)
			short := newClient(t, rdb, append(k.opts, dlock.WithDurableGrants(300*time.Millisecond), dlock.WithAutoExtend(false))...)
			before := waitAOFCalls(ctx, s)
			l, err := k.take(ctx, c, "kept")
			if err != nil {
				t.Fatalf("durable TryAcquire = %v", err)
			}
			if err := l.Extend(ctx, time.Minute); err != nil {
				t.Errorf("durable Extend = %v", err)
			}
			if n := waitAOFCalls(ctx, s) - before; n != 2 {
				t.Errorf("a grant and an extension ran %d WAITAOF, want 2", n)
			}
			if _, err := s.Do(ctx, "CONFIG", "SET", "appendfsync", "no"); err != nil {
				t.Fatal(err)
			}
			if _, err := k.take(ctx, short, "late"); !errors.Is(err, dlock.ErrNotDurable) || !errors.Is(err, dlock.ErrNotAcquired) {
				t.Errorf("TryAcquire never fsynced = %v, want ErrNotDurable and ErrNotAcquired", err)
			}
			if err := l.Release(ctx); err != nil {
				t.Errorf("Release = %v", err)
			}
		})
	}
}

// A server without WAITAOF (before Redis 7.2) refuses durable grants with
// an error that says so, and the attempt leaves nothing behind.
func TestDurableGrantsRefusedByAServerWithoutWAITAOF(t *testing.T) {
	t.Parallel()
	s, rdb := setup(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if v, err := s.Do(ctx, "COMMAND", "INFO", "WAITAOF"); err == nil && len(v.([]any)) > 0 && v.([]any)[0] != nil {
		t.Skip("the server has WAITAOF (Redis 7.2+ or Valkey): the refusal needs one without it, as redis-server 7.0")
	}
	refused(t, ctx, s, rdb, "has no WAITAOF")
}

// A server whose append-only file is off refuses durable grants with an
// error that says so, and the attempt leaves nothing behind.
func TestDurableGrantsRefusedWithTheAppendOnlyFileOff(t *testing.T) {
	t.Parallel()
	leakcheck.Check(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	s := redistest.Start(t, redistest.Valkey(t)) // (appendonly no)
	refused(t, ctx, s, s.Client(t), "appendonly no")
}

// refused checks that s refuses durable grants, with scripts and without:
// the acquisition's error matches the sentinels and says why in dlock's own
// words, without Redis's reply, and the attempt leaves no key.
func refused(t *testing.T, ctx context.Context, s *redistest.Server, rdb *redis.Client, why string) {
	t.Helper()
	for _, mode := range []struct {
		name string
		opts []dlock.Option
	}{
		{"with scripts", nil},
		{"without scripts", []dlock.Option{dlock.WithoutScripts()}},
	} {
		c := newClient(t, rdb, append(mode.opts, dlock.WithDurableGrants(time.Second))...)
		_, err := c.TryAcquire(ctx, "durable")
		if !errors.Is(err, dlock.ErrNotDurable) || !errors.Is(err, dlock.ErrInvalid) || !errors.Is(err, dlock.ErrNotAcquired) {
			t.Errorf("%s: durable TryAcquire = %v, want ErrNotDurable, ErrInvalid and ErrNotAcquired", mode.name, err)
		} else if msg := err.Error(); !strings.Contains(msg, why) || strings.Contains(msg, "ERR") || prefixes(msg) != 1 {
			t.Errorf("%s: durable TryAcquire = %q, want a text saying %q, without Redis's reply", mode.name, msg, why)
		}
		if !waitFor(5*time.Second, func() bool { return !exists(ctx, s, "dlock:{durable}") }) {
			t.Errorf("%s: a refused durable grant left its key", mode.name)
		}
	}
}

// WithDurableGrants needs a timeout of at least 1ms (WAITAOF counts whole milliseconds), and a Client that can send
// WAITAOF after its writes: NewFrom and NewRedlock refuse it.
func TestDurableGrantsInvalidOptions(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	for _, tt := range []struct {
		name string
		new  func() (*dlock.Client, error)
		want string
	}{
		{"no timeout", func() (*dlock.Client, error) { return dlock.New(rdb, dlock.WithDurableGrants(0)) }, "WithDurableGrants(0s)"},
		{"driver", func() (*dlock.Client, error) {
			return dlock.NewFrom(goredisdriver.Conn(rdb), dlock.WithDurableGrants(time.Second))
		}, "WithDurableGrants needs a go-redis client"},
		{"quorum", func() (*dlock.Client, error) {
			return dlock.NewRedlock([]redis.UniversalClient{rdb, rdb, rdb}, 0, dlock.WithDurableGrants(time.Second))
		}, "WithDurableGrants(1s)"},
		{"past the read timeout", func() (*dlock.Client, error) {
			return dlock.New(rdb, dlock.WithDurableGrants(10*time.Second)) // (go-redis's default read timeout: seconds)
		}, "before the Redis client's read timeout"},
		{"with replica ack, past the read timeout", func() (*dlock.Client, error) {
			return dlock.New(rdb, dlock.WithDurableGrants(rdb.Options().ReadTimeout/2), dlock.WithReplicaAck(1, rdb.Options().ReadTimeout/2))
		}, "before the Redis client's read timeout"},
	} {
		c, err := tt.new()
		if c != nil || !errors.Is(err, dlock.ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: = %v, %v; want no Client and ErrInvalid naming %s", tt.name, c, err, tt.want)
		}
	}
}

// A durable wait that a client without a read timeout may take is accepted.
func TestDurableGrantsLongerThanNoReadTimeoutAccepted(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr(), ReadTimeout: -1})
	defer rdb.Close()
	c, err := dlock.New(rdb, dlock.WithDurableGrants(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	c.Close(t.Context())
}
