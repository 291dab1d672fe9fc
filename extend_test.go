package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/leakcheck"
	"github.com/dlockio/dlock/internal/redistest"
	"github.com/dlockio/dlock/internal/script"
)

// A manual Extend that meets a Redis outage shorter than the lease's
// validity retries, as the watchdog does, and succeeds once Redis answers;
// one whose ctx ends first returns the error, the earlier validity
// standing.
func TestExtendRetriesThroughAnOutage(t *testing.T) {
	t.Parallel()
	leakcheck.Check(t)
	s := redistest.Start(t, redistest.TCP())
	ctx := t.Context()
	p := redistest.NewProxy(t, s.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ReadTimeout: 100 * time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	c := newClient(t, rdb, dlock.WithAutoExtend(false), dlock.LeaseTTL(10*time.Second))
	l, err := c.TryAcquire(ctx, "extend-retry")
	if err != nil {
		t.Fatal(err)
	}
	before := l.ValidUntil()
	p.Stall()
	heal := time.AfterFunc(500*time.Millisecond, p.Cut) // the outage ends
	defer heal.Stop()
	// Its retries, spaced ever wider, have seconds after the outage: on a
	// loaded machine a round trip can outlast the 100ms read timeout for a
	// while after Redis is back.
	ectx, cancel := context.WithTimeout(ctx, 8*time.Second)
	defer cancel()
	if err := l.Extend(ectx, 10*time.Second); err != nil {
		t.Fatalf("Extend through a 500ms outage = %v, want it retried until Redis answered", err)
	}
	if !l.ValidUntil().After(before) {
		t.Error("the validity did not move on")
	}

	// The caller's ctx bounds the retries.
	p.Stall()
	defer p.Cut()
	before = l.ValidUntil()
	ectx, cancel = context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := l.Extend(ectx, 10*time.Second); err == nil {
		t.Fatal("Extend succeeded with Redis stalled")
	}
	if took := time.Since(start); took > 1500*time.Millisecond {
		t.Errorf("Extend took %v past its 300ms ctx", took)
	}
	if !l.ValidUntil().Equal(before) || l.Err() != nil {
		t.Errorf("after a failed Extend: validity %v (was %v), Err %v", l.ValidUntil(), before, l.Err())
	}
}

func TestExtendAfterExpiry(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	l, err := newClient(t, rdb, dlock.WithAutoExtend(false)).TryAcquire(ctx, "ext")
	if err != nil {
		t.Fatal(err)
	}
	rdb.Del(ctx, l.Key())
	if err := l.Extend(ctx, time.Second); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Extend after the key was deleted = %v, want ErrNotHeld", err)
	}
	if !closedWithin(l.Done(), 0) {
		t.Error("Done() open after Extend found the lock gone")
	}
	if err := l.Release(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Release after loss = %v, want ErrNotHeld", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Errorf("second Release after loss = %v, want nil", err)
	}
}

// An Extend that Redis refuses for good (the lock's key now holds a value
// of another type) returns that refusal after one try: only an error that
// may pass is tried again.
func TestExtendRefusedForGoodIsNotTriedAgain(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	scripts := &atomic.Int32{}
	rdb.AddHook(scriptCounter{n: scripts})
	l, err := newClient(t, rdb, dlock.WithAutoExtend(false)).TryAcquire(ctx, "ext")
	if err != nil {
		t.Fatal(err)
	}
	rdb.Del(ctx, l.Key())
	rdb.HSet(ctx, l.Key(), "another", "program")
	scripts.Store(0)
	if err := l.Extend(ctx, 2*time.Second); !errors.Is(err, dlock.ErrWrongType) { // (shorter: a numbered extension, which reads the key with GET)
		t.Errorf("Extend of a key of another type = %v, want ErrWrongType", err)
	}
	if n := scripts.Load(); n != 1 {
		t.Errorf("Extend ran %d scripts against a definite refusal, want 1", n)
	}
}

