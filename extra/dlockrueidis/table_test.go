package dlockrueidis

import (
	"flag"
	"testing"

	"github.com/redis/rueidis"

	"github.com/dlockio/dlock/driver"
	"github.com/dlockio/dlock/driver/drivertest"
)

// FullTier reports whether the whole driver table and the fault checker's
// long budget run: always here. The valkey-go copy of these tests defines a
// -full flag, and without it runs a smoke subset of the table and a short
// budget. (Exported for the external test package's fault checker.)
func FullTier() bool {
	f := flag.Lookup("full")
	return f == nil || f.Value.String() == "true"
}

func TestDriverTable(t *testing.T) {
	t.Parallel()
	conn := func(t *testing.T, addrs []string) driver.Conn { return Conn(client(t, addrs...)) }
	drivertest.Run(t, drivertest.Setup{
		Smoke:   !FullTier(),
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
