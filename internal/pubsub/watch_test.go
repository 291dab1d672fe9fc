package pubsub

import (
	"testing"
	"time"

	"github.com/dlockio/dlock/internal/goredisdriver"
)

// A watcher (WatchToken) is woken by every message on its channel: a
// release, and a handover to another waiter, which still reaches only
// that waiter among the others. Two watchers on one channel are both woken.
func TestWatchersSeeEveryMessage(t *testing.T) {
	rdb := start(t)
	h := New(goredisdriver.Conn(rdb), false)
	w1, watch1 := subscribe(t, h, "ch", WatchToken())
	w2, watch2 := subscribe(t, h, "ch", WatchToken())
	wa, a := subscribe(t, h, "ch", "tok-a")
	wb, b := subscribe(t, h, "ch", "tok-b")
	ctx := t.Context()

	rdb.Publish(ctx, "ch", "tok-a 42")
	expect(t, "waiter a", a, 42)
	expectNone(t, "waiter b", b)
	expect(t, "watcher 1", watch1, Released)
	expect(t, "watcher 2", watch2, Released)

	rdb.Publish(ctx, "ch", WakeAll)
	expect(t, "waiter b", b, Released)
	expect(t, "watcher 1", watch1, Released)

	w1.Close()
	rdb.Publish(ctx, "ch", "tok-b 43")
	expect(t, "waiter b", b, 43)
	expect(t, "watcher 2", watch2, Released)
	expectNone(t, "closed watcher 1", watch1)
	for _, w := range []*Waiter{w2, wa, wb} {
		w.Close()
	}
	time.Sleep(2 * linger) // the channel is dropped and the connection closed: no reader left
}