// A reentrant hold's and a semaphore permit's Extend that Redis refuses for
// good (the key now holds a string) ends after one try, as a plain lock's
// does: the hold's with the refusal (its script meets WRONGTYPE), the
// permit's with the permit lost (its script finds no permit of the lease).
func TestExtendOfAHoldOrAPermitRefusedForGoodIsNotTriedAgain(t *testing.T) {
	t.Parallel()
	for _, k := range []struct {
		name string
		take func(t *testing.T, rdb *redis.Client) (*dlock.Lock, error)
		want error
	}{
		{"reentrant", func(t *testing.T, rdb *redis.Client) (*dlock.Lock, error) {
			c := newClient(t, rdb, dlock.WithReentrant(true), dlock.WithAutoExtend(false))
			return asOwner(t, c, "job").TryAcquire(t.Context(), "ext-re")
		}, dlock.ErrWrongType},
		{"semaphore", func(t *testing.T, rdb *redis.Client) (*dlock.Lock, error) {
			s, err := newClient(t, rdb, dlock.WithAutoExtend(false)).Semaphore("ext-sem", 2)
			if err != nil {
				return nil, err
			}
			return s.TryAcquire(t.Context())
		}, dlock.ErrNotHeld},
	} {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			_, rdb := setup(t)
			ctx := t.Context()
			scripts := &atomic.Int32{}
			rdb.AddHook(scriptCounter{n: scripts})
			l, err := k.take(t, rdb)
			if err != nil {
				t.Fatal(err)
			}
			rdb.Del(ctx, l.Key())
			rdb.Set(ctx, l.Key(), "another program", 0)
			scripts.Store(0)
			if err := l.Extend(ctx, 2*time.Second); !errors.Is(err, k.want) {
				t.Errorf("Extend of a key of another type = %v, want %v", err, k.want)
			}
			if n := scripts.Load(); n != 1 {
				t.Errorf("Extend ran %d scripts against a definite refusal, want 1", n)
			}
		})
	}
}

// An Extend that Redis refuses while it cannot persist (MISCONF: a failed
// snapshot with stop-writes-on-bgsave-error, the default) is tried again, as
// one refused for memory (OOM) is: the refusal passes with the next
// snapshot that succeeds, and the extension then lands. So it is without
// scripts, where the refusal comes from the transaction's write.
func TestExtendRetriesWhileWritesAreRefusedForAFailedSnapshot(t *testing.T) {
	t.Parallel()
	for _, m := range []struct {
		name string
		opts []dlock.Option
	}{{"scripts", nil}, {"script-free", []dlock.Option{dlock.WithoutScripts()}}} {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			extendThroughAFailedSnapshot(t, m.opts...)
		})
	}
}

func extendThroughAFailedSnapshot(t *testing.T, opts ...dlock.Option) {
	leakcheck.Check(t)
	s := redistest.Start(t, redistest.Args("--save", "3600 1", "--enable-protected-configs", "yes"))
	rdb := s.Client(t)
	ctx := t.Context()
	c := newClient(t, rdb, append(opts, dlock.WithAutoExtend(false), dlock.LeaseTTL(20*time.Second))...)
	l, err := c.TryAcquire(ctx, "ext-misconf")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(context.WithoutCancel(ctx))
	dir := rdb.ConfigGet(ctx, "dir").Val()["dir"]
	gone := t.TempDir() + "/gone"
	if err := errors.Join(os.Mkdir(gone, 0o700), rdb.ConfigSet(ctx, "dir", gone).Err(), os.Remove(gone)); err != nil {
		t.Fatal(err)
	}
	info := func(section, field string) string {
		for line := range strings.SplitSeq(rdb.Info(ctx, section).Val(), "\r\n") {
			if v, ok := strings.CutPrefix(line, field+":"); ok {
				return v
			}
		}
		return ""
	}
	rdb.BgSave(ctx) // fails: its directory is gone
	if !waitFor(10*time.Second, func() bool { return info("persistence", "rdb_last_bgsave_status") == "err" }) {
		t.Fatal("the snapshot did not fail")
	}
	if err := rdb.PExpire(ctx, "ext-misconf-probe", time.Second).Err(); err == nil || !strings.HasPrefix(err.Error(), "MISCONF") {
		t.Fatalf("a write with the snapshot failed = %v, want MISCONF", err)
	}
	done := make(chan error, 1)
	go func() { done <- l.Extend(ctx, time.Minute) }()
	// Once the extension was refused, the next snapshot succeeds.
	if !waitFor(10*time.Second, func() bool {
		n, _ := strconv.Atoi(strings.Split(strings.TrimPrefix(info("errorstats", "errorstat_MISCONF"), "count="), ",")[0])
		return n >= 2 // (the probe's, then the extension's)
	}) {
		t.Fatal("the extension was not refused")
	}
	select {
	case err := <-done:
		t.Fatalf("Extend refused while writes could not be persisted = %v, want it tried again once they can", err)
	default:
	}
	if err := rdb.ConfigSet(ctx, "dir", dir).Err(); err != nil {
		t.Fatal(err)
	}
	rdb.BgSave(ctx)
	if err := <-done; err != nil {
		t.Fatalf("Extend through a failed snapshot = %v, want nil once the next one succeeded", err)
	}
	if pttl := rdb.PTTL(ctx, l.Key()).Val(); pttl < 30*time.Second {
		t.Errorf("PTTL after Extend(1m) = %v, want > 30s", pttl)
	}
}

