package dlock

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/internal/backend"
)

func TestBackoffBounds(t *testing.T) {
	b := ExponentialBackoff(10*time.Millisecond, 80*time.Millisecond)
	for attempt := range 20 {
		for range 50 {
			d := b(attempt)
			if d < 0 || d > 80*time.Millisecond {
				t.Fatalf("backoff(%d) = %v, want in [0, 80ms]", attempt, d)
			}
		}
	}
	if d := b(10); d < 40*time.Millisecond {
		t.Errorf("backoff(10) = %v, want at least half the cap", d)
	}
}

// A Backoff that returns no positive duration is taken as
// DefaultMinBackoff: a waiter never polls in a tight loop. Fair waiters
// never consult it.
func TestBackoffClampedAtUse(t *testing.T) {
	for _, d := range []time.Duration{0, -time.Second} {
		c := undialled(t, WithUnfair(func(int) time.Duration { return d }))
		if got := c.own.waits.sleep(c.opts.backoff, 1, -1, DefaultTTL, true); got != DefaultMinBackoff {
			t.Errorf("sleep with a backoff of %v = %v, want DefaultMinBackoff (%v)", d, got, DefaultMinBackoff)
		}
	}
	c := undialled(t, WithUnfair(func(int) time.Duration { return time.Millisecond }))
	if got := c.own.waits.sleep(c.opts.backoff, 1, -1, DefaultTTL, true); got != time.Millisecond {
		t.Errorf("sleep with a backoff of 1ms = %v, want 1ms (only non-positive ones are raised)", got)
	}
	fair := undialled(t)
	if got, want := fair.own.waits.sleep(fair.opts.backoff, 1, -1, DefaultTTL, true), backend.Window(DefaultTTL)/3; got != want {
		t.Errorf("fair sleep = %v, want a third of the queue entry's life, %v", got, want)
	}
}

func FuzzBackoff(f *testing.F) {
	f.Add(int64(time.Millisecond), int64(time.Second), 3)
	f.Add(int64(-5), int64(-5), -1)
	f.Fuzz(func(t *testing.T, minWait, maxWait int64, attempt int) {
		lo, hi := time.Duration(minWait), time.Duration(maxWait)
		d := ExponentialBackoff(lo, hi)(attempt)
		limit := max(hi, lo, time.Millisecond)
		if d < 0 || d > limit {
			t.Errorf("ExponentialBackoff(%v, %v)(%d) = %v, want in [0, %v]", lo, hi, attempt, d, limit)
		}
	})
}

// The backend's errors reach callers as they are: the package's sentinels
// and QuorumError are the backend's, so a cause the backend wraps, or a
// quorum's node errors, match them through any wrapping.
func TestBackendErrorsAreThePackages(t *testing.T) {
	ack := backend.Because(backend.ErrNotAcquired, "undone", backend.Because(backend.ErrReplicaAck, "0 of 1 replicas"))
	err := fmt.Errorf("wrapped: %w", ack)
	if !errors.Is(err, ErrNotAcquired) || !errors.Is(err, ErrReplicaAck) || errors.Is(err, ErrWrongType) {
		t.Errorf("%v: matches ErrNotAcquired %v, ErrReplicaAck %v, ErrWrongType %v", err,
			errors.Is(err, ErrNotAcquired), errors.Is(err, ErrReplicaAck), errors.Is(err, ErrWrongType))
	}
	if !errors.Is(backend.Because(backend.ErrInvalid, "bad"), ErrInvalid) {
		t.Error("the backend's ErrInvalid is not the package's")
	}

	plain := errors.New("connection refused")
	wrong := backend.Because(backend.ErrWrongType, "a list")
	bq := &backend.QuorumError{Op: "acquire", Held: 1, Need: 2, Nodes: []error{nil, wrong, plain}}
	if bq.Error() != "1 of 3 nodes granted, 2 needed; node 1: lock key holds a value of another type: a list; node 2: connection refused" {
		t.Errorf("QuorumError text %q", bq)
	}
	deep := fmt.Errorf("ctx done; last attempt: %w", bq)
	qe, ok := errors.AsType[*QuorumError](deep)
	if !ok || qe.Held != 1 || !errors.Is(qe.Nodes[1], ErrWrongType) || qe.Nodes[2] != plain {
		t.Errorf("errors.As finds no QuorumError with its nodes' errors in %v", deep)
	}
	if !errors.Is(deep, ErrNotAcquired) || !errors.Is(deep, ErrWrongType) {
		t.Errorf("%v does not match ErrNotAcquired and its node's ErrWrongType", deep)
	}
}

// undialled returns a Client made with opts on a Redis client that is never
// dialled, for what needs no server; it is closed when tb ends.
func undialled(tb testing.TB, opts ...Option) *Client {
	tb.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	tb.Cleanup(func() { rdb.Close() })
	c, err := New(rdb, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// Every kind says how its waiters wait: the Client's fair locks, an
// election's candidates, a read-write lock's holds and a semaphore's
// permits queue (a refused attempt keeps its place under its token); the
// unfair, quorum and reentrant locks poll. Either kind of waiter sleeps no
// longer than the holder's lease has left, and a queueing waiter that is
// not queued sleeps no longer than its backoff.
func TestEachKindsWaitersQueueOrPoll(t *testing.T) {
	s, err := undialled(t).Semaphore("s", 3)
	if err != nil {
		t.Fatal(err)
	}
	backoff := func(int) time.Duration { return 5 * time.Millisecond }
	for k, queue := range map[*kind]bool{&fairLocks: true, &campaigns: true, &readHolds: true, &writeHolds: true, &s.k: true,
		&unfairLocks: false, &quorumLocks: false, &reentrantLocks: false} {
		if k.waits == nil {
			t.Errorf("the %s kind says nothing of how its waiters wait", k.mode())
			continue
		}
		want := ""
		if queue {
			want = "tok"
		}
		if got := k.waits.place("tok"); got != want {
			t.Errorf("a refused %s attempt's place in the queue = %q, want %q", k.mode(), got, want)
		}
		if got := k.waits.sleep(backoff, 1, 2*time.Millisecond, time.Minute, true); got != 3*time.Millisecond {
			t.Errorf("a %s waiter sleeps %v with 2ms left on the holder's lease, want 3ms", k.mode(), got)
		}
		if got, want := k.waits.sleep(backoff, 1, -1, time.Minute, false), 5*time.Millisecond; got != want && queue {
			t.Errorf("a %s waiter that is not queued sleeps %v, want its backoff, %v", k.mode(), got, want)
		}
	}
}
