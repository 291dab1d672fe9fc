package dlock_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/goredisdriver"
)

// A constructor given an invalid option reports that option, as the caller
// wrote it, even when a value it was given would also be refused by the
// constructor's own checks (an option that needs go-redis, a quorum's TTL
// against its node timeout, a durable wait past the read timeout, a kind
// the backend does not carry).
func TestConstructorsReportAnInvalidOptionBeforeTheirOwnRefusals(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	conn := goredisdriver.Conn(rdb)
	nodes := []redis.UniversalClient{rdb, rdb, rdb} // never dialled here
	checkRefusals(t, []refusal{
		{"NewFrom, replica ack without a timeout", func() (*dlock.Client, error) {
			return dlock.NewFrom(conn, dlock.WithReplicaAck(1, 0))
		}, "WithReplicaAck(1, 0s): need n ≥ 0 and a timeout of at least 1ms"},
		{"NewFrom, bad prefix, then durable grants", func() (*dlock.Client, error) {
			return dlock.NewFrom(conn, dlock.WithPrefix("a{"), dlock.WithDurableGrants(time.Second))
		}, `WithPrefix("a{"): the prefix must not contain '{' or '}'`},
		{"NewFrom, no durable timeout, then no scripts", func() (*dlock.Client, error) {
			return dlock.NewFrom(conn, dlock.WithDurableGrants(-time.Second), dlock.WithoutScripts())
		}, "WithDurableGrants(-1s): need a timeout of at least 1ms"},
		{"New, negative drift, then a durable wait past the read timeout", func() (*dlock.Client, error) {
			return dlock.New(rdb, dlock.WithDrift(-time.Millisecond), dlock.WithDurableGrants(time.Hour))
		}, "WithDrift(-1ms): the drift must not be negative"},
		{"New, a durable wait past the read timeout, then a bad prefix", func() (*dlock.Client, error) {
			return dlock.New(rdb, dlock.WithDurableGrants(time.Hour), dlock.WithPrefix("}"))
		}, `WithPrefix("}"): the prefix must not contain '{' or '}'`},
		{"NewRedlock, negative replicas, then no scripts", func() (*dlock.Client, error) {
			return dlock.NewRedlock(nodes, 0, dlock.WithReplicaAck(-1, time.Second), dlock.WithoutScripts())
		}, "WithReplicaAck(-1, 1s): need n ≥ 0 and a timeout of at least 1ms"},
		{"NewRedlock, bad prefix, TTL below the node timeout", func() (*dlock.Client, error) {
			return dlock.NewRedlock(nodes, time.Minute, dlock.WithPrefix("a{"))
		}, `WithPrefix("a{"): the prefix must not contain '{' or '}'`},
		{"NewRedlock, TTL below MinTTL and the node timeout", func() (*dlock.Client, error) {
			return dlock.NewRedlock(nodes, time.Second, dlock.LeaseTTL(10*time.Millisecond))
		}, "LeaseTTL(10ms): the TTL must be at least 30ms"},
		{"NewRedlock, reentrant, TTL below the node timeout", func() (*dlock.Client, error) {
			return dlock.NewRedlock(nodes, time.Minute, dlock.WithReentrant(true))
		}, "LeaseTTL(10s): over a quorum the TTL must be above the per-node timeout (1m0s)"},
	})
}

// refusal is a constructor's call and the message of its refusal, after
// "dlock: invalid argument: ".
type refusal struct {
	name string
	new  func() (*dlock.Client, error)
	want string
}

// checkRefusals checks that each call returns no Client and an error
// wrapping ErrInvalid with its message.
func checkRefusals(t *testing.T, calls []refusal) {
	t.Helper()
	for _, tt := range calls {
		c, err := tt.new()
		if c != nil || !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("%s: = %v, %v; want no Client and ErrInvalid", tt.name, c, err)
			continue
		}
		if got := strings.TrimPrefix(err.Error(), "dlock: invalid argument: "); got != tt.want {
			t.Errorf("%s: error %q, want %q", tt.name, err, "dlock: invalid argument: "+tt.want)
		}
	}
}