func TestExtendMovesDeadline(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	l, err := newClient(t, rdb, dlock.WithAutoExtend(false), dlock.LeaseTTL(time.Second)).TryAcquire(ctx, "ext")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	before := l.ValidUntil()
	if err := l.Extend(ctx, 20*time.Second); err != nil {
		t.Fatalf("Extend(20s) = %v", err)
	}
	if !l.ValidUntil().After(before.Add(10 * time.Second)) {
		t.Errorf("ValidUntil after Extend(20s) = %v, want > %v + 10s", l.ValidUntil(), before)
	}
	if pttl := rdb.PTTL(ctx, l.Key()).Val(); pttl < 10*time.Second {
		t.Errorf("PTTL after Extend(20s) = %v, want > 10s", pttl)
	}
}

func TestWatchdogKeepsLongWorkLocked(t *testing.T) {
	t.Parallel()
	long(t)
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.LeaseTTL(600*time.Millisecond))
	l, err := c.TryAcquire(ctx, "long")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2400 * time.Millisecond) // four TTLs of work
	if err := l.Err(); err != nil {
		t.Errorf("Err() after 4 TTLs with the watchdog on = %v, want nil", err)
	}
	if got := rdb.Get(ctx, l.Key()).Val(); !strings.HasPrefix(got, l.Token()) {
		t.Errorf("GET after 4 TTLs = %q, want our token (and the extension's number)", got)
	}
	if _, err := c.TryAcquire(ctx, "long"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("TryAcquire by another = %v, want ErrNotAcquired", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Errorf("Release() = %v", err)
	}
}

// An Extend to a shorter TTL brings the validity forward: once the shorter
// lease has run out on the server, the holder must already know, and with
// the watchdog on, it must extend on the shorter period.
func TestExtendToShorterTTLBringsValidityForward(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a long fault/timing scenario; run without -short")
	}
	_, rdb := setup(t)
	for _, m := range modes(t, rdb, true) {
		t.Run(m.name, func(t *testing.T) {
			ctx := m.ctx(t.Context())
			name := "shorter-" + m.name
			// (A shorter lease of 1.5s, extended every 500ms: a loaded
			// machine's late timers and round trips used up a 300ms one's.)
			for _, watchdog := range []bool{false, true} {
				l, err := tryAcquireInTime(ctx, m.new(t, dlock.LeaseTTL(30*time.Second), dlock.WithAutoExtend(watchdog)), name)
				if err != nil {
					t.Fatal(err)
				}
				if err := l.Extend(ctx, 1500*time.Millisecond); err != nil {
					t.Fatalf("Extend(1.5s) = %v", err)
				}
				if left := time.Until(l.ValidUntil()); left > 1500*time.Millisecond {
					t.Errorf("watchdog %v: ValidUntil %v away after Extend(1.5s), want at most 1.5s", watchdog, left)
				}
				time.Sleep(3500 * time.Millisecond)
				other, err := tryAcquireInTime(t.Context(), m.new(t), name)
				if watchdog {
					if err == nil {
						other.Release(t.Context())
						t.Errorf("watchdog on: another Client took the lock 3.5s after Extend(1.5s): the watchdog kept the old period")
					}
					if err := l.Err(); err != nil {
						t.Errorf("watchdog on: Err() = %v after Extend(1.5s), want still held", err)
					}
				} else {
					if err != nil {
						t.Errorf("watchdog off: TryAcquire by another 3.5s after Extend(1.5s) = %v, want the lock", err)
					} else {
						other.Release(t.Context())
					}
					if err := l.Err(); !errors.Is(err, dlock.ErrNotHeld) {
						t.Errorf("watchdog off: Err() = %v 3.5s after Extend(1.5s), want ErrNotHeld", err)
					}
				}
				l.Release(t.Context())
			}
		})
	}
}

