package redistest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/dlockio/dlock/internal/redisserver"
)

// fakeTimeLibs are where Debian's libfaketime package (and a build from
// source) put the library.
var fakeTimeLibs = []string{
	"/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
	"/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
	"/usr/lib/faketime/libfaketime.so.1",
	"/usr/local/lib/faketime/libfaketime.so.1",
}

// FakeClock returns the options that start a server whose wall clock (TIME,
// and the clock keys expire by) the test sets while it runs, and the
// function that sets it, as libfaketime reads its timestamp file:
// set("+30s") steps it 30 s ahead of the real clock, set("-30s") behind,
// set("@2026-11-28 22:00:00 x0") freezes it at that local time (a bare
// "x0" freezes it at the server's start), set("+0") puts it back. The
// monotonic clock is left alone.
// The server is a valkey-server: Debian's redis-server is linked with
// jemalloc, which hangs libfaketime as it starts. It skips tb when
// libfaketime (Debian: apt-get install libfaketime) or valkey-server is
// missing.
func FakeClock(tb testing.TB) (opts []Option, set func(offset string)) {
	tb.Helper()
	lib := ""
	for _, p := range fakeTimeLibs {
		if _, err := os.Stat(p); err == nil {
			lib = p
			break
		}
	}
	if lib == "" {
		tb.Skip("no libfaketime to step a server's clock: apt-get install libfaketime")
	}
	file := filepath.Join(tb.TempDir(), "faketime")
	set = func(offset string) {
		tb.Helper()
		if err := os.WriteFile(file, []byte(offset+"\n"), 0o600); err != nil {
			tb.Fatalf("redistest: set the server's clock: %v", err)
		}
	}
	set("+0")
	return []Option{Valkey(tb), redisserver.Env(
		"LD_PRELOAD="+lib,
		"FAKETIME_TIMESTAMP_FILE="+file,
		"FAKETIME_NO_CACHE=1",            // read the file on every call: a step takes effect at once
		"FAKETIME_DONT_FAKE_MONOTONIC=1", // Redis times its own events on the monotonic clock
	)}, set
}
