package dlockrueidis

import (
	"testing"

	"github.com/redis/rueidis"

	"github.com/dlockio/dlock/driver"
	"github.com/dlockio/dlock/driver/drivertest"
)

func TestTable(t *testing.T) {
	t.Parallel()
	conn := func(t *testing.T, addrs []string) driver.Conn { return Conn(client(t, addrs...)) }
	drivertest.Run(t, drivertest.Setup{
		Server:  func(t *testing.T, addr string) driver.Conn { return conn(t, []string{addr}) },
		Cluster: conn,
		Sentinel: func(t *testing.T, master string, addrs []string) driver.Conn {
			c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs, Sentinel: rueidis.SentinelOption{MasterSet: master}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			return Conn(c)
		},
	})
}
