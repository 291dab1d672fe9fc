package pubsub

import (
	"testing"
	"time"

	"github.com/dlockio/dlock/internal/goredisdriver"
)

// A Watch is called when its Hub finds its client closed, as a waiter is
// told to try again (Recheck): no release will be announced, and its
// holder learns that the client is closed by trying. The Hub keeps no
// call queued for a reader that will never run.
func TestWatchCalledWhenItsClientIsClosed(t *testing.T) {
	bothModes(t, func(t *testing.T, sharded bool) {
		t.Parallel()
		rdb := start(t)
		h := New(goredisdriver.Conn(rdb), sharded)
		defer h.Close()
		f, calls := watchCalls()
		w := h.Watch("ch", "", f, nil)
		defer w.Close()
		select {
		case <-w.Ready():
		case <-time.After(5 * time.Second):
			t.Fatal("the watch's subscription not confirmed after 5s")
		}
		rdb.Close()
		expectCall(t, "after its client was closed", calls)
		h.mu.Lock()
		queued := len(h.calls)
		h.mu.Unlock()
		if queued > 0 {
			t.Errorf("%d Watch calls queued on a Hub whose client is closed, want none", queued)
		}
	})
}
