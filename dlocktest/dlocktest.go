// Package dlocktest helps test code that takes dlock locks, against a real
// Redis: it starts a private redis-server for a test, and simulates what
// such code must survive — a lock held by someone else (Hold), a lease lost
// while its holder works (Lose), a server that freezes, dies or comes back
// empty.
//
//	func TestNightlyReport(t *testing.T) {
//		c := dlocktest.NewClient(t)                // a Client on a private redis-server
//		release := dlocktest.Hold(t, c, "reports") // another instance holds the lock
//		if err := runReport(t.Context(), c); !errors.Is(err, dlock.ErrNotAcquired) {
//			t.Fatalf("runReport with the lock taken = %v", err)
//		}
//		release()
//		…
//	}
//
// Code under test should take a [dlock.Locker] (which *dlock.Client
// implements) rather than build its own Client, so that a test can hand it
// one on the private server.
//
// The servers are redis-server processes from PATH, or the binary named by
// the environment variable REDIS_SERVER (a Valkey server works too); a test
// that cannot start one fails, saying how to install it. Each listens on a
// unix socket in a temporary directory (TCP on a free loopback port with
// the TCP option) and is stopped, its directory removed, when the test ends.
//
// # Without redis-server: miniredis
//
// dlock's scripts run on miniredis (github.com/alicebob/miniredis/v2, which
// runs Lua), and an acquire, release, fence and Inspect behave there as on
// Redis. Time is the difference: miniredis expires keys only when the test
// calls its FastForward, so a lease whose holder is gone is never freed
// by the clock, and a holder whose watchdog is on keeps extending its lease
// until a FastForward past its TTL makes it lost (Done closes at the next
// extension). Tests of waiting, expiry and loss are therefore driven by
// FastForward there, and fair waiters are woken by pub/sub as on Redis. Use
// a real server where you can: it is what dlock is tested against.
package dlocktest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/redisserver"
)

// Option configures a server started by Start: TCP, Args.
type Option struct {
	o redisserver.Option
}

// TCP makes the server listen on a free port of 127.0.0.1 instead of a unix
// socket.
func TCP() Option { return Option{redisserver.TCP()} }

// Args appends redis-server command-line arguments, e.g.
// Args("--appendonly", "yes").
func Args(args ...string) Option { return Option{redisserver.Args(args...)} }

// Server is a private redis-server owned by one test.
type Server struct {
	s  *redisserver.Server
	tb testing.TB
}

// Start starts a redis-server, waits until it answers PING, and stops it
// when the test ends. It fails the test if no server can be started.
func Start(tb testing.TB, opts ...Option) *Server {
	tb.Helper()
	var ropts []redisserver.Option
	for _, o := range opts {
		if o.o != nil { // the zero Option changes nothing
			ropts = append(ropts, o.o)
		}
	}
	s, err := redisserver.Start(ropts...)
	if err != nil {
		tb.Fatalf("dlocktest: %v", err)
	}
	tb.Cleanup(s.Stop)
	return &Server{s: s, tb: tb}
}

// Addr returns the server's address: a unix socket path, or host:port with
// the TCP option.
func (s *Server) Addr() string { return s.s.Addr() }

// URL returns a unix:// or redis:// URL of the server.
func (s *Server) URL() string { return s.s.URL() }

// Options returns go-redis options that reach the server.
func (s *Server) Options() *redis.Options { return s.s.Options() }

// Client returns a new go-redis client of the server, closed when the test
// ends.
func (s *Server) Client() *redis.Client {
	c := redis.NewClient(s.s.Options())
	s.tb.Cleanup(func() { c.Close() })
	return c
}

// Pause freezes the server (SIGSTOP): connections stay open, nothing is
// answered, and leases do not expire, until Resume.
func (s *Server) Pause() { s.check(s.s.Pause()) }

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume() { s.check(s.s.Resume()) }

// Kill ends the server (SIGKILL); Restart brings it back.
func (s *Server) Kill() { s.s.Kill() }

// Restart kills the server and starts an empty one on the same address:
// every lock is forgotten, as after a crash without persistence.
func (s *Server) Restart() { s.check(s.s.Restart()) }

func (s *Server) check(err error) {
	if err != nil {
		s.tb.Helper()
		s.tb.Fatalf("dlocktest: %v", err)
	}
}

// NewClient starts a server (see Start) and returns a dlock Client on it
// with the given options. It fails the test if New refuses the options.
func NewClient(tb testing.TB, opts ...dlock.Option) *dlock.Client {
	tb.Helper()
	c, err := dlock.New(Start(tb).Client(), opts...)
	if err != nil {
		tb.Fatalf("dlocktest: %v", err)
	}
	return c
}

// timeout bounds each helper's calls to Redis.
const timeout = 10 * time.Second

// Hold takes the lock name through c as another holder would (a lease of
// its own, kept by the watchdog if c has it on), waiting up to ten seconds
// for it, and returns the function that releases it. What the test runs
// meanwhile finds the lock held by someone else. The lock is released when
// the test ends if release was not called.
func Hold(tb testing.TB, c *dlock.Client, name string) (release func()) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	l, err := c.Acquire(ctx, name)
	if err != nil {
		tb.Fatalf("dlocktest: Hold(%q): %v", name, err)
	}
	release = func() {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		l.Release(ctx)
	}
	tb.Cleanup(release)
	return release
}

// Lose takes the lease l away from its holder, as an operator's forced
// release or an expiry during a long pause would, and returns once the
// holder has been told: l.Done() is closed and l.Err() wraps
// dlock.ErrNotHeld (and Do's context is cancelled). c is the Client l was
// acquired through (it knows the deployment, quorum and prefix).
func Lose(tb testing.TB, c *dlock.Client, l *dlock.Lock) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if _, err := c.ForceRelease(ctx, l.Name()); err != nil {
		tb.Fatalf("dlocktest: Lose(%q): %v", l.Name(), err)
	}
	// The holder would notice at its watchdog's next extension; one now
	// makes it notice at once.
	if err := l.Extend(ctx, c.LeaseTime()); err != nil && !errors.Is(err, dlock.ErrNotHeld) {
		tb.Fatalf("dlocktest: Lose(%q): extending the lost lease: %v", l.Name(), err)
	}
	select {
	case <-l.Done():
	case <-ctx.Done():
		tb.Fatalf("dlocktest: Lose(%q): the holder was not told within %v", l.Name(), timeout)
	}
}
