package backend

import (
	"testing"
	"time"

	"github.com/dlockio/dlock/internal/redistest"
)

// A force marks the leases it ends for as long as a copy of one of their
// acquires could still land and grant the lease: the TTL that acquire
// asked for, and a minute. A lease asked for three minutes and then
// shortened to a second (an extension with a sequence number, as Extend
// with less than was asked, a Resume, or a watchdog run near the max-hold
// cap sends) has a lock key of a second at the force, but a late copy of
// its acquire still grants it for three minutes: with scripts or without,
// its marker must outlive the three minutes, not the second.
func TestForceMarksAShortenedLeaseForTheTTLItsAcquireAsked(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	ctx := t.Context()
	n := NewNode(rdb, Config{TTL: 10 * time.Second})
	for name, b := range map[string]Backend{"node": n, "no scripts": NoScripts{n}} {
		k := KeysFor("dlock:", "shortened-"+name)
		c := &Claim{Keys: k, Kind: PlainLock}
		c.SetToken("tok")
		if g, err := b.Acquire(ctx, c, 3*time.Minute, false); err != nil || !g.Held {
			t.Fatalf("%s: Acquire(3m) = %+v, %v", name, g, err)
		}
		if ok, err := b.Extend(ctx, c, time.Second, 1); !ok || err != nil {
			t.Fatalf("%s: Extend(1s, numbered) = %v, %v", name, ok, err)
		}
		if ok, err := b.Force(ctx, &k); !ok || err != nil {
			t.Fatalf("%s: Force = %v, %v", name, ok, err)
		}
		if left := rdb.PTTL(ctx, c.Rev).Val(); left < 3*time.Minute {
			t.Errorf("%s: the forced lease's marker lives %v; a late copy of its 3m acquire landing after that takes the lock back for 3m", name, left)
		}
	}
}
