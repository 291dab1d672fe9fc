package dlock_test

import (
	"testing"

	"github.com/redis/go-redis/v9"
)

// channelListeners counts the clients that listen on name's channel on rdb
// (on a Cluster, on the master of name's slot), by SUBSCRIBE or by
// SSUBSCRIBE.
func channelListeners(t *testing.T, rdb redis.UniversalClient, name string) int64 {
	t.Helper()
	ch := "dlock:{" + name + "}:ch"
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		m, err := cc.MasterForKey(t.Context(), ch)
		if err != nil {
			return 0
		}
		rdb = m
	}
	plain, err := rdb.PubSubNumSub(t.Context(), ch).Result()
	if err != nil {
		t.Errorf("PUBSUB NUMSUB: %v", err)
	}
	sharded, err := rdb.PubSubShardNumSub(t.Context(), ch).Result()
	if err != nil {
		t.Errorf("PUBSUB SHARDNUMSUB: %v", err)
	}
	return plain[ch] + sharded[ch]
}

// listeningOnAll tells, for waitFor, whether someone listens on name's channel
// on every one of nodes: a waiter has subscribed before it sleeps.
func listeningOnAll(t *testing.T, name string, nodes ...redis.UniversalClient) func() bool {
	return func() bool {
		for _, n := range nodes {
			if channelListeners(t, n, name) == 0 {
				return false
			}
		}
		return true
	}
}

// queuedAndListening tells, for waitFor, whether n waiters are in name's
// queue on rdb and someone listens on its channel: queued waiters that a
// release can hand the lease to and wake.
func queuedAndListening(t *testing.T, rdb redis.UniversalClient, name string, n int64) func() bool {
	return func() bool {
		return rdb.LLen(t.Context(), "dlock:{"+name+"}:q").Val() == n && channelListeners(t, rdb, name) > 0
	}
}