// Was a bug: a delayed shorter extension lands after a later, longer one.
//
// Extend(short) whose request is delayed in the network past its caller's
// ctx (or go-redis read timeout) returns an error and keeps min(old, new)
// validity, as documented. The next Extend(long) overtakes it on another
// connection and succeeds: ValidUntil moves to now+long. Then the delayed
// short PEXPIRE lands and cuts the server-side lease to `short` from its
// landing. The server lets another client in while the first holder's
// Err() is nil and ValidUntil is seconds in the future: two holders.
//
// The fix: every extension carries a sequence number, and Redis applies
// none older than one it applied (the lease's own key records it).
func TestDelayedShorterExtendCannotCutANewerLease(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a long fault/timing scenario; run without -short")
	}
	leakcheck.Check(t)
	for _, pipelining := range []bool{true, false} {
		readTimeout := 5 * time.Second // the batcher returns at ctx end
		if !pipelining {
			readTimeout = 300 * time.Millisecond // go-redis gives up on the read
		}
		p, rdb, direct := proxied(t, -1, readTimeout)
		for _, m := range modes(t, rdb, false) {
			t.Run(fmt.Sprintf("%s/pipelining=%v", m.name, pipelining), func(t *testing.T) {
				name := fmt.Sprintf("ext-reorder-%s-%v", m.name, pipelining)
				c := m.new(t, dlock.LeaseTTL(10*time.Second), dlock.WithAutoExtend(false), pipelined(pipelining))
				l, err := c.TryAcquire(m.ctx(t.Context()), name)
				if err != nil {
					t.Fatal(err)
				}
				defer l.Release(context.WithoutCancel(t.Context()))

				p.Delay(1500*time.Millisecond, 0)
				start := time.Now()
				ctx1, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
				err = l.Extend(ctx1, 400*time.Millisecond)
				cancel()
				p.Delay(0, 0)
				if err == nil {
					t.Skip("short extension did not time out; cannot stage the reorder")
				}
				if err := l.Extend(t.Context(), 10*time.Second); err != nil {
					t.Fatalf("Extend(10s) = %v", err)
				}
				// The delayed Extend(400ms) lands at ~1.5s and the key dies at ~1.9s.
				time.Sleep(time.Until(start.Add(2300 * time.Millisecond)))
				other := newClient(t, direct, waiting(m.name == "fair"), dlock.WithReentrant(m.name == "reentrant"))
				o, err := asOwner(t, other, "intruder").TryAcquire(t.Context(), name)
				if err != nil {
					return // held up
				}
				defer o.Release(t.Context())
				if l.Err() == nil && time.Now().Before(l.ValidUntil()) {
					t.Errorf("TWO HOLDERS: another client acquired %q while the first holder's Err()=nil and ValidUntil is %v away",
						name, time.Until(l.ValidUntil()).Round(time.Millisecond))
				}
			})
		}
	}
}

// Was a bug: one user Extend(short) whose request is delayed;
// the watchdog then extends with the OLD, longer TTL (an extension with an
// error does not change l.ttl) and succeeds; the delayed short one lands
// after it. No second user call is needed.
func TestDelayedShorterExtendCannotCutTheWatchdogsLease(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a long fault/timing scenario; run without -short")
	}
	leakcheck.Check(t)
	p, rdb, direct := proxied(t, -1, 5*time.Second)
	c := newClient(t, rdb, dlock.LeaseTTL(6*time.Second), dlock.WithUnfair(nil)) // watchdog every 2s
	l, err := c.TryAcquire(t.Context(), "ext-dog")
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	defer l.Release(context.WithoutCancel(t.Context()))
	time.Sleep(time.Until(t0.Add(1500 * time.Millisecond)))
	p.Delay(time.Second, 0)
	ctx1, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	err = l.Extend(ctx1, 1200*time.Millisecond) // lands at ~2.5s, key dies at ~3.7s
	cancel()
	p.Delay(0, 0)
	if err == nil {
		t.Skip("short extension did not time out")
	}
	// The watchdog ticks at ~2.0s with the old 6s TTL; the next tick is ~4.0s.
	time.Sleep(time.Until(t0.Add(3850 * time.Millisecond)))
	o, err := newClient(t, direct, dlock.WithUnfair(nil)).TryAcquire(t.Context(), "ext-dog")
	if err != nil {
		return
	}
	defer o.Release(t.Context())
	if l.Err() == nil && time.Now().Before(l.ValidUntil()) {
		t.Errorf("TWO HOLDERS: intruder holds while the watchdog-extended holder's ValidUntil is %v away",
			time.Until(l.ValidUntil()).Round(time.Millisecond))
	}
}

// A late copy of an older extension (numbered, or seq 0) replayed after a
// newer one never cuts the lease short: plain lock and permit.
func TestLateOlderExtensionCopyNeverShortensTheLease(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.WithAutoExtend(false), dlock.LeaseTTL(10*time.Second))
	l, err := c.TryAcquire(ctx, "ext")
	if err != nil {
		t.Fatal(err)
	}
	s := newSemaphore(t, c, "ext-sem", 2)
	p, err := s.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		l      *dlock.Lock
		sc     *script.Script
		member string
		pttl   func() time.Duration
	}{
		{l, script.Named("extend"), l.Token(), func() time.Duration { return rdb.PTTL(ctx, l.Key()).Val() }},
		{p, script.Named("hold_extend"), p.Token(), func() time.Duration {
			sc := rdb.ZScore(ctx, p.Key(), p.Token()).Val()
			return time.Until(time.UnixMilli(int64(sc)))
		}},
	} {
		marker := tc.l.Key() + ":r:" + tc.l.Token()
		if err := tc.l.Extend(ctx, 10*time.Second); err != nil { // seq 0
			t.Fatal(err)
		}
		if err := tc.l.Extend(ctx, 2*time.Second); err != nil { // seq 1
			t.Fatal(err)
		}
		if err := tc.l.Extend(ctx, 8*time.Second); err != nil { // seq 2
			t.Fatal(err)
		}
		for _, seq := range []int64{1, 0} {
			tc.sc.Run(ctx, rdb, []string{tc.l.Key(), marker}, tc.member, 2000, seq)
			if d := tc.pttl(); d < 5*time.Second {
				t.Errorf("%s: a late copy of seq %d cut the lease to %v (want ~8s)", tc.l.Key(), seq, d)
			}
		}
	}
	l.Release(ctx)
	p.Release(ctx)
}

