package dlock_test

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
)

// Locking many distinct names once each leaves nothing in Redis once the
// windows have passed: the tombstones are gone after min(TTL, 1 minute), a
// fence counter a minute after its fence, and memory is back where it was.
// (The previous data model kept a fence key per name for good.)
func TestNothingLeftPerName(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a long fault/timing scenario; run without -short")
	}
	_, rdb := setup(t)
	ctx := t.Context()
	const names, workers = 10000, 32
	ttl := 1500 * time.Millisecond // the tombstones' window too
	for _, fair := range []bool{true, false} {
		t.Run(fmt.Sprint("fair=", fair), func(t *testing.T) {
			rdb.FlushAll(ctx)
			c := newClient(t, rdb, dlock.LeaseTTL(ttl), waiting(fair), dlock.WithAutoExtend(false))
			lockEach := func(prefix string, n int) { lockEachOnce(t, c, prefix, n, workers) }
			// The baseline: the Client's connections made and the scripts
			// loaded, and nothing of dlock's in Redis.
			lockEach("warm", workers)
			waitFor(ttl+2*time.Second, func() bool { return len(keysBesidesFences(t, rdb)) == 0 }) // the warm names' tombstones gone
			rdb.Del(ctx, rdb.Keys(ctx, "dlock:*").Val()...)
			before := usedMemory(t, rdb)
			lockEach("order", names)
			if n := keysUnder(t, rdb, "dlock:"); n == 0 { // (the first ones' windows may be over already)
				t.Errorf("right after the releases: no keys, want the latest names' tombstones")
			}
			var left []string
			waitFor(ttl+2*time.Second, func() bool { left = keysBesidesFences(t, rdb); return len(left) == 0 })
			if len(left) > 0 {
				t.Errorf("%d keys left after the tombstone window, e.g. %v", len(left), left[:min(3, len(left))])
			}
			iter := rdb.Scan(ctx, 0, "dlock:*:fence", 1000).Iterator()
			fences := 0
			for iter.Next(ctx) {
				fences++
				if d := rdb.PTTL(ctx, iter.Val()).Val(); d <= 0 || d > time.Minute {
					t.Errorf("%s lives %v, want at most the fence window (1m)", iter.Val(), d)
				}
			}
			if fences != names/100 {
				t.Errorf("%d fence counters, want one per name that asked for a fence (%d)", fences, names/100)
			}
			if keys := rdb.Keys(ctx, "dlock:*:fence").Val(); len(keys) > 0 {
				rdb.Del(ctx, keys...) // as the fence window would, a minute later
			}
			// Redis shrinks its key tables in the background (serverCron);
			// used_memory also counts the connections' buffers, which move
			// by tens of KB whatever the keys: the bound is per name, far
			// below what a key per name would cost.
			var grown int64
			const most = 16 * names
			waitFor(3*time.Second, func() bool { grown = usedMemory(t, rdb) - before; return grown <= most })
			if grown > most {
				t.Errorf("used_memory grew by %d bytes after %d names were locked once, want under 16 bytes per name (the previous model kept ~100 bytes per name)", grown, names)
			}
		})
	}
}

// lockEachOnce locks and releases prefix:0 … prefix:n-1 once each through
// c, with workers goroutines; every hundredth asks for its fence.
func lockEachOnce(t *testing.T, c *dlock.Client, prefix string, n, workers int) {
	t.Helper()
	ctx := t.Context()
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				name := fmt.Sprintf("%s:%d", prefix, i)
				l, err := c.TryAcquire(ctx, name)
				if err == nil && i%100 == 0 {
					_, err = l.Fence(ctx) // some ask for a fence: a counter for a minute
				}
				if err == nil {
					err = l.Release(ctx)
				}
				if err != nil {
					errs <- fmt.Errorf("%s: %w", name, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// keysBesidesFences lists dlock's keys in rdb other than fence counters.
func keysBesidesFences(t *testing.T, rdb *redis.Client) []string {
	ctx := t.Context()
	var left []string
	iter := rdb.Scan(ctx, 0, "dlock:*", 1000).Iterator()
	for iter.Next(ctx) {
		if !strings.HasSuffix(iter.Val(), ":fence") {
			left = append(left, iter.Val())
		}
	}
	return left
}

func usedMemory(t *testing.T, rdb *redis.Client) int64 {
	t.Helper()
	for _, line := range strings.Split(rdb.Info(t.Context(), "memory").Val(), "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	t.Fatal("INFO memory has no used_memory")
	return 0
}

func keysUnder(t *testing.T, rdb *redis.Client, prefix string) int {
	n := 0
	iter := rdb.Scan(t.Context(), 0, prefix+"*", 1000).Iterator()
	for iter.Next(t.Context()) {
		n++
	}
	return n
}
