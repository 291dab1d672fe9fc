// Package redistest starts real redis-server processes for tests and
// benchmarks and injects faults into them: Pause (SIGSTOP), Resume, Kill
// (SIGKILL) and Restart (empty, without persistence). Every server is
// stopped, and its directory removed, in the test's cleanup. A missing
// redis-server binary fails the test with instructions to install it.
package redistest

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/internal/redisserver"
)

// Option configures a server; see redisserver.TCP and redisserver.Args.
type Option = redisserver.Option

// TCP makes the server listen on a free port of 127.0.0.1 instead of a unix socket.
func TCP() Option { return redisserver.TCP() }

// Args appends redis-server command-line arguments.
func Args(args ...string) Option { return redisserver.Args(args...) }

// Valkey makes the server a valkey-server (see redisserver.ValkeyBinary), for
// a test of what Redis 7.0 lacks; it skips tb when there is none.
func Valkey(tb testing.TB) Option {
	tb.Helper()
	bin := redisserver.ValkeyBinary()
	if bin == "" {
		tb.Skipf("no valkey-server: set %s, or put valkey-server in PATH", redisserver.ValkeyEnv)
	}
	return redisserver.Bin(bin)
}

// Sentinel makes the server a Sentinel; see redisserver.Sentinel.
func Sentinel(name string, masterPort, quorum int, downAfter, failoverTimeout time.Duration) Option {
	return redisserver.Sentinel(name, masterPort, quorum, downAfter, failoverTimeout)
}

// Server is a redis-server process owned by a test.
type Server struct {
	*redisserver.Server
	tb testing.TB
}

// Start starts a redis-server, waits until it answers PING, and stops it in
// tb's cleanup.
func Start(tb testing.TB, opts ...Option) *Server {
	tb.Helper()
	s, err := redisserver.Start(opts...)
	if err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	tb.Cleanup(s.Stop)
	return &Server{Server: s, tb: tb}
}

// Client returns a new go-redis client for the server, closed in tb's cleanup.
func (s *Server) Client(tb testing.TB) *redis.Client {
	c := redis.NewClient(s.Options())
	tb.Cleanup(func() { c.Close() })
	return c
}

// Pause freezes the server with SIGSTOP.
func (s *Server) Pause() { s.check(s.Server.Pause()) }

// Resume continues a paused server with SIGCONT.
func (s *Server) Resume() { s.check(s.Server.Resume()) }

// Restart kills the server and starts an empty one on the same address.
func (s *Server) Restart() { s.check(s.Server.Restart()) }

func (s *Server) check(err error) {
	if err != nil {
		s.tb.Helper()
		s.tb.Fatal(err)
	}
}