// TestConcurrentExtendHonoursItsContext: while an extension of a Lock
// (the watchdog's, or the caller's own) waits on a Redis that froze, an
// Extend with a 100ms context waits for it (~10s) instead of returning
// when its context ends.
func TestConcurrentExtendHonoursItsContext(t *testing.T) {
	t.Parallel()
	srv, rdb := setup(t)
	c := newClient(t, rdb, dlock.LeaseTTL(time.Minute), dlock.WithAutoExtend(false))
	l, err := c.TryAcquire(t.Context(), "ext")
	if err != nil {
		t.Fatal(err)
	}
	srv.Pause()
	first := make(chan error, 1)
	go func() { first <- l.Extend(context.Background(), time.Minute) }()
	time.Sleep(50 * time.Millisecond) // the first is in flight
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	start := time.Now()
	err = l.Extend(ctx, time.Minute)
	took := time.Since(start)
	cancel()
	if took > time.Second || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("an Extend with a 100ms context = %v after %v; want its context's error within it", err, took.Round(time.Millisecond))
	}
	srv.Resume()
	<-first
	if err := l.Extend(context.Background(), time.Minute); err != nil {
		t.Errorf("an Extend once Redis answers again = %v", err)
	}
	if err := l.Release(context.Background()); err != nil {
		t.Errorf("Release = %v", err)
	}
}

// TestReleaseExtendAndWatchdogRacingLeaveNothing: Release, Extend and the watchdog on
// one Lock at once, under -race, over a proxy that delays replies; the lock
// ends released with nothing left in Redis.
func TestReleaseExtendAndWatchdogRacingLeaveNothing(t *testing.T) {
	t.Parallel()
	leakcheck.Check(t)
	s := redistest.Start(t, redistest.TCP())
	direct := s.Client(t)
	p := redistest.NewProxy(t, s.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr()})
	t.Cleanup(func() { rdb.Close() })
	c := newClient(t, rdb, dlock.LeaseTTL(90*time.Millisecond))
	deadline := time.Now().Add(8 * time.Second)
	for round := 0; round < 20 && time.Now().Before(deadline); round++ {
		name := fmt.Sprintf("ext-race-%d", round)
		p.Delay(0, 0)
		l, err := c.Acquire(t.Context(), name)
		if err != nil {
			t.Fatal(err)
		}
		p.Delay(0, time.Duration(round%4)*10*time.Millisecond)
		var wg sync.WaitGroup
		var relErrs [3]error
		for i := range 3 {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(t.Context(), time.Duration(5+i*20)*time.Millisecond)
				defer cancel()
				l.Extend(ctx, 60*time.Millisecond)
				relErrs[i] = l.Release(ctx)
			})
		}
		wg.Wait()
		p.Delay(0, 0)
		// A last Release with time enough must settle it.
		if err := l.Release(t.Context()); err != nil && !errors.Is(err, dlock.ErrNotHeld) {
			t.Errorf("round %d: final Release = %v (earlier %v); want nil or ErrNotHeld", round, err, relErrs)
		}
		if err := l.Err(); err == nil {
			t.Errorf("round %d: Err after Release = nil; want ErrReleased or a loss", round)
		}
		select {
		case <-l.Done():
		default:
			t.Errorf("round %d: Done open after Release; want closed", round)
		}
		if n := liveKeys(t.Context(), direct, l.Key()); n != 0 {
			t.Errorf("round %d: %d live key(s) after Release; want 0", round, n)
		}
	}
}

