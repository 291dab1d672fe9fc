package backend

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/internal/redistest"
)

// A quorum's force with a node failed reports no error only if each lease
// it ended was ended on a majority, whose markers then refuse it: a lease
// ended on fewer (another lease beside it, a split) could take a majority
// again by its requests still on their way. Five nodes, the last one
// unreachable; each case sets the lock's holder on the others.
func TestQuorumForceWithANodeFailedIsNoErrorOnlyIfEachEndedLeaseEndedOnAMajority(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		holders []string // per reachable node ("": free)
		settled bool
	}{
		{[]string{"a", "a", "a", ""}, true},
		{[]string{"a", "a", "a", "a"}, true},
		{[]string{"a", "a", "", ""}, false},
		{[]string{"a", "a", "a", "b"}, false},
		{[]string{"", "", "", ""}, false},
	} {
		t.Run(strings.Join(c.holders, ","), func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			var nodes []Node
			for _, holder := range c.holders {
				rdb := redistest.Start(t).Client(t)
				if holder != "" {
					rdb.Set(ctx, "dlock:{forced}", holder, time.Minute)
				}
				nodes = append(nodes, NewNode(rdb, Config{TTL: 10 * time.Second}))
			}
			dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
			t.Cleanup(func() { dead.Close() })
			q := NewQuorum(append(nodes, NewNode(dead, Config{TTL: 10 * time.Second})), time.Second, new(Tracker))
			k := KeysFor("dlock:", "forced")
			ok, err := q.Force(ctx, &k)
			ended := strings.Join(c.holders, "") != ""
			if c.settled && (!ok || err != nil) {
				t.Errorf("Force = %v, %v; want true, nil", ok, err)
			}
			if !c.settled && (ok != ended || err == nil || !strings.Contains(fmt.Sprint(err), "node 4")) {
				t.Errorf("Force = %v, %v; want %v and an error that names node 4", ok, err, ended)
			}
		})
	}
}
