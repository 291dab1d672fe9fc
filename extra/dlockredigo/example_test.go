package dlockredigo_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/dlockio/dlock/extra/dlockredigo"
	"github.com/dlockio/dlock/internal/redisserver"
	"github.com/dlockio/dlock/internal/torture"
)

// addr is the Redis server of the example: a private redis-server that
// TestMain starts.
var addr = "127.0.0.1:6379"

func TestMain(m *testing.M) {
	torture.Driver = tortureConn
	if path := os.Getenv(torture.WorkerEnv); path != "" { // a fault checker's worker process
		os.Exit(torture.RunProcess(path))
	}
	s, err := redisserver.Start(redisserver.TCP())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	addr = s.Addr()
	code := m.Run()
	s.Stop()
	os.Exit(code)
}

func ExampleNew() {
	pool := &redis.Pool{
		MaxIdle: 16,
		DialContext: func(ctx context.Context) (redis.Conn, error) {
			return redis.DialContext(ctx, "tcp", addr)
		},
	}
	defer pool.Close()
	c, err := dlockredigo.New(pool)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close(context.Background())

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := c.Acquire(ctx, "reports:nightly")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("holding", l.Name())
	if err := l.Release(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("released")
	// Output:
	// holding reports:nightly
	// released
}
