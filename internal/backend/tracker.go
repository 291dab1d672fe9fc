package backend

import (
	"context"
	"sync"
)

// Tracker counts goroutines that go on after the call that started them
// returned (an undo retried in the background, a quorum node's late
// answer), so that a Client can be drained before its Redis clients are
// closed (Drain); drained, it starts no more (see Go). The zero value is
// ready to use.
type Tracker struct {
	mu       sync.Mutex
	n        int
	idle     chan struct{} // made by a wait while n > 0, closed when n drops to 0
	draining bool          // Drain was called: drained once n is found at 0
	drained  bool          // see Go, Lend
}

// Go runs f in a goroutine of its own, counted until f returns, and reports
// true; once drained, it starts nothing and reports false: Drain's caller
// may have gone on, and the caller does without.
func (t *Tracker) Go(f func()) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.drained {
		t.n++
		go func() { defer t.Leave(); f() }()
	}
	return !t.drained
}

// Enter counts a call in progress until it calls Leave: an acquisition,
// which Close wakes and then waits for, or a watchdog's extension. It does
// not allocate (an acquisition's path counts its allocations).
func (t *Tracker) Enter() {
	t.mu.Lock()
	t.n++
	t.mu.Unlock()
}

// Leave ends what Enter counted.
func (t *Tracker) Leave() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.n--; t.n == 0 && t.idle != nil {
		close(t.idle)
		t.idle, t.drained = nil, t.draining
	}
}

// Lend runs f, called by a counted goroutine (Observer hooks, which may
// call Close and so Drain), with that goroutine uncounted,
// and then counts it again. It reports false if drained meanwhile:
// Drain's caller may have gone on, and the goroutine must end without
// more work.
func (t *Tracker) Lend(f func()) bool {
	t.Leave()
	f()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.n++
	return !t.drained
}

// Drain returns once no counted goroutine runs, or with ctx's error when
// ctx ends first. From the moment none runs, after it, the Tracker is
// drained for good: a Client's Close.
func (t *Tracker) Drain(ctx context.Context) error { return t.wait(ctx, true) }

// wait is Drain, which drains only if drain (tests wait without).
func (t *Tracker) wait(ctx context.Context, drain bool) error {
	t.mu.Lock()
	t.draining = t.draining || drain
	if t.n == 0 {
		t.drained = t.draining
		t.mu.Unlock()
		return nil
	}
	if t.idle == nil {
		t.idle = make(chan struct{})
	}
	idle := t.idle
	t.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
