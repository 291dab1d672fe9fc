package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/dlockio/dlock/internal/redistest"
)

// startPostgres starts a private PostgreSQL server (initdb + pg_ctl, as the
// postgres user when run as root) on a free loopback port, and returns its
// URL. It skips the test when no PostgreSQL server binaries are installed.
func startPostgres(t *testing.T) string {
	t.Helper()
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	bin := ""
	for _, b := range bins {
		if _, err := os.Stat(filepath.Join(b, "initdb")); err == nil {
			bin = b
		}
	}
	if bin == "" {
		t.Skip("PostgreSQL server binaries not installed (Debian: apt-get install postgresql)")
	}
	as := func(name string, args ...string) *exec.Cmd {
		if os.Geteuid() == 0 { // initdb refuses to run as root
			return exec.Command("runuser", append([]string{"-u", "postgres", "--", filepath.Join(bin, name)}, args...)...)
		}
		return exec.Command(filepath.Join(bin, name), args...)
	}
	dir, err := os.MkdirTemp("", "pg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Skip("running as root without a postgres user")
		}
		var uid, gid int
		fmt.Sscan(u.Uid, &uid)
		fmt.Sscan(u.Gid, &gid)
		os.Chown(dir, uid, gid)
	}
	data := filepath.Join(dir, "data")
	if out, err := as("initdb", "-D", data, "-A", "trust", "-U", "postgres").CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	opts := fmt.Sprintf("-c listen_addresses=127.0.0.1 -p %d -k %s -c fsync=off", port, dir)
	if out, err := as("pg_ctl", "-D", data, "-o", opts, "-w", "-t", "30", "-l", filepath.Join(dir, "log"), "start").CombinedOutput(); err != nil {
		t.Fatalf("pg_ctl start: %v\n%s", err, out)
	}
	t.Cleanup(func() { as("pg_ctl", "-D", data, "-m", "immediate", "stop").Run() })
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
}

func TestDemoPostgres(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts PostgreSQL and scheduler processes")
	}
	db := startPostgres(t)
	s := redistest.Start(t)
	start := time.Now()
	code, out, errOut := result(t, dlockCmd(t, []string{"REDIS_URL=" + s.URL()}, "demo", "--tasks", "150", "--db", db))
	if code != 0 {
		t.Fatalf("dlock demo --db postgres: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	m := regexp.MustCompile(`duplicate enqueues: (\d+) without a lock, 0 with dlock`).FindStringSubmatch(out)
	if m == nil || m[1] == "0" {
		t.Errorf("demo on PostgreSQL did not show duplicates without the lock and none with it:\n%s", out)
	}
	t.Logf("demo on PostgreSQL took %v", time.Since(start).Round(time.Millisecond))
}
