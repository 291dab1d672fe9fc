package dlock

import (
	"testing"
	"time"

	"github.com/dlockio/dlock/internal/redistest"
)

// A retry after a lost reply runs the acquire script again with the same
// token: it must find the lock ours and return the fence it issued, and
// change nothing.
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
	// The retry does not re-arm the key: the first request's expiry already
	// outlasts the validity its caller counts from before sending it.
	if pttl := s.Client(t).PTTL(ctx, k.lock).Val(); pttl > time.Second || pttl < 500*time.Millisecond {
		t.Errorf("PTTL after the retry = %v, want the first request's ~1s", pttl)
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