// Was a defect, fixed (a lock left stuck past what was asked): an Extend that only
// lengthens is sent unnumbered (PEXPIRE GT), on the reasoning that "copies
// of it need no order". But a copy delayed in the network that lands AFTER
// a later, shortening Extend undoes it: the caller's Extend(10s) gave up
// (its ctx ended, the request still in the network), the caller then
// shortened the lease to 1s (Extend returned nil), and the late
// Extend(10s) lands and sets the key back to 10s. The Lock's validity ends
// at 1s (it declares the loss), while Redis keeps the lock from everyone
// for ~10s: Extend extended past what was last asked.
func TestLateLengtheningExtendCopyKeepsShortening(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.TCP())
	direct := srv.Client(t)
	ctx := t.Context()
	p := redistest.NewProxy(t, srv.Addr())
	prdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { prdb.Close() })
	c := newClient(t, prdb, dlock.LeaseTTL(2*time.Second), dlock.WithAutoExtend(false), pipelined(false))
	l, err := c.TryAcquire(ctx, "ext-late")
	if err != nil {
		t.Fatal(err)
	}
	p.Delay(300*time.Millisecond, 0)
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	lateErr := l.Extend(cctx, 10*time.Second) // gives up; the request is still in the network
	cancel()
	p.Delay(0, 0)
	if err := l.Extend(ctx, time.Second); err != nil {
		t.Fatalf("Extend(1s): %v (the late Extend(10s): %v)", err, lateErr)
	}
	time.Sleep(500 * time.Millisecond) // the late copy has landed
	pttl := direct.PTTL(ctx, "dlock:{ext-late}").Val()
	if pttl > 1100*time.Millisecond {
		t.Errorf("after Extend(10s) gave up (%v) and Extend(1s) returned nil, the key lives %v more: the late lengthening copy undid the shortening; the Lock's validity ends in %v",
			lateErr, pttl.Round(time.Millisecond), time.Until(l.ValidUntil()).Round(time.Millisecond))
	}
	l.Release(ctx)
}

// Was a defect, fixed: a late copy of a lock's acquire request undoes a shortening
// Extend. The acquisition's first copy is held in the network, go-redis
// re-sends it and the Lock is taken; its holder then shortens the lease to
// 1s (a numbered extension, so that no late extension copy can undo it).
// The acquire's first copy lands after that and finds the lock "already
// ours" (acquire.lua: PEXPIRE GT ttl), pushing the lease back to 10s: the
// lock stays in Redis ~9s after its Lock's validity ended, held by nobody.
// acquire.lua reads the marker already; an "e<n>" there (a numbered
// extension applied) says the copy is late, as extend.lua's unnumbered path
// treats it.
func TestLateAcquireCopyKeepsShortening(t *testing.T) {
	t.Parallel()
	s, rdb := setupTCP(t)
	ctx := t.Context()
	rdbP, p := lateCopyClient(t, s)
	plain := func(opt dlock.Option) func(t *testing.T, name string) func() (*dlock.Lock, error) {
		return func(t *testing.T, name string) func() (*dlock.Lock, error) {
			c := newClient(t, rdbP, dlock.LeaseTTL(10*time.Second), dlock.WithAutoExtend(false), opt)
			return func() (*dlock.Lock, error) { return c.TryAcquire(ctx, name) }
		}
	}
	for _, mode := range []struct {
		name string
		make func(t *testing.T, name string) func() (*dlock.Lock, error)
	}{
		{"unfair", plain(dlock.WithUnfair(nil))},
		{"fair", plain(dlock.WithObserver(dlock.Observer{}))},
		{"reentrant", plain(dlock.WithReentrant(true))},
		{"semaphore", func(t *testing.T, name string) func() (*dlock.Lock, error) {
			c := newClient(t, rdbP, dlock.LeaseTTL(10*time.Second), dlock.WithAutoExtend(false))
			sem, err := c.Semaphore(name, 2)
			if err != nil {
				t.Fatal(err)
			}
			return func() (*dlock.Lock, error) { return sem.TryAcquire(ctx) }
		}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			acquire := mode.make(t, "ext-late-acq-"+mode.name)
			warm, err := acquire() // scripts loaded, a connection in the pool
			if err != nil {
				t.Fatal(err)
			}
			warm.Release(ctx)
			var l *dlock.Lock
			lateFirstCopy(p, func() { l, err = acquire() })
			if err != nil {
				t.Fatal(err)
			}
			defer l.Release(ctx)
			if err := l.Extend(ctx, time.Second); err != nil {
				t.Fatal(err)
			}
			time.Sleep(700 * time.Millisecond) // the first copy has landed
			pttl, err := rdb.PTTL(ctx, l.Key()).Result()
			if err != nil {
				t.Fatal(err)
			}
			if left := time.Until(l.ValidUntil()); pttl > left+200*time.Millisecond {
				t.Errorf("after Extend(1s) and a late copy of the acquire, Redis keeps the lock %v more; its Lock is valid only %v more (the copy undid the shortening)", pttl, left.Round(time.Millisecond))
			}
		})
	}
}

