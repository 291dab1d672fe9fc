package dlock_test

import (
	"math"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/driver"
	"github.com/dlockio/dlock/internal/goredisdriver"
)

// Each constructor refuses each invalid option, and each option that does
// not apply to it, in its own words; of several, the first refusal is
// reported: an option's own check (in the order given) before the checks
// of the options together (WatchLoss before the drift), before the
// constructor's own (in a fixed order, whatever the options' order).
func TestConstructorsRefuseEachInvalidOptionInItsOwnWords(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	rt := rdb.Options().ReadTimeout
	conn := goredisdriver.Conn(rdb)
	nodes := []redis.UniversalClient{rdb, rdb, rdb} // never dialled here
	conns := []driver.Conn{conn, conn, conn}
	newOf := func(opts ...dlock.Option) func() (*dlock.Client, error) {
		return func() (*dlock.Client, error) { return dlock.New(rdb, opts...) }
	}
	fromOf := func(opts ...dlock.Option) func() (*dlock.Client, error) {
		return func() (*dlock.Client, error) { return dlock.NewFrom(conn, opts...) }
	}
	redlockOf := func(timeout time.Duration, opts ...dlock.Option) func() (*dlock.Client, error) {
		return func() (*dlock.Client, error) { return dlock.NewRedlock(nodes, timeout, opts...) }
	}
	checkRefusals(t, []refusal{
		{"New, bad prefix", newOf(dlock.WithPrefix("a}")), `WithPrefix("a}"): the prefix must not contain '{' or '}'`},
		{"New, negative drift", newOf(dlock.WithDrift(-time.Millisecond)), "WithDrift(-1ms): the drift must not be negative"},
		{"New, drift of the TTL", newOf(dlock.LeaseTTL(time.Second), dlock.WithDrift(time.Second)), "WithDrift(1s): the drift must be below the TTL (1s)"},
		{"New, negative replicas", newOf(dlock.WithReplicaAck(-1, time.Second)), "WithReplicaAck(-1, 1s): need n ≥ 0 and a timeout of at least 1ms"},
		{"New, replica ack without a timeout", newOf(dlock.WithReplicaAck(2, 0)), "WithReplicaAck(2, 0s): need n ≥ 0 and a timeout of at least 1ms"},
		{"New, no durable timeout", newOf(dlock.WithDurableGrants(0)), "WithDurableGrants(0s): need a timeout of at least 1ms"},
		// (WAIT and WAITAOF count whole milliseconds: under one, they would wait for ever.)
		{"New, a replica ack under a millisecond", newOf(dlock.WithReplicaAck(1, 500*time.Microsecond)), "WithReplicaAck(1, 500µs): need n ≥ 0 and a timeout of at least 1ms"},
		{"New, a durable wait under a millisecond", newOf(dlock.WithDurableGrants(999 * time.Microsecond)), "WithDurableGrants(999µs): need a timeout of at least 1ms"},
		{"New, a durable wait and a replica ack whose sum wraps", newOf(dlock.WithDurableGrants(time.Millisecond), dlock.WithReplicaAck(1, math.MaxInt64)),
			"WithDurableGrants(1ms): the wait must end before the Redis client's read timeout (" + rt.String() + "), which would cut it off as a lost reply"},
		{"New, a durable wait past the read timeout", newOf(dlock.WithDurableGrants(time.Hour)),
			"WithDurableGrants(1h0m0s): the wait must end before the Redis client's read timeout (" + rt.String() + "), which would cut it off as a lost reply"},
		{"New, a replica ack past the read timeout", newOf(dlock.WithReplicaAck(1, rt)),
			"WithReplicaAck(1, " + rt.String() + "): the wait must end before the Redis client's read timeout (" + rt.String() + "), which would cut it off as a lost reply"},
		{"New, a durable wait and a replica ack past the read timeout", newOf(dlock.WithDurableGrants(time.Millisecond), dlock.WithReplicaAck(1, rt)),
			"WithDurableGrants(1ms): the wait must end before the Redis client's read timeout (" + rt.String() + "), which would cut it off as a lost reply"},
		{"New, nil option", newOf(nil), "option 1 is nil"},
		{"New, nil second option", newOf(dlock.WithPrefix("p:"), nil), "option 2 is nil"},
		{"New, WatchLoss without the watchdog", newOf(dlock.WatchLoss(true), dlock.WithAutoExtend(false)),
			"WatchLoss(true): the watchdog makes the checks, and WithAutoExtend(false) turned it off"},
		{"New, short TTL", newOf(dlock.LeaseTTL(10 * time.Millisecond)), "LeaseTTL(10ms): the TTL must be at least 30ms"},
		{"New, negative wait", newOf(dlock.MaxWait(-time.Second)), "MaxWait(-1s): the wait must not be negative"},
		{"New, short deadlock check", newOf(dlock.DeadlockCheck(time.Millisecond)), "DeadlockCheck(1ms): the threshold must be 0 (off) or 10ms to 24h0m0s"},
		{"New, deadlock check of a century", newOf(dlock.DeadlockCheck(100 * 365 * 24 * time.Hour)), "DeadlockCheck(876000h0m0s): the threshold must be 0 (off) or 10ms to 24h0m0s"},
		{"New, short TTL, then bad prefix", newOf(dlock.LeaseTTL(10*time.Millisecond), dlock.WithPrefix("{")), "LeaseTTL(10ms): the TTL must be at least 30ms"},
		{"New, WatchLoss without the watchdog, drift past the TTL", newOf(dlock.WithDrift(time.Hour), dlock.WithAutoExtend(false), dlock.WatchLoss(true)),
			"WatchLoss(true): the watchdog makes the checks, and WithAutoExtend(false) turned it off"},
		{"New, WatchLoss without the watchdog, then bad prefix", newOf(dlock.WithAutoExtend(false), dlock.WatchLoss(true), dlock.WithPrefix("{")),
			`WithPrefix("{"): the prefix must not contain '{' or '}'`},
		{"New, drift past the TTL, durable wait past the read timeout", newOf(dlock.WithDurableGrants(time.Hour), dlock.WithDrift(time.Hour)),
			"WithDrift(1h0m0s): the drift must be below the TTL (10s)"},
		{"NewFrom, replica ack", fromOf(dlock.WithReplicaAck(1, time.Second)), "NewFrom: WithReplicaAck needs a go-redis client (New)"},
		{"NewFrom, durable grants", fromOf(dlock.WithDurableGrants(time.Second)), "NewFrom: WithDurableGrants needs a go-redis client (New)"},
		{"NewFrom, no scripts", fromOf(dlock.WithoutScripts()), "WithoutScripts(): the script-free mode runs on one go-redis client (New), not a quorum or a driver"},
		{"NewFrom, no scripts, durable grants, replica ack", fromOf(dlock.WithoutScripts(), dlock.WithDurableGrants(time.Second), dlock.WithReplicaAck(1, time.Second)),
			"NewFrom: WithReplicaAck needs a go-redis client (New)"},
		{"NewFrom, no scripts, durable grants", fromOf(dlock.WithoutScripts(), dlock.WithDurableGrants(time.Second)), "NewFrom: WithDurableGrants needs a go-redis client (New)"},
		{"NewFrom, no scripts, nil option", fromOf(dlock.WithoutScripts(), nil), "option 2 is nil"},
		{"NewRedlock, replica ack", redlockOf(0, dlock.WithReplicaAck(1, time.Second)), "WithReplicaAck(1, 1s): does not apply to a quorum of independent masters"},
		{"NewRedlock, durable grants", redlockOf(0, dlock.WithDurableGrants(time.Second)), "WithDurableGrants(1s): not available over a quorum"},
		{"NewRedlock, no scripts", redlockOf(0, dlock.WithoutScripts()), "WithoutScripts(): the script-free mode runs on one go-redis client (New), not a quorum or a driver"},
		{"NewRedlock, TTL of the node timeout", redlockOf(time.Second, dlock.LeaseTTL(time.Second)), "LeaseTTL(1s): over a quorum the TTL must be above the per-node timeout (1s)"},
		{"NewRedlock, no scripts, TTL below the node timeout", redlockOf(time.Minute, dlock.WithoutScripts()), "LeaseTTL(10s): over a quorum the TTL must be above the per-node timeout (1m0s)"},
		{"NewRedlock, durable grants, TTL below the node timeout", redlockOf(time.Minute, dlock.WithDurableGrants(time.Second)), "WithDurableGrants(1s): not available over a quorum"},
		{"NewRedlock, no scripts, durable grants, replica ack", redlockOf(0, dlock.WithoutScripts(), dlock.WithDurableGrants(time.Second), dlock.WithReplicaAck(1, time.Second)),
			"WithReplicaAck(1, 1s): does not apply to a quorum of independent masters"},
		{"NewRedlockFrom, no scripts", func() (*dlock.Client, error) { return dlock.NewRedlockFrom(conns, 0, dlock.WithoutScripts()) },
			"WithoutScripts(): the script-free mode runs on one go-redis client (New), not a quorum or a driver"},
	})
}
