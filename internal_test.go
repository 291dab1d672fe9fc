package dlock

import (
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
		c, err := New(rdb, WithFair(false), WithBackoff(func(int) time.Duration { return d }))
		if err != nil {
			t.Fatal(err)
		}
		if got := c.sleep(1, -1, DefaultTTL); got != DefaultMinBackoff {
			t.Errorf("sleep with a backoff of %v = %v, want DefaultMinBackoff (%v)", d, got, DefaultMinBackoff)
		}
	}
	c, err := New(rdb, WithFair(false), WithBackoff(func(int) time.Duration { return time.Millisecond }))
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
	if got, want := fair.sleep(1, -1, DefaultTTL), backend.QueueTTL(DefaultTTL)/3; got != want {
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
