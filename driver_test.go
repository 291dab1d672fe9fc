package dlock_test

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/driver"
	"github.com/dlockio/dlock/driver/drivertest"
	"github.com/dlockio/dlock/internal/goredisdriver"
)

// The driver road (NewFrom), run on go-redis: the same table every driver
// passes (extra/dlockrueidis, extra/dlockvalkey, extra/dlockredigo).
func TestDriverTable(t *testing.T) {
	t.Parallel()
	drivertest.Run(t, drivertest.Setup{
		Server: func(t *testing.T, addr string) driver.Conn {
			rdb := redis.NewClient(&redis.Options{Addr: addr})
			t.Cleanup(func() { rdb.Close() })
			return goredisdriver.Conn(rdb)
		},
		Sentinel: func(t *testing.T, master string, addrs []string) driver.Conn {
			rdb := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: master, SentinelAddrs: addrs})
			t.Cleanup(func() { rdb.Close() })
			return goredisdriver.Conn(rdb)
		},
		Cluster: func(t *testing.T, addrs []string) driver.Conn {
			rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
			t.Cleanup(func() { rdb.Close() })
			return goredisdriver.Conn(rdb)
		},
	})
}
