package script

import (
	"strings"
	"testing"
	"time"

	"github.com/dlockio/dlock/internal/redistest"
)

// A force's markers must refuse a copy of a forced lease's acquire for as
// long as that copy could grant the lease: the TTL the acquire asked for,
// and the window beyond. A lease may be shortened after it was taken (an
// extension with a sequence number sets its expiry shorter, extend.lua),
// so the lock key's TTL at the force is no bound on it: a lease asked for
// 4 s, shortened to 100 ms, then forced with a 300 ms window, has its
// marker gone after 400 ms, and a late copy of its 4 s acquire that lands
// then takes the lock back for 4 s, though it was sent well within the
// lease's TTL and the window. The same for a reentrant lock's hold.
func TestForceReleaseRefusesALateAcquireOfAShortenedLease(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	ctx := t.Context()
	const window = 300 // ms, the force's ARGV[4] (a minute in dlock)
	revoked := func(what string, err error) {
		t.Helper()
		if err == nil || !strings.HasPrefix(err.Error(), "REVOKED") {
			t.Errorf("late copy of the forced %s's 4 s acquire, %v after the force (within its TTL and the window) = %v; want REVOKED", what, 500*time.Millisecond, err)
		}
	}

	// A plain lock.
	lock, marker, tok := "{p}", "{p}:r:tok", "tok"
	acquire := func() error { return Named("acquire").Run(ctx, rdb, []string{lock, marker}, tok, 4000).Err() }
	if err := acquire(); err != nil {
		t.Fatal(err)
	}
	if n, err := Named("extend").Run(ctx, rdb, []string{lock, marker}, tok, 100, "1").Int(); n != 1 || err != nil {
		t.Fatalf("shortening extension = %d, %v", n, err)
	}
	if n, err := ForceRelease.Run(ctx, rdb, []string{lock, marker}, tok, "ch", "PUBLISH", window).Int(); n != 1 || err != nil {
		t.Fatalf("force = %d, %v", n, err)
	}
	t.Logf("plain: marker lives %v after the force", rdb.PTTL(ctx, marker).Val())

	// A reentrant lock's hold.
	hkey, hmarker := "{h}", "{h}:r:hold"
	racquire := func() error {
		return Named("acquire_reentrant").Run(ctx, rdb, []string{hkey, "{h}:fence", hmarker}, "o", "hold", 4000, 60000).Err()
	}
	if err := racquire(); err != nil {
		t.Fatal(err)
	}
	fence := rdb.HGet(ctx, hkey, "fence").Val()
	if n, err := Named("extend_reentrant").Run(ctx, rdb, []string{hkey, hmarker}, "o", "hold", 100, "1").Int(); n != 1 || err != nil {
		t.Fatalf("shortening extension of the hold = %d, %v", n, err)
	}
	if n, err := ForceRelease.Run(ctx, rdb, []string{hkey, hmarker}, "o "+fence, "ch", "PUBLISH", window).Int(); n != 1 || err != nil {
		t.Fatalf("force of the reentrant lock = %d, %v", n, err)
	}
	t.Logf("reentrant: marker lives %v after the force", rdb.PTTL(ctx, hmarker).Val())

	time.Sleep(500 * time.Millisecond) // (past 100 ms + the window; well within 4 s + the window)
	revoked("plain lease", acquire())
	if d := rdb.PTTL(ctx, lock).Val(); d > time.Second {
		t.Errorf("the forced plain lease was granted back for %v", d)
	}
	revoked("reentrant hold", racquire())
	if d := rdb.PTTL(ctx, hkey).Val(); d > time.Second {
		t.Errorf("the forced reentrant hold was granted back for %v", d)
	}
}
