package redistest

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/dlockio/dlock/internal/redisserver"
)

// StartCluster builds a Cluster of n masters, each with replicas replicas,
// with redis-cli (or valkey-cli, see redisserver.CLI) --cluster create, and
// waits until every node reports cluster_state:ok and every replica's link
// to its master is up. It returns the servers (the masters first); their
// addresses seed a *redis.ClusterClient.
func StartCluster(tb testing.TB, n, replicas int) []*Server {
	tb.Helper()
	return StartClusterOf(tb, n, replicas, nil)
}

// StartClusterOf is StartCluster with each node i (the masters first)
// started with the options of(i) too, if of is not nil.
func StartClusterOf(tb testing.TB, n, replicas int, of func(i int) []Option) []*Server {
	tb.Helper()
	var nodes []*Server
	var addrs []string
	for i := range n * (1 + replicas) {
		opts := []Option{TCP(), Args("--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000")}
		if of != nil {
			opts = append(opts, of(i)...)
		}
		s := Start(tb, opts...)
		nodes = append(nodes, s)
		addrs = append(addrs, s.Addr())
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", fmt.Sprint(replicas), "--cluster-yes")
	cli, err := redisserver.CLI() // redis-cli, or the valkey-cli next to a valkey-server
	if err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	if out, err := exec.Command(cli, args...).CombinedOutput(); err != nil {
		tb.Fatalf("%s --cluster create: %v\n%s", cli, err, out)
	}
	ctx := context.Background()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		ok := true
		for _, s := range nodes {
			v, err := s.Do(ctx, "CLUSTER", "INFO")
			ok = ok && err == nil && strings.Contains(fmt.Sprint(v), "cluster_state:ok")
			r, err := s.Do(ctx, "INFO", "replication")
			ok = ok && err == nil && (strings.Contains(fmt.Sprint(r), "role:master") || strings.Contains(fmt.Sprint(r), "master_link_status:up"))
		}
		if ok {
			return nodes
		}
		if time.Now().After(deadline) {
			tb.Fatal("redistest: the cluster never reached cluster_state:ok")
		}
	}
}
