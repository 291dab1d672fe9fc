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
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed when n drops to 0; nil while n is 0
}

// Go runs f in a goroutine of its own, counted until f returns.
func (t *Tracker) Go(f func()) {
	done := t.Enter()
	go func() {
		defer done()
		f()
	}()
}

// Enter counts a call in progress until the function it returns is called:
// an acquisition, which Close wakes, and then waits for.
func (t *Tracker) Enter() (done func()) {
	t.mu.Lock()
	if t.n == 0 {
		t.idle = make(chan struct{})
	}
	t.n++
	t.mu.Unlock()
	return t.done
}

func (t *Tracker) done() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.n--; t.n == 0 {
		close(t.idle)
		t.idle = nil
	}
}

// Wait returns once no counted goroutine runs, or with ctx's error when ctx
// ends first.
func (t *Tracker) Wait(ctx context.Context) error {
	t.mu.Lock()
	idle := t.idle
	t.mu.Unlock()
	if idle == nil {
		return nil
	}
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
