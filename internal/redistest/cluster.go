package redistest

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// StartCluster builds a Cluster of n masters (no replicas) with redis-cli
// --cluster create and waits until every node reports cluster_state:ok.
// It returns the servers; their addresses seed a *redis.ClusterClient.
func StartCluster(tb testing.TB, n int) []*Server {
	tb.Helper()
	var nodes []*Server
	var addrs []string
	for range n {
		s := Start(tb, TCP(), Args("--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000"))
		nodes = append(nodes, s)
		addrs = append(addrs, s.Addr())
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		tb.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	ctx := context.Background()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		ok := true
		for _, s := range nodes {
			v, err := s.Do(ctx, "CLUSTER", "INFO")
			ok = ok && err == nil && strings.Contains(fmt.Sprint(v), "cluster_state:ok")
		}
		if ok {
			return nodes
		}
		if time.Now().After(deadline) {
			tb.Fatal("redistest: the cluster never reached cluster_state:ok")
		}
	}
}
