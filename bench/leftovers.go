package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// What a library leaves in Redis once its locks are released: keys and
// bytes per lock name, right after the run and again once the lease has
// passed (dlock's revocation markers live min(TTL, 1 minute); a fence counter, for
// the leases that ask for a fence, which W1 does not, a minute). What is
// left then stays for good: it grows with the number of distinct names a
// service ever locks.
const (
	leftoverTTL   = 2 * time.Second // the lease asked for here, so that the wait is short
	leftoverC     = 64
	leftoverNames = 100_000 // at most, so that a fast machine does not fill its memory
)

type leftover struct {
	lib   string
	names int
	// per name, right after every lock was released, and after the window
	keysAfter, bytesAfter float64
	keysKept, bytesKept   float64
}

// leftovers runs the W1 loop with leftoverC goroutines, each pair on a
// name of its own, so that names = pairs: a library that leaves something
// per lease and one that leaves something per name both show per name. The server is flushed first, and
// the library's connections are closed before memory is read, so that
// neither other cells' keys nor client buffers are counted.
func leftovers(l library, addr string, admin *redis.Client) (leftover, error) {
	reset(admin)
	mem0 := usedMemory(admin)
	newHandle, closeFn, err := l.open([]string{addr}, leftoverTTL)
	if err != nil {
		return leftover{}, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), *duration+30*time.Second)
	defer cancel()
	all, err := pairLoop(ctx, leftoverC, time.Now().Add(*duration), leftoverNames/leftoverC, func(g, i int) handle {
		return newHandle(fmt.Sprintf("w1:%d:%d", g, i))
	})
	closeFn()
	if err != nil {
		return leftover{}, err
	}
	r := leftover{lib: l.name, names: len(all)}
	if r.names == 0 {
		return r, nil
	}
	perName := func(v int64) float64 { return float64(v) / float64(r.names) }
	time.Sleep(200 * time.Millisecond) // for the server to drop the closed connections
	keys := countKeys(admin)
	r.keysAfter, r.bytesAfter = perName(keys), perName(usedMemory(admin)-mem0)
	// Past the window, SCAN deletes the expired keys it meets, so the count
	// and the memory read after it are not waiting on Redis's expiry cycle.
	time.Sleep(leftoverTTL + 500*time.Millisecond)
	keys = countKeys(admin)
	time.Sleep(200 * time.Millisecond) // serverCron shrinks the emptied hash tables
	r.keysKept, r.bytesKept = perName(keys), perName(usedMemory(admin)-mem0)
	return r, nil
}

// countKeys counts the server's keys with SCAN (the server holds nothing
// but what the cell wrote: each library has its own key layout, so no one
// prefix would do).
func countKeys(admin *redis.Client) int64 {
	var n int64
	iter := admin.Scan(context.Background(), 0, "*", 1000).Iterator()
	for iter.Next(context.Background()) {
		n++
	}
	return n
}

// usedMemory returns INFO memory's used_memory, in bytes.
func usedMemory(admin *redis.Client) int64 {
	info, err := admin.Info(context.Background(), "memory").Result()
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}
