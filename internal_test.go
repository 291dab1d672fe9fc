package dlock

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/internal/redistest"
	"github.com/dlockio/dlock/internal/script"
)

// A retry after a lost reply runs the acquire script again with the same
// token: it must find the lock ours and return the fence it issued.
func TestAcquireRetryReturnsSameFence(t *testing.T) {
	s := redistest.Start(t)
	rdb := s.Client(t)
	b := node{rdb: rdb, uc: rdb, pub: "PUBLISH", pubA: "PUBLISH"}
	k := keysFor(DefaultPrefix, "retry")
	mine, theirs := &claim{keys: k}, &claim{keys: k}
	mine.setToken("tok")
	theirs.setToken("other")
	ctx := t.Context()
	first, err := b.acquire(ctx, mine, time.Second, false)
	if err != nil || !first.held {
		t.Fatalf("acquire = %+v, %v, want held", first, err)
	}
	again, err := b.acquire(ctx, mine, 5*time.Second, false)
	if err != nil || !again.held {
		t.Fatalf("retried acquire = %+v, %v, want held", again, err)
	}
	if again.fence != first.fence {
		t.Errorf("retried acquire fence = %d, want the first one, %d", again.fence, first.fence)
	}
	// The retry pushes the expiry out to its own TTL (its caller counts
	// validity from when it sent it), but a shorter one never cuts it.
	if pttl := s.Client(t).PTTL(ctx, k.lock).Val(); pttl < 4*time.Second {
		t.Errorf("PTTL after the retry with a 5s TTL = %v, want ~5s", pttl)
	}
	if _, err := b.acquire(ctx, mine, time.Second, false); err != nil {
		t.Fatal(err)
	}
	if pttl := s.Client(t).PTTL(ctx, k.lock).Val(); pttl < 4*time.Second {
		t.Errorf("PTTL after a retry with a 1s TTL = %v, want still ~5s (never shortened)", pttl)
	}
	other, err := b.acquire(ctx, theirs, time.Second, false)
	if err != nil || other.held || other.pttl <= 0 {
		t.Errorf("acquire by another token = %+v, %v, want not held with a pttl", other, err)
	}
	// A holder's key without expiry is reported as pttl -1 (unknown), not
	// as held: the reply packs "not held" and the pttl into one integer.
	s.Client(t).Persist(ctx, k.lock)
	other, err = b.acquire(ctx, theirs, time.Second, false)
	if err != nil || other.held || other.pttl != -1 {
		t.Errorf("acquire by another token, key without expiry = %+v, %v, want not held, pttl -1", other, err)
	}
}

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
		if got := c.sleep(1, -1); got != DefaultMinBackoff {
			t.Errorf("sleep with a backoff of %v = %v, want DefaultMinBackoff (%v)", d, got, DefaultMinBackoff)
		}
	}
	c, err := New(rdb, WithFair(false), WithBackoff(func(int) time.Duration { return time.Millisecond }))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.sleep(1, -1); got != time.Millisecond {
		t.Errorf("sleep with a backoff of 1ms = %v, want 1ms (only non-positive ones are raised)", got)
	}
	fair, err := New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fair.sleep(1, -1), queueTTL(DefaultTTL)/3; got != want {
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

// The five names share one string; each must come out whole.
func TestKeysFor(t *testing.T) {
	for _, tc := range []struct{ prefix, name string }{
		{"dlock:", "jobs"}, {"", "x"}, {"app:{tenant}:", "a b:c"},
	} {
		k := keysFor(tc.prefix, tc.name)
		base := tc.prefix + "{" + tc.name + "}"
		want := keys{lock: base, fence: base + ":fence", queue: base + ":q", waiters: base + ":qw", channel: base + ":ch"}
		if k != want {
			t.Errorf("keysFor(%q, %q) = %+v, want %+v", tc.prefix, tc.name, k, want)
		}
	}
}

// A force release names the holding it read: a re-sent copy that lands
// after the next holder took the lock deletes nothing.
func TestForceReleaseScriptNamesTheHolding(t *testing.T) {
	s := redistest.Start(t)
	rdb := s.Client(t)
	ctx := t.Context()
	k := keysFor(DefaultPrefix, "forced")
	rdb.Set(ctx, k.lock, "first", time.Minute)
	force := func() int64 {
		n, err := script.ForceRelease.Run(ctx, rdb, []string{k.lock}, "first", k.channel, "PUBLISH").Int64()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := force(); n != 1 {
		t.Fatalf("force release of the holding it names = %d, want 1", n)
	}
	rdb.Set(ctx, k.lock, "next", time.Minute) // the next holder
	if n := force(); n != 0 {
		t.Errorf("re-sent force release = %d, want 0", n)
	}
	if v := rdb.Get(ctx, k.lock).Val(); v != "next" {
		t.Errorf("lock after a re-sent force release = %q, want the next holder's", v)
	}
}
