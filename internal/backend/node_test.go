package backend

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/driver"
)

// infoConn is a driver's Conn that only says what it is; nothing is sent.
type infoConn struct {
	driver.Conn
	info driver.Info
}

func (c infoConn) Info() driver.Info { return c.info }

// Both constructors of a Node take from the client whether a lost reply
// may be asked again, announce with SPUBLISH on a Cluster, and count the
// append-only file as one acknowledgement more with durable grants; a
// driver's Node watches no Cluster's clock (which master read it is
// unknown), go-redis's does.
func TestNodeTakesRetriesAndPublishFromItsClient(t *testing.T) {
	t.Parallel()
	hook := &ClockHook{On: func() bool { return true }}
	for _, c := range []struct {
		name                    string
		n                       Node
		retries, clock, sharded bool
		replicas                int
	}{
		{"go-redis", NewNode(redis.NewClient(&redis.Options{}), Config{Clock: hook}), true, true, false, 0},
		{"go-redis without retries", NewNode(redis.NewClient(&redis.Options{MaxRetries: -1}), Config{Clock: hook}), false, true, false, 0},
		{"go-redis Cluster", NewNode(redis.NewClusterClient(&redis.ClusterOptions{MaxRetries: 3}), Config{Sharded: true, Clock: hook}), true, true, true, 0},
		{"go-redis with replica ack and durable grants",
			NewNode(redis.NewClient(&redis.Options{}), Config{Replicas: 2, Durable: time.Second}), true, false, false, 3},
		{"a driver", NewNodeFrom(infoConn{info: driver.Info{Retries: true}}, Config{Clock: hook}), true, true, false, 0},
		{"a driver without retries", NewNodeFrom(infoConn{}, Config{Clock: hook, Replicas: 1}), false, true, false, 1},
		{"a driver's Cluster", NewNodeFrom(infoConn{info: driver.Info{Cluster: true}}, Config{Sharded: true, Clock: hook}), false, false, true, 0},
		{"a driver's Cluster announcing with PUBLISH", NewNodeFrom(infoConn{info: driver.Info{Cluster: true}}, Config{Clock: hook}), false, false, false, 0},
	} {
		pub := "PUBLISH"
		if c.sharded {
			pub = "SPUBLISH"
		}
		if c.n.retries != c.retries || (c.n.clock != nil) != c.clock || c.n.pub != pub || c.n.replicas != c.replicas {
			t.Errorf("%s: retries %v, clock watched %v, %v, replicas %d; want %v, %v, %s, %d",
				c.name, c.n.retries, c.n.clock != nil, c.n.pub, c.n.replicas, c.retries, c.clock, pub, c.replicas)
		}
	}
}

// The fair scripts' packed arguments, built once, carry the fence window
// set last (a quorum node's is a day) and the Client's TTL; only a
// campaign's release announces.
func TestFairArgumentsCarryTheFenceWindowSetLast(t *testing.T) {
	t.Parallel()
	n := NewNode(redis.NewClient(&redis.Options{}), Config{TTL: 2 * time.Second, Sharded: true})
	for _, c := range []struct {
		window           time.Duration
		acq, rel, resign string
	}{
		{fenceWindow, "2000 SPUBLISH 60000 0", "SPUBLISH 60000 0", "SPUBLISH 60000 1"},
		{quorumFenceWindow, "2000 SPUBLISH 86400000 0", "SPUBLISH 86400000 0", "SPUBLISH 86400000 1"},
	} {
		n.setFenceWindow(c.window)
		if n.acqConf != c.acq || n.relConf != c.rel || n.resignConf != c.resign || n.fenceMS != c.window.Milliseconds() {
			t.Errorf("window %v: %q, %q, %q, fence %v; want %q, %q, %q", c.window, n.acqConf, n.relConf, n.resignConf, n.fenceMS, c.acq, c.rel, c.resign)
		}
	}
	if got, want := n.fairConf(time.Hour, true), "60000 SPUBLISH 86400000 1"; got != want {
		t.Errorf("a campaign's acquire of an hour: %q, want %q", got, want)
	}
}

// A Node that does not watch the clock ignores a server time an
// extension's reply carries, rather than failing on its missing watch.
func TestUnwatchedClockIgnoresAReading(t *testing.T) {
	t.Parallel()
	var w *clockWatch
	w.read(t.Context(), "k", time.Second, 1, time.Now(), time.Now())
	if w.on() {
		t.Error("an unwatched clock is on")
	}
}
