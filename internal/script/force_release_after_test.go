package script

import (
	"strings"
	"testing"
	"time"

	"github.com/dlockio/dlock/internal/redistest"
)

// A forced lease's marker refuses a late copy of its acquire for the lock
// key's TTL and the window beyond, also once its holder, not knowing of the
// force, releases the lease: the release finds the lock not its own and
// marks the lease ended for its own window, min(TTL, a minute), which must
// not cut the force's marker short. A lease of 4 s forced with a 300 ms
// window, then released with the 300 ms window a release sends: a late copy
// of its 4 s acquire 500 ms later must be refused. The same for a
// semaphore's permit (hold_release.lua) and a reentrant lock's hold.
func TestAReleaseAfterAForceKeepsTheForcesMarker(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	ctx := t.Context()
	const window = 300 // ms: the force's ARGV[4], and the release's marker window (a minute each in dlock)
	force := func(keys []string, holding string) {
		t.Helper()
		if n, err := ForceRelease.Run(ctx, rdb, keys, holding, "ch", "PUBLISH", window).Int(); n != 1 || err != nil {
			t.Fatalf("force of %s = %d, %v", keys[0], n, err)
		}
	}
	type late struct {
		what    string
		acquire func() error
		key     string
	}
	var lates []late

	// A plain lock.
	acquire := func() error { return Named("acquire").Run(ctx, rdb, []string{"{p}", "{p}:r:tok"}, "tok", 4000).Err() }
	if err := acquire(); err != nil {
		t.Fatal(err)
	}
	force([]string{"{p}", "{p}:r:tok"}, "tok")
	if n, err := Named("release").Run(ctx, rdb, []string{"{p}", "{p}:w", "{p}:r:tok"}, "tok", "PUBLISH", window).Int(); n != 0 || err != nil {
		t.Fatalf("release after the force = %d, %v; want 0", n, err)
	}
	lates = append(lates, late{"plain lease", acquire, "{p}"})

	// A semaphore's permit.
	hold := func() error {
		return Named("hold_acquire").Run(ctx, rdb, []string{"{s}", "{s}:fence", "{s}:q", "{s}:qw", "{s}:r:tok"}, "tok", 4000, 0, window, "ch", "PUBLISH", 60000, 2).Err()
	}
	if err := hold(); err != nil {
		t.Fatal(err)
	}
	force([]string{"{s}", "{s}:r:tok"}, "tok")
	if n, err := Named("hold_release").Run(ctx, rdb, []string{"{s}", "{s}:fence", "{s}:q", "{s}:qw", "{s}:r:tok"}, "tok", "ch", "PUBLISH", 60000, 1, window).Int(); n != 0 || err != nil {
		t.Fatalf("permit release after the force = %d, %v; want 0", n, err)
	}
	lates = append(lates, late{"semaphore permit", hold, "{s}"})

	// A reentrant lock's hold.
	racquire := func() error {
		return Named("acquire_reentrant").Run(ctx, rdb, []string{"{h}", "{h}:fence", "{h}:r:hold"}, "o", "hold", 4000, 60000).Err()
	}
	if err := racquire(); err != nil {
		t.Fatal(err)
	}
	force([]string{"{h}", "{h}:r:hold"}, "o "+rdb.HGet(ctx, "{h}", "fence").Val())
	if n, err := Named("release_reentrant").Run(ctx, rdb, []string{"{h}", "{h}:r:hold"}, "o", "hold", "ch", "PUBLISH", window).Int(); n != 0 || err != nil {
		t.Fatalf("hold release after the force = %d, %v; want 0", n, err)
	}
	lates = append(lates, late{"reentrant hold", racquire, "{h}"})

	time.Sleep(500 * time.Millisecond) // (past the release's window; well within the lease's 4 s and the force's window)
	for _, l := range lates {
		if err := l.acquire(); err == nil || !strings.HasPrefix(err.Error(), "REVOKED") {
			t.Errorf("late copy of the forced %s's acquire, released after the force, 500ms later = %v; want REVOKED (the lock is now held for %v)", l.what, err, rdb.PTTL(ctx, l.key).Val())
		}
	}
}
