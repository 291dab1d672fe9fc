package dlock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
)

// A waiting Acquire over a quorum whose nodes' Redis clients are all closed
// ends with ErrClosed at once, as one on a single closed client does: no
// node can ever grant it, so its wait does not run on to its MaxWait (nor,
// without one, for ever).
func TestQuorumWaitWithEveryClientClosedEndsWithErrClosed(t *testing.T) {
	t.Parallel()
	_, nodes := startQuorum(t, 3)
	var mine []redis.UniversalClient
	for _, n := range nodes {
		mine = append(mine, redis.NewClient(&redis.Options{Addr: n.(*redis.Client).Options().Addr}))
	}
	c := newRedlock(t, mine, time.Second)
	t.Cleanup(func() { c.Close(t.Context()) })
	for _, m := range mine {
		m.Close()
	}
	const wait = 3 * time.Second
	start := time.Now()
	_, err := c.Acquire(t.Context(), "closed-quorum-wait", dlock.MaxWait(wait))
	if took := time.Since(start); !errors.Is(err, dlock.ErrClosed) || took >= wait {
		t.Errorf("the wait ended after %v with %v; want ErrClosed before its MaxWait (%v)", took.Round(time.Millisecond), err, wait)
	}
}
