package dlockotel_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/internal/redisserver"
)

// addr is the Redis server of the examples, which TestMain starts.
var addr = "127.0.0.1:6379"

func TestMain(m *testing.M) {
	redis.SetLogger(quietLogger{}) // go-redis logs dial failures
	srv, err := redisserver.Start(redisserver.TCP())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	addr = srv.Addr()
	code := m.Run()
	srv.Stop()
	os.Exit(code)
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}