// A late copy of an unnumbered (lengthening) extension that lands
// after a shortening Extend finds the "e<n>" marker and changes nothing:
// Redis keeps the lease no longer than the Lock claims, and the Lock keeps
// its lease (the copy is its own, not a loss). Plain lock (fair and
// unfair), semaphore permit, read hold, and the script-free mode.
func TestLateUnnumberedExtendCopyAfterShorteningEveryKind(t *testing.T) {
	t.Parallel()
	s, rdb := setupTCP(t)
	ctx := t.Context()
	rdbP, p := lateCopyClient(t, s)
	client := func(t *testing.T, opts ...dlock.Option) *dlock.Client {
		return newClient(t, rdbP, append([]dlock.Option{dlock.LeaseTTL(5 * time.Second), dlock.WithAutoExtend(false)}, opts...)...)
	}
	for _, mode := range []struct {
		name string
		make func(t *testing.T, name string) func() (*dlock.Lock, error)
	}{
		{"unfair", func(t *testing.T, name string) func() (*dlock.Lock, error) {
			c := client(t, dlock.WithUnfair(nil))
			return func() (*dlock.Lock, error) { return c.TryAcquire(ctx, name) }
		}},
		{"fair", func(t *testing.T, name string) func() (*dlock.Lock, error) {
			c := client(t)
			return func() (*dlock.Lock, error) { return c.TryAcquire(ctx, name) }
		}},
		{"noscripts", func(t *testing.T, name string) func() (*dlock.Lock, error) {
			c := client(t, dlock.WithoutScripts())
			return func() (*dlock.Lock, error) { return c.TryAcquire(ctx, name) }
		}},
		{"reentrant", func(t *testing.T, name string) func() (*dlock.Lock, error) {
			c := client(t, dlock.WithReentrant(true))
			return func() (*dlock.Lock, error) { return c.TryAcquire(ctx, name) }
		}},
		{"semaphore", func(t *testing.T, name string) func() (*dlock.Lock, error) {
			sem, _ := client(t).Semaphore(name, 3)
			return func() (*dlock.Lock, error) { return sem.AcquireN(ctx, 2) }
		}},
		{"read", func(t *testing.T, name string) func() (*dlock.Lock, error) {
			rw, _ := client(t).RWMutex(name)
			return func() (*dlock.Lock, error) { return rw.Reader().TryAcquire(ctx) }
		}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			acquire := mode.make(t, "ext-late-ext-"+mode.name)
			l, err := acquire()
			if err != nil {
				t.Fatal(err)
			}
			defer l.Release(ctx)
			if err := l.Extend(ctx, 5*time.Second); err != nil { // warm: scripts loaded
				t.Fatal(err)
			}
			lateFirstCopy(p, func() { err = l.Extend(ctx, 20*time.Second) })
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Extend(ctx, 2*time.Second); err != nil {
				t.Fatal(err)
			}
			answered := time.Now()             // (Extend(2s) landed before: Redis's deadline is at most 2s past this)
			time.Sleep(700 * time.Millisecond) // the first copy has landed
			if err := l.Err(); err != nil {
				t.Fatalf("the Lock lost its lease to its own late extension copy: %v", err)
			}
			sent := time.Now() // (PTTL lands after: Redis's deadline is at least pttl past this)
			pttl, err := rdb.PTTL(ctx, l.Key()).Result()
			if err != nil {
				t.Fatal(err)
			}
			if past := sent.Add(pttl).Sub(answered.Add(2 * time.Second)); past > 50*time.Millisecond {
				t.Errorf("after Extend(2s) and a late copy of Extend(20s), Redis keeps the lock %v more, %v past the 2s; its Lock is valid only %v more",
					pttl, past.Round(time.Millisecond), time.Until(l.ValidUntil()).Round(time.Millisecond))
			}
			if err := l.Extend(ctx, 2*time.Second); err != nil {
				t.Errorf("an Extend after the late copy: %v", err)
			}
		})
	}
}

// Extends whose replies are lost (the proxy holds every reply, then
// cuts the connections), lengthening and then shortening, followed by
// another Extend: the Lock stays held, claims no validity past what Redis
// holds, and the next Extend sets the lease Redis keeps.
func TestExtendsWithLostRepliesThenExtend(t *testing.T) {
	t.Parallel()
	s, rdb := setupTCP(t)
	ctx := t.Context()
	rdbP, p := lateCopyClient(t, s)
	c := newClient(t, rdbP, dlock.LeaseTTL(5*time.Second), dlock.WithAutoExtend(false))
	l, err := c.TryAcquire(ctx, "ext-lost-reply")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	for _, ttl := range []time.Duration{10 * time.Second, 2 * time.Second} { // unnumbered, then numbered
		p.StallReplies()
		ectx, cancel := context.WithTimeout(ctx, 700*time.Millisecond)
		err := l.Extend(ectx, ttl)
		cancel()
		p.Cut()
		if err == nil {
			t.Fatalf("Extend(%v) with its replies lost returned nil", ttl)
		}
		if l.Err() != nil {
			t.Fatalf("Extend(%v) with its replies lost ended the Lock: %v", ttl, l.Err())
		}
		claimWithinRedis(t, rdb, l, "after a lost reply")
	}
	if err := l.Extend(ctx, 3*time.Second); err != nil {
		t.Fatalf("the Extend after the lost replies: %v", err)
	}
	pttl, _ := rdb.PTTL(ctx, l.Key()).Result()
	if pttl > 3*time.Second || pttl < 2500*time.Millisecond {
		t.Errorf("after Extend(3s) Redis keeps the lock %v more, want ~3s", pttl)
	}
	claimWithinRedis(t, rdb, l, "after the last Extend")
}

