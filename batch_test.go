package dlock_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/dlockio/dlock"
)

// Many goroutines of one Client share pipelines; each still gets its own
// reply, and an error reply in a batch stays with its own call.
func TestPipelinedCallsKeepTheirReplies(t *testing.T) {
	_, rdb := setup(t)
	ctx := t.Context()
	rdb.HSet(ctx, "dlock:{bad}", "f", "v")
	c := newClient(t, rdb)
	const n = 64
	var wg sync.WaitGroup
	locks := make([]*dlock.Lock, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			name := fmt.Sprintf("p%d", i)
			if i == n/2 {
				name = "bad"
			}
			locks[i], errs[i] = c.TryAcquire(ctx, name)
		})
	}
	wg.Wait()
	tokens := map[string]bool{}
	for i := range n {
		if i == n/2 {
			if !errors.Is(errs[i], dlock.ErrWrongType) {
				t.Errorf("TryAcquire(bad) = %v, want ErrWrongType", errs[i])
			}
			continue
		}
		if errs[i] != nil {
			t.Errorf("TryAcquire(p%d) = %v", i, errs[i])
			continue
		}
		if got := holderOf(rdb.Get(ctx, locks[i].Key()).Val()); got != locks[i].Token() || tokens[got] {
			t.Errorf("lock p%d: key holds %q, want its own unique token %q", i, got, locks[i].Token())
		}
		tokens[locks[i].Token()] = true
	}
	for i, l := range locks {
		if l != nil {
			if err := l.Release(ctx); err != nil {
				t.Errorf("Release(p%d) = %v", i, err)
			}
		}
	}
	if n := liveKeys(ctx, rdb, "dlock:{p0}", "dlock:{p1}", "dlock:{p63}"); n != 0 {
		t.Errorf("%d lock keys left after Release, want 0", n)
	}
}
