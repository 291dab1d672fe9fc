package dlock

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// ClockError is OpClock's Err: how far a server's clock moved apart from ours.
type ClockError struct {
	Server string        // the server's address (a Cluster's master's), if known ("": a driver)
	Ahead  time.Duration // > 0: the server's clock ran ahead; < 0: behind
	Over   time.Duration // about how long the client's clock ran between the two replies
}

func (e *ClockError) Error() string {
	way, by := "ahead of", e.Ahead
	if by < 0 {
		way, by = "behind", -by
	}
	server := "the Redis server's clock"
	if e.Server != "" {
		server = fmt.Sprintf("the clock of Redis at %s", e.Server)
	}
	return fmt.Sprintf("dlock: %s ran %v %s ours over %v, beyond the drift margin", server, by.Round(time.Millisecond), way, e.Over.Round(time.Millisecond))
}

// watchClock makes the Nodes, which share e's clock hook, tell e's
// observers of their servers' clocks: at the end of the next operation
// (see end), not from the extension that read them, which Close may wait
// for (the watchdog's, a quorum node's call), as a Clock hook may call
// Close.
func (e *engine) watchClock() {
	h := e.opts.clock
	// Extensions read the server's clock while an Observer has Clock.
	h.On = func() bool { return slices.ContainsFunc(e.obs.all(), func(o Observer) bool { return o.Clock != nil }) }
	// A lease's own margin: clocks that keep within it, stepping by no
	// more, or running at a rate that ends it no earlier, are never told of.
	h.Margin = e.opts.driftFor
	h.Tell = func(_ context.Context, key, addr string, ahead, over time.Duration) {
		name := strings.TrimSuffix(strings.TrimPrefix(key, e.opts.prefix+"{"), "}")
		e.clockMu.Lock()
		defer e.clockMu.Unlock()
		e.clocks = append(e.clocks, &Event{Op: OpClock, Name: name, Err: &ClockError{Server: addr, Ahead: ahead, Over: over}})
	}
}

// tellClocks tells e's observers, with ctx, of the clocks read since the
// last time.
func (e *engine) tellClocks(ctx context.Context) {
	e.clockMu.Lock()
	told := e.clocks
	e.clocks = nil
	e.clockMu.Unlock()
	for _, ev := range told {
		e.obs.notify(ctx, ev)
	}
}
