package redisserver

import "testing"

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
