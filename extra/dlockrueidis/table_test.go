package dlockrueidis

import (
	"testing"

	"github.com/dlockio/dlock/driver"
	"github.com/dlockio/dlock/driver/drivertest"
)

func TestTable(t *testing.T) {
	conn := func(t *testing.T, addrs []string) driver.Conn { return Conn(client(t, addrs...)) }
	drivertest.Run(t, drivertest.Setup{
		Server:  func(t *testing.T, addr string) driver.Conn { return conn(t, []string{addr}) },
		Cluster: conn,
	})
}
