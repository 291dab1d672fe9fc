package redisserver

import (
	"context"
	"errors"
	"net"
	"syscall"
	"testing"
	"time"
)

// A port is given to one server or proxy of the process only, so that a
// killed server's clients never reach a later one in its place: the kernel
// hands a freed port out again within a hundred binds or so.
func TestFreePortNeverGivesAPortTwice(t *testing.T) {
	t.Parallel()
	seen := map[int]bool{}
	for range 500 {
		port, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		if seen[port] {
			t.Fatalf("port %d given twice", port)
		}
		seen[port] = true
	}
}

// A killed TCP server's port refuses dials and stays taken (no server or
// proxy of this process or another can be given it) until Restart starts
// the server on it again.
func TestAKilledServersPortIsHeldUntilRestart(t *testing.T) {
	t.Parallel()
	s, err := Start(TCP())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	s.Kill()
	if c, err := net.DialTimeout("tcp", s.Addr(), time.Second); !errors.Is(err, syscall.ECONNREFUSED) {
		if c != nil {
			c.Close()
		}
		t.Fatalf("dial a killed server's port = %v, want it refused", err)
	}
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	err = syscall.Bind(fd, &syscall.SockaddrInet4{Port: s.Port(), Addr: [4]byte{127, 0, 0, 1}})
	syscall.Close(fd)
	if !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("bind a killed server's port = %v, want it in use", err)
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Do(context.Background(), "PING"); err != nil {
		t.Fatalf("PING after Restart = %v", err)
	}
}