// A manual Extend whose ctx has no deadline, on a stalled connection, ends
// by about the end of the lease's validity, with an error wrapping
// ErrNotHeld: past the validity the lease is lost and there is nothing left
// to retry for, whatever the client's read timeout (here a minute).
func TestExtendEndsAtTheValidityOnAStalledServer(t *testing.T) {
	t.Parallel()
	leakcheck.Check(t)
	for _, tc := range []struct {
		name       string
		pipelining bool
		ctxTimeout bool // go-redis ContextTimeoutEnabled
	}{
		{"pipelined", true, false},
		{"unpipelined, ContextTimeoutEnabled", false, true},
	} {
		s := redistest.Start(t, redistest.TCP())
		p := redistest.NewProxy(t, s.Addr())
		rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ReadTimeout: time.Minute, MaxRetries: -1, ContextTimeoutEnabled: tc.ctxTimeout})
		t.Cleanup(func() { rdb.Close() })
		c := newClient(t, rdb, dlock.WithAutoExtend(false), dlock.LeaseTTL(time.Second), pipelined(tc.pipelining))
		l, err := c.TryAcquire(t.Context(), "extend-stalled")
		if err != nil {
			t.Fatal(err)
		}
		p.Stall()
		end := l.ValidUntil()
		errc := make(chan error, 1)
		go func() { errc <- l.Extend(context.WithoutCancel(t.Context()), time.Second) }() // no deadline
		select {
		case err := <-errc:
			if !errors.Is(err, dlock.ErrNotHeld) {
				t.Errorf("%s: Extend on a stalled server = %v, want ErrNotHeld", tc.name, err)
			}
			if late := time.Since(end); late > 2*time.Second {
				t.Errorf("%s: Extend returned %v after the validity ended", tc.name, late)
			}
		case <-time.After(time.Until(end) + 5*time.Second):
			t.Errorf("%s: Extend still running 5s after the validity ended", tc.name)
			p.Cut()
			<-errc
		}
		p.Cut()
		l.Release(t.Context())
	}
}

// An Extend to a TTL below MinTTL or the drift is refused before anything
// is sent, with ErrInvalid in these words, naming the lock or the number of
// a MultiLock's parts, even once the lock is released; a valid TTL then
// gets the Lock's or the set's own error.
func TestExtendTooShortIsRefusedInItsWords(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.WithDrift(50*time.Millisecond), dlock.WithAutoExtend(false))
	l, err := c.TryAcquire(ctx, "ext-words")
	if err != nil {
		t.Fatal(err)
	}
	m, err := c.TryAcquireAll(ctx, []string{"ext-words-a", "ext-words-b"})
	if err != nil {
		t.Fatal(err)
	}
	for _, released := range []bool{false, true} {
		for _, tc := range []struct {
			extend func(context.Context, time.Duration) error
			ttl    time.Duration
			want   string
		}{
			{l.Extend, 10 * time.Millisecond, `dlock: invalid argument: Extend(10ms) of "ext-words": the TTL must be at least 30ms`},
			{l.Extend, 50 * time.Millisecond, `dlock: invalid argument: Extend(50ms) of "ext-words": the TTL must be above the drift (50ms)`},
			{m.Extend, 10 * time.Millisecond, `dlock: invalid argument: Extend(10ms) of 2 locks: the TTL must be at least 30ms`},
			{m.Extend, 50 * time.Millisecond, `dlock: invalid argument: Extend(50ms) of 2 locks: the TTL must be above the drift (50ms)`},
		} {
			if err := tc.extend(ctx, tc.ttl); !errors.Is(err, dlock.ErrInvalid) || err.Error() != tc.want {
				t.Errorf("released %v: Extend(%v) = %v, want %s", released, tc.ttl, err, tc.want)
			}
		}
		if released {
			break
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := m.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Extend(ctx, time.Second); err != dlock.ErrReleased {
		t.Errorf("Extend of a released Lock = %v, want ErrReleased", err)
	}
	if err := m.Extend(ctx, time.Second); err != dlock.ErrReleased {
		t.Errorf("Extend of a released MultiLock = %v, want ErrReleased", err)
	}
}
