// Package redisserver runs private redis-server processes, for the demo,
// benchmarks and tests (see redistest), and injects the faults that lock
// code must survive: a server that freezes (SIGSTOP), dies (SIGKILL) or
// comes back empty (restart without persistence).
//
// Servers listen on a unix socket in a short temporary directory by default,
// so there is no port to race for; [TCP] puts one on a free loopback port
// instead, for topologies that need TCP.
package redisserver

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// InstallHint says how to get redis-server when it is missing.
const InstallHint = "redis-server was not found in PATH; install it (Debian/Ubuntu: apt-get install -y redis-server, macOS: brew install redis) or set REDIS_SERVER to its path"

// ServerEnv names the environment variable that chooses the server binary
// every test, benchmark and demo starts: a redis-server, or a
// valkey-server (which takes the same flags, Sentinel mode included).
// Unset, redis-server is looked up in PATH.
const ServerEnv = "REDIS_SERVER"

// CLIEnv names the environment variable that chooses the command-line
// client used to build a Cluster (--cluster create); see [CLI].
const CLIEnv = "REDIS_CLI"

// startTimeout bounds how long a server may take to answer its first PING.
const startTimeout = 10 * time.Second

// Option configures a server started by [Start].
type Option func(*config)

type config struct {
	tcp      bool
	bin      string // the server binary; "": Binary's
	args     []string
	env      []string // added to the server's environment, "KEY=value"
	sentinel string   // sentinel mode: the config file's initial text
}

// TCP makes the server listen on a free port of 127.0.0.1 instead of a unix socket.
func TCP() Option { return func(c *config) { c.tcp = true } }

// Args appends redis-server command-line arguments, e.g. Args("--appendonly", "yes").
func Args(args ...string) Option { return func(c *config) { c.args = append(c.args, args...) } }

// Env adds variables ("KEY=value") to the server's environment, e.g. to
// start it under an LD_PRELOAD library.
func Env(kv ...string) Option { return func(c *config) { c.env = append(c.env, kv...) } }

// Bin makes the server run the binary path instead of [Binary]'s, e.g.
// [ValkeyBinary]'s.
func Bin(path string) Option { return func(c *config) { c.bin = path } }

// ValkeyEnv names the environment variable that chooses the valkey-server
// [ValkeyBinary] returns.
const ValkeyEnv = "VALKEY_SERVER"

// ValkeyBinary returns a valkey-server, for a test of what only Valkey (or
// Redis 7.2+) has: $VALKEY_SERVER (see [ValkeyEnv]), else valkey-server in
// PATH, else shared/bin/valkey-server beside the working directory or one
// of its parents (where this project's machines keep one); "" if none.
func ValkeyBinary() string {
	if p := os.Getenv(ValkeyEnv); p != "" {
		return p
	}
	if p, err := exec.LookPath("valkey-server"); err == nil {
		return p
	}
	dir, err := os.Getwd()
	for i := 0; err == nil && i < 6; i++ {
		p := filepath.Join(dir, "..", "shared", "bin", "valkey-server")
		if st, serr := os.Stat(p); serr == nil && !st.IsDir() {
			return p
		}
		dir = filepath.Dir(dir)
	}
	return ""
}

// Sentinel makes the server a Sentinel (redis-server --sentinel, on TCP)
// watching the master name at 127.0.0.1:masterPort, with the given quorum,
// down-after and failover timeouts.
func Sentinel(name string, masterPort, quorum int, downAfter, failoverTimeout time.Duration) Option {
	return func(c *config) {
		c.tcp = true
		c.sentinel = fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d %d\n"+
			"sentinel down-after-milliseconds %s %d\nsentinel failover-timeout %s %d\n",
			name, masterPort, quorum, name, downAfter.Milliseconds(), name, failoverTimeout.Milliseconds())
	}
}

// Server is one redis-server process.
type Server struct {
	cfg  config
	dir  string
	port int // 0 for a unix socket

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	paused bool
	held   int // a killed TCP server's port, bound without a listener (see hold); -1: none
}

