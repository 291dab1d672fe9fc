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
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	defer rdb.Close()
	for _, d := range []time.Duration{0, -time.Second} {
		c, err := New(rdb, WithUnfair(func(int) time.Duration { return d }))
		if err != nil {
			t.Fatal(err)
		}
		if got := c.sleep(1, -1, DefaultTTL); got != DefaultMinBackoff {
			t.Errorf("sleep with a backoff of %v = %v, want DefaultMinBackoff (%v)", d, got, DefaultMinBackoff)
		}
	}
	c, err := New(rdb, WithUnfair(func(int) time.Duration { return time.Millisecond }))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.sleep(1, -1, DefaultTTL); got != time.Millisecond {
		t.Errorf("sleep with a backoff of 1ms = %v, want 1ms (only non-positive ones are raised)", got)
	}
	fair, err := New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fair.sleep(1, -1, DefaultTTL), backend.Window(DefaultTTL)/3; got != want {
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

// The backend's sentinel errors are its own; every error of the backend
// reaches the Client through publicErr, and matches the package's sentinel
// of the same meaning, with the same text.
func TestPublicErr(t *testing.T) {
	for _, s := range sentinels {
		if s.public == s.backend {
			t.Fatalf("%v: the package's sentinel is the backend's", s.public)
		}
		if s.public.Error() != s.backend.Error() {
			t.Errorf("texts differ: %q, backend %q", s.public, s.backend)
		}
	}
	if publicErr(nil) != nil {
		t.Fatal("publicErr(nil) != nil")
	}
	plain := errors.New("connection refused")
	if publicErr(plain) != plain {
		t.Error("an error matching no sentinel is changed")
	}

	ack := backend.Because(backend.ErrNotAcquired, "undone", backend.Because(backend.ErrReplicaAck, "0 of 1 replicas"))
	err := fmt.Errorf("wrapped: %w", publicErr(ack))
	if !errors.Is(err, ErrNotAcquired) || !errors.Is(err, ErrReplicaAck) || errors.Is(err, ErrWrongType) {
		t.Errorf("%v: matches ErrNotAcquired %v, ErrReplicaAck %v, ErrWrongType %v", err,
			errors.Is(err, ErrNotAcquired), errors.Is(err, ErrReplicaAck), errors.Is(err, ErrWrongType))
	}
	if err.Error() != "wrapped: "+ack.Error() {
		t.Errorf("text %q, want the backend's %q", err, ack)
	}
	if p := publicErr(ack); publicErr(p) != p {
		t.Error("publicErr wraps a public error again")
	}

	wrong := backend.Because(backend.ErrWrongType, "a list")
	bq := &backend.QuorumError{Op: "acquire", Held: 1, Need: 2, Nodes: []error{nil, wrong, plain}}
	qe, ok := publicErr(bq).(*QuorumError)
	if !ok {
		t.Fatalf("publicErr(backend.QuorumError) is a %T", publicErr(bq))
	}
	if qe.Op != "acquire" || qe.Held != 1 || qe.Need != 2 || len(qe.Nodes) != 3 || qe.Error() != bq.Error() {
		t.Errorf("QuorumError %+v (%q), want the fields and text of %+v (%q)", qe, qe, bq, bq)
	}
	if !errors.Is(qe, ErrNotAcquired) || !errors.Is(qe.Nodes[1], ErrWrongType) || !errors.Is(qe, ErrWrongType) || qe.Nodes[2] != plain {
		t.Errorf("QuorumError's nodes not made public: %v", qe.Nodes)
	}
	deep := publicErr(fmt.Errorf("ctx done; last attempt: %w", bq))
	if got, ok := errors.AsType[*QuorumError](deep); !ok || got.Held != 1 || !errors.Is(got.Nodes[1], ErrWrongType) {
		t.Errorf("errors.As finds no QuorumError in %v", deep)
	}
	if !errors.Is(deep, ErrNotAcquired) {
		t.Errorf("%v does not match ErrNotAcquired", deep)
	}
}
