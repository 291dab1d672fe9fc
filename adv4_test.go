package dlock_test

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/script"
)

// Kinds on one name: every pair refused with ErrWrongType, in both the fast
// path (the key alone) and the general path (a queue present).
func TestAdv4KindsRefused(t *testing.T) {
	_, rdb := setup(t)
	ctx := t.Context()
	fair := newClient(t, rdb, dlock.WithAutoExtend(false))
	unfair := newClient(t, rdb, dlock.WithAutoExtend(false), dlock.WithUnfair(nil))
	type taker func(name string) (*dlock.Lock, error)
	kinds := map[string]taker{
		"fair":   func(n string) (*dlock.Lock, error) { return fair.TryAcquire(ctx, n) },
		"unfair": func(n string) (*dlock.Lock, error) { return unfair.TryAcquire(ctx, n) },
		"sem": func(n string) (*dlock.Lock, error) {
			return newSemaphore(t, fair, n, 3).TryAcquire(ctx)
		},
		"read":  func(n string) (*dlock.Lock, error) { return newRW(t, fair, n).Reader().TryAcquire(ctx) },
		"write": func(n string) (*dlock.Lock, error) { return newRW(t, fair, n).Writer().TryAcquire(ctx) },
	}
	same := func(a, b string) bool {
		return a == b || (a == "read" && b == "write") || (a == "write" && b == "read") ||
			(a == "fair" && b == "unfair") || (a == "unfair" && b == "fair")
	}
	i := 0
	for ka, ta := range kinds {
		for kb, tb := range kinds {
			if same(ka, kb) {
				continue
			}
			i++
			name := "adv4-kinds-" + ka + "-" + kb
			la, err := ta(name)
			if err != nil {
				t.Fatalf("%s: %v", ka, err)
			}
			lb, err := tb(name)
			if !errors.Is(err, dlock.ErrWrongType) {
				t.Errorf("%s then %s: %v, want ErrWrongType", ka, kb, err)
				if lb != nil {
					lb.Release(ctx)
				}
			}
			if err := la.Release(ctx); err != nil {
				t.Errorf("%s then %s: release of the first = %v", ka, kb, err)
			}
		}
	}
}

// Randomized: semaphore N=2 (and a read-write lock) with forced lapses;
// after each step, the live members never exceed N, and a Release that
// reports success was not overtaken.
func TestAdv4SemRandomLapses(t *testing.T) {
	_, rdb := setup(t)
	ctx := t.Context()
	const name = "adv4-sem-rand"
	const n = 2
	cs := []*dlock.Client{
		newClient(t, rdb, dlock.WithAutoExtend(false), dlock.LeaseTTL(5*time.Second)),
		newClient(t, rdb, dlock.WithAutoExtend(false), dlock.LeaseTTL(5*time.Second), pipelined(false)),
	}
	rng := rand.New(rand.NewPCG(1, 2))
	type hold struct {
		l       *dlock.Lock
		lapsed  bool
		dropped bool
	}
	var holds []*hold
	deadline := time.Now().Add(20 * time.Second)
	for step := 0; step < 600 && time.Now().Before(deadline); step++ {
		s := newSemaphore(t, cs[rng.IntN(2)], name, n)
		switch op := rng.IntN(5); {
		case op <= 1:
			l, err := s.TryAcquire(ctx)
			if err == nil {
				// every lapsed hold must have been dropped by this grant
				// if more than it are members
				for _, h := range holds {
					if h.lapsed {
						sc := rdb.ZScore(ctx, semKey(name), h.l.Token())
						if sc.Err() == nil {
							t.Fatalf("step %d: a grant left a lapsed hold in the set", step)
						}
						h.dropped = true
					}
				}
				holds = append(holds, &hold{l: l})
			}
		case op == 2 && len(holds) > 0:
			h := holds[rng.IntN(len(holds))]
			if !h.lapsed {
				rdb.ZAdd(ctx, semKey(name), redis.Z{Score: 1, Member: h.l.Token()})
				h.lapsed = true
			}
		case op >= 3 && len(holds) > 0:
			i := rng.IntN(len(holds))
			h := holds[i]
			holds = append(holds[:i], holds[i+1:]...)
			err := h.l.Release(ctx)
			if h.dropped && err == nil {
				t.Fatalf("step %d: Release of a hold whose place was taken = nil", step)
			}
			if !h.lapsed && err != nil {
				t.Fatalf("step %d: Release of a live hold = %v", step, err)
			}
		}
		now := float64(time.Now().UnixMilli())
		live := rdb.ZCount(ctx, semKey(name), "("+itoa(int64(now)), "+inf").Val()
		if live > n {
			t.Fatalf("step %d: %d live permits of %d", step, live, n)
		}
	}
	for _, h := range holds {
		h.l.Release(ctx)
	}
}

func itoa(v int64) string {
	if v == 0 {
		return "0"
	}
	var b []byte
	for v > 0 {
		b = append([]byte{byte('0' + v%10)}, b...)
		v /= 10
	}
	return string(b)
}

// A late copy of a hold's acquire, replayed after its Release (fast path
// taken at first), is refused and grants nothing; likewise for a waiter
// that left the queue.
func TestAdv4LateHoldAcquireCopy(t *testing.T) {
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.WithAutoExtend(false), dlock.LeaseTTL(10*time.Second))
	for _, what := range []any{"2", "r", "w"} {
		name := "adv4-late-acq-" + what.(string)
		var l *dlock.Lock
		var err error
		member := func(tok string) string { return tok }
		switch what {
		case "2":
			l, err = newSemaphore(t, c, name, 2).TryAcquire(ctx)
		case "r":
			l, err = newRW(t, c, name).Reader().TryAcquire(ctx)
			member = func(tok string) string { return "r:" + tok }
		default:
			l, err = newRW(t, c, name).Writer().TryAcquire(ctx)
			member = func(tok string) string { return "w:" + tok }
		}
		if err != nil {
			t.Fatal(err)
		}
		tok, key := l.Token(), l.Key()
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		keys := []string{key, key + ":fence", key + ":q", key + ":qw", key + ":r:" + tok}
		err = script.HoldAcquire.Run(ctx, rdb, keys, tok, 10000, 1, 10000, key+":ch", "PUBLISH", 10000, what).Err()
		if err == nil {
			t.Errorf("%s: a late acquire copy after release was granted", what)
		}
		if rdb.ZScore(ctx, key, member(tok)).Err() == nil {
			t.Errorf("%s: the late copy added its hold", what)
		}
		if rdb.Exists(ctx, key+":q").Val() != 0 {
			t.Errorf("%s: the late copy queued", what)
		}
	}
}