// Binary returns the server executable to run: $REDIS_SERVER (see
// [ServerEnv]), else redis-server from PATH. It returns an error carrying
// [InstallHint] when there is none.
func Binary() (string, error) {
	if p := os.Getenv(ServerEnv); p != "" {
		return p, nil
	}
	p, err := exec.LookPath("redis-server")
	if err != nil {
		return "", errors.New(InstallHint)
	}
	return p, nil
}

// CLI returns the command-line client that goes with [Binary]: $REDIS_CLI
// (see [CLIEnv]); else, when $REDIS_SERVER names a binary ending in
// "-server" with a "-cli" next to it (valkey-server and valkey-cli), that
// one; else redis-cli from PATH.
func CLI() (string, error) {
	if p := os.Getenv(CLIEnv); p != "" {
		return p, nil
	}
	if srv := os.Getenv(ServerEnv); strings.HasSuffix(srv, "-server") {
		cli := strings.TrimSuffix(srv, "-server") + "-cli"
		if st, err := os.Stat(cli); err == nil && !st.IsDir() {
			return cli, nil
		}
	}
	p, err := exec.LookPath("redis-cli")
	if err != nil {
		return "", fmt.Errorf("redis-cli was not found in PATH; install it (Debian/Ubuntu: apt-get install -y redis-tools) or set %s to its path", CLIEnv)
	}
	return p, nil
}

// Version returns the first line of the server binary's --version output,
// e.g. "Redis server v=7.0.15 …" or "Valkey server v=8.1.0 …", to name the
// server a run used.
func Version() (string, error) {
	bin, err := Binary()
	if err != nil {
		return "", err
	}
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("%s --version: %w", bin, err)
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return line, nil
}

// Start starts a redis-server and waits until it answers PING. The caller
// must call [Server.Stop].
func Start(opts ...Option) (*Server, error) {
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	// A short directory keeps the socket path under sun_path's 104–108 bytes.
	dir, err := os.MkdirTemp("", "rt")
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, dir: dir, held: -1}
	if cfg.tcp {
		for range 5 { // a freed port can be taken by someone else before we bind it
			if s.port, err = freePort(); err != nil {
				break
			}
			if err = s.launch(); err == nil {
				return s, nil
			}
		}
	} else {
		err = s.launch()
	}
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

// usedPorts holds every port Listen gave in this process. A port is given
// once: the clients of a killed server (a quorum node a test means to be
// unreachable) would otherwise reach the next server or proxy given it.
var usedPorts sync.Map

// Listen listens on a loopback port that no server or listener of this
// process had before.
func Listen() (net.Listener, error) {
	for range 1000 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		if _, used := usedPorts.LoadOrStore(l.Addr().(*net.TCPAddr).Port, true); !used {
			return l, nil
		}
		l.Close()
	}
	return nil, errors.New("redisserver: no unused loopback port left")
}

func freePort() (int, error) {
	l, err := Listen()
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// hold keeps a killed TCP server's port from every other socket, of this
// process or another (a test's stalled proxy would turn a dead node into a
// black hole): a socket bound to it without listening, so that a dial there
// is refused at once, as at a dead server's port. Only Restart and Stop
// let it go. s.mu is held.
func (s *Server) hold() {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		return
	}
	syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1) // (past the dead server's TIME_WAIT connections)
	if syscall.Bind(fd, &syscall.SockaddrInet4{Port: s.port, Addr: [4]byte{127, 0, 0, 1}}) != nil {
		syscall.Close(fd)
		return
	}
	s.held = fd
}

// unhold lets the port go (see hold).
func (s *Server) unhold() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held >= 0 {
		syscall.Close(s.held)
		s.held = -1
	}
}

