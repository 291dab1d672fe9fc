package backend

import (
	"context"
	"sync"
)

// Tracker counts goroutines that go on after the call that started them
// returned (an undo retried in the background, a quorum node's late
// answer), so that a Client can be drained before its Redis clients are
// closed. The zero value is ready to use.
type Tracker struct {
	mu      sync.Mutex
	n       int
	idle    chan struct{} // made by a Wait while n > 0, closed when n drops to 0
	drained bool          // a Wait found n at 0 (see Lend)
}

// Go runs f in a goroutine of its own, counted until f returns.
func (t *Tracker) Go(f func()) {
	t.Enter()
	go func() {
		defer t.Leave()
		f()
	}()
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
		t.idle, t.drained = nil, true
	}
}

// Lend runs f, called by a counted goroutine (Observer hooks, which may
// call Close and so Wait), with that goroutine uncounted,
// and then counts it again. It reports false if a Wait found nothing
// counted meanwhile: Wait's caller may have gone on, and the goroutine
// must end without more work.
func (t *Tracker) Lend(f func()) bool {
	t.Leave()
	f()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.n++
	return !t.drained
}

// Wait returns once no counted goroutine runs, or with ctx's error when ctx
// ends first.
func (t *Tracker) Wait(ctx context.Context) error {
	t.mu.Lock()
	if t.n == 0 {
		t.drained = true
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