func (s *Server) launch() error {
	s.unhold()
	bin, err := Binary()
	if s.cfg.bin != "" {
		bin, err = s.cfg.bin, nil
	}
	if err != nil {
		return err
	}
	args := []string{
		"--save", "", "--appendonly", "no",
		"--dir", s.dir,
		"--logfile", filepath.Join(s.dir, "redis.log"),
	}
	if s.cfg.sentinel != "" {
		conf := filepath.Join(s.dir, "sentinel.conf")
		if _, err := os.Stat(conf); err != nil { // first start; Sentinel rewrites it later
			if err := os.WriteFile(conf, []byte(s.cfg.sentinel), 0o600); err != nil {
				return err
			}
		}
		args = []string{conf, "--sentinel", "--dir", s.dir, "--logfile", filepath.Join(s.dir, "redis.log")}
	}
	if s.port == 0 {
		args = append(args, "--port", "0", "--unixsocket", s.sock(), "--unixsocketperm", "700")
	} else {
		args = append(args, "--port", strconv.Itoa(s.port), "--bind", "127.0.0.1")
	}
	args = append(args, s.cfg.args...)
	cmd := exec.Command(bin, args...)
	if len(s.cfg.env) > 0 {
		cmd.Env = append(os.Environ(), s.cfg.env...)
	}
	// Its own process group: a Ctrl-C in a terminal must not reach it before
	// the test has cleaned up, and no server outlives its test by accident.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()

	s.mu.Lock()
	s.cmd, s.exited, s.paused = cmd, exited, false
	s.mu.Unlock()

	if err := s.waitReady(exited); err != nil {
		cmd.Process.Kill()
		<-exited
		return err
	}
	return nil
}

func (s *Server) waitReady(exited <-chan struct{}) error {
	deadline := time.Now().Add(startTimeout)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return fmt.Errorf("redis-server exited during start-up: %s", s.logTail())
		default:
		}
		if s.ping() == nil {
			return nil
		}
		time.Sleep(5 * time.Millisecond)
	}
	return fmt.Errorf("redis-server did not answer PING within %v: %s", startTimeout, s.logTail())
}

func (s *Server) ping() error {
	c, err := net.DialTimeout(s.Network(), s.Addr(), 200*time.Millisecond)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("PING answered %q", strings.TrimSpace(line))
	}
	return nil
}

func (s *Server) logTail() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	return strings.Join(lines, " | ")
}

func (s *Server) sock() string { return filepath.Join(s.dir, "r.sock") }

// Network returns "unix" or "tcp".
func (s *Server) Network() string {
	if s.port == 0 {
		return "unix"
	}
	return "tcp"
}

// Addr returns the socket path or the host:port the server listens on.
func (s *Server) Addr() string {
	if s.port == 0 {
		return s.sock()
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
}

// Port returns the TCP port, or 0 for a unix-socket server.
func (s *Server) Port() int { return s.port }

// URL returns a redis:// or unix:// URL for the server.
func (s *Server) URL() string {
	if s.port == 0 {
		return "unix://" + s.sock()
	}
	return "redis://" + s.Addr()
}

// Options returns go-redis options that reach the server.
func (s *Server) Options() *redis.Options {
	return &redis.Options{Network: s.Network(), Addr: s.Addr()}
}

// PID returns the server's process ID.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd.Process.Pid
}

// Pause freezes the server with SIGSTOP: connections stay open, nothing is answered.
func (s *Server) Pause() error { return s.signal(syscall.SIGSTOP, true) }

// Resume continues a paused server with SIGCONT.
func (s *Server) Resume() error { return s.signal(syscall.SIGCONT, false) }

func (s *Server) signal(sig syscall.Signal, paused bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("redisserver: signal %v: %w", sig, err)
	}
	s.paused = paused
	return nil
}

// Kill ends the server with SIGKILL and waits until it is gone. A TCP
// server's port stays its own, refusing dials, until Restart or Stop.
func (s *Server) Kill() {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Kill()
	<-exited
	s.mu.Lock()
	s.paused = false
	if s.port != 0 && s.held < 0 {
		s.hold()
	}
	s.mu.Unlock()
}

// Restart kills the server and starts a new one on the same address. Without
// persistence the new server is empty.
func (s *Server) Restart() error {
	s.Kill()
	if s.port == 0 {
		os.Remove(s.sock())
	}
	if err := s.launch(); err != nil {
		return fmt.Errorf("redisserver: restart: %w", err)
	}
	return nil
}

// Stop kills the server and removes its directory. It is safe to call more than once.
func (s *Server) Stop() {
	s.Kill()
	s.unhold()
	os.RemoveAll(s.dir)
}

// Do runs one command on a short-lived connection, for test set-up and checks.
func (s *Server) Do(ctx context.Context, args ...any) (any, error) {
	c := redis.NewClient(s.Options())
	defer c.Close()
	return c.Do(ctx, args...).Result()
}
