package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/goredisdriver"
)

// A waiter first in line holds up those behind it (a semaphore's waiter for
// all 3 permits while 1 is held, a writer while a read is held); when it
// goes (its Client closed, its context cancelled) it must leave the line at
// once, and the waiter behind it get in beside the hold.
func TestAHeadWaiterThatLeavesLetsTheNextIn(t *testing.T) {
	t.Parallel()
	type acquirer func(ctx context.Context, opts ...dlock.LockOption) (*dlock.Lock, error)
	for _, kind := range []struct {
		name, head, behind string
		// open returns the head's acquisition if head, else one that
		// takes what the holder and the waiter behind it take.
		open func(t *testing.T, c *dlock.Client, name string, head bool) acquirer
	}{
		{"semaphore", "the waiter for 3", "the waiter for 1", func(t *testing.T, c *dlock.Client, name string, head bool) acquirer {
			s := newSemaphore(t, c, name, 3)
			if head {
				return func(ctx context.Context, opts ...dlock.LockOption) (*dlock.Lock, error) {
					return s.AcquireN(ctx, 3, opts...)
				}
			}
			return s.Acquire
		}},
		{"rwmutex", "the writer", "the reader", func(t *testing.T, c *dlock.Client, name string, head bool) acquirer {
			if head {
				return newRW(t, c, name).Writer().Acquire
			}
			return newRW(t, c, name).Reader().Acquire
		}},
	} {
		for _, how := range []string{"close", "cancel"} {
			t.Run(kind.name+"/"+how, func(t *testing.T) {
				t.Parallel()
				_, rdb := setup(t)
				ctx := t.Context()
				name := "faults-head-goes-" + kind.name + "-" + how
				held, err := kind.open(t, newClient(t, rdb), name, false)(ctx, dlock.LeaseTTL(time.Minute))
				if err != nil {
					t.Fatal(err)
				}
				defer held.Release(ctx)
				hc := newClient(t, rdb)
				head := kind.open(t, hc, name, true)
				hctx, hcancel := context.WithCancel(ctx)
				defer hcancel()
				headErr := make(chan error, 1)
				go func() {
					l, err := head(hctx, dlock.LeaseTTL(time.Minute))
					if err == nil {
						l.Release(ctx)
					}
					headErr <- err
				}()
				if !queued(ctx, rdb, name, 1) {
					t.Fatalf("%s never queued", kind.head)
				}
				behind := kind.open(t, newClient(t, rdb), name, false)
				got := make(chan error, 1)
				go func() {
					l, err := behind(ctx, dlock.LeaseTTL(time.Minute), dlock.MaxWait(10*time.Second))
					if err == nil {
						l.Release(ctx)
					}
					got <- err
				}()
				if !queued(ctx, rdb, name, 2) {
					t.Fatalf("%s never queued", kind.behind)
				}
				if how == "close" {
					if err := hc.Close(ctx); err != nil {
						t.Fatal(err)
					}
				} else {
					hcancel()
				}
				select {
				case err := <-headErr:
					if err == nil {
						t.Fatalf("%s got in after it went", kind.head)
					}
				case <-time.After(5 * time.Second):
					t.Fatalf("%s's call did not return 5s after it went", kind.head)
				}
				select {
				case err := <-got:
					if err != nil {
						t.Fatalf("%s behind the head that went: %v", kind.behind, err)
					}
				case <-time.After(8 * time.Second):
					t.Fatalf("%s never got in (queue %v)", kind.behind, rdb.LRange(ctx, "dlock:{"+name+"}:q", 0, -1).Val())
				}
			})
		}
	}
}

// Calls on the size kept in Redis return by their context when replies are
// stalled, with an error that says the context ended (not a raw Redis
// text), and a change asked under a stalled reply is applied at most once.
func TestSemaphoreSizeCallsUnderStalledRepliesEndWithTheirContext(t *testing.T) {
	t.Parallel()
	p, rdb, direct := proxied(t, 3, 0)
	ctx := t.Context()
	s := newSemaphore(t, newClient(t, rdb), "faults-size-stall", 2)
	if ok, err := s.TrySetPermits(ctx, 5); err != nil || !ok {
		t.Fatalf("TrySetPermits = %v, %v", ok, err)
	}
	for _, tc := range []struct {
		name string
		call func(ctx context.Context) error
	}{
		{"AddPermits", func(ctx context.Context) error { _, err := s.AddPermits(ctx, 1); return err }},
		{"Available", func(ctx context.Context) error { _, err := s.Available(ctx); return err }},
		{"UnsetPermits", func(ctx context.Context) error { _, err := s.UnsetPermits(ctx); return err }},
		{"TrySetPermits", func(ctx context.Context) error { _, err := s.TrySetPermits(ctx, 9); return err }},
	} {
		p.StallReplies()
		cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		start := time.Now()
		err := tc.call(cctx)
		d := time.Since(start)
		cancel()
		p.Cut()
		if err == nil {
			t.Errorf("%s under stalled replies succeeded", tc.name)
		} else if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s under stalled replies = %v, want it to match context.DeadlineExceeded", tc.name, err)
		}
		if d > 2*time.Second { // (go-redis's read timeout: 3s)
			t.Errorf("%s returned %v after its 300ms context", tc.name, d)
		}
	}
	// The changes: +1 at most once, then maybe unset (size 2 again), then
	// maybe set to 9.
	v, err := direct.Get(ctx, "dlock:{faults-size-stall}:n").Result()
	if err == nil && v != "5" && v != "6" && v != "9" {
		t.Errorf("the size kept is %s after +1 to 5 at most once, an unset and a set to 9", v)
	}
}

// Eight goroutines on four Clients take 1 to 3 of 4 permits through a proxy
// that delays and stalls replies at random; counted inside their critical
// sections while valid, they never hold more than 4 between them.
func TestSemaphoreAcquireNUnderDelayedRepliesNeverOverN(t *testing.T) {
	t.Parallel()
	p, rdb, _ := proxied(t, 3, 300*time.Millisecond)
	ctx := t.Context()
	const name, N = "faults-n-faults", 4
	var inside atomic.Int64
	var mu sync.Mutex
	var bad []string
	stop := time.Now().Add(4 * time.Second)
	var wg sync.WaitGroup
	for w := range 8 {
		c := newClient(t, rdb)
		s := newSemaphore(t, c, name, N)
		wg.Go(func() {
			for i := 0; i < 200 && time.Now().Before(stop); i++ {
				k := 1 + (w+i)%3
				l, err := s.AcquireN(ctx, k, dlock.MaxWait(time.Second), dlock.LeaseTTL(2*time.Second))
				if err != nil {
					continue
				}
				n := inside.Add(int64(k))
				if n > N && time.Now().Before(l.ValidUntil()) {
					mu.Lock()
					bad = append(bad, fmt.Sprintf("%d permits held with this hold of %d", n, k))
					mu.Unlock()
				}
				time.Sleep(time.Millisecond)
				inside.Add(-int64(k))
				l.Release(ctx)
			}
		})
	}
	wg.Go(func() {
		for i := 0; time.Now().Before(stop); i++ {
			switch i % 4 {
			case 0:
				p.Delay(150*time.Millisecond, 0)
			case 1:
				p.StallReplies()
			case 2: // requests held past the read timeout: re-sent, the first copy landing late
				p.Delay(400*time.Millisecond, 0)
			case 3: // replies held past it: re-sent after the first ran
				p.Delay(0, 400*time.Millisecond)
			}
			time.Sleep(200 * time.Millisecond)
			p.Cut()
			time.Sleep(100 * time.Millisecond)
		}
	})
	wg.Wait()
	if len(bad) > 0 {
		t.Fatalf("%d overlaps above N=%d: %v", len(bad), N, bad[:min(len(bad), 5)])
	}
	// Faults over and every holder gone: all N permits are free again once
	// the leases (2s) and queue entries that went astray ran out.
	p.Cut()
	probe := newSemaphore(t, newClient(t, rdb), name, N)
	if !waitFor(6*time.Second, func() bool {
		l, err := probe.AcquireN(ctx, N, dlock.MaxWait(0))
		if err == nil {
			l.Release(ctx)
		}
		return err == nil
	}) {
		hs, _ := probe.Holders(ctx)
		t.Errorf("the %d permits are not free 6s after the last holder: holds %+v", N, hs)
	}
}

// Refusals of a semaphore's and a read-write lock's calls match their
// documented sentinel and carry no raw Redis or Lua text.
func TestSemaphoreAndRWRefusalsMatchTheirSentinelsWithoutRawRedisText(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb)
	s := newSemaphore(t, c, "faults-words-sem", 3)
	held, err := s.Acquire(ctx, dlock.LeaseTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(ctx)
	rw := newRW(t, c, "faults-words-rw")
	w, err := rw.Writer().Acquire(ctx, dlock.LeaseTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Release(ctx)
	plain, err := c.Acquire(ctx, "faults-words-lock", dlock.LeaseTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Release(ctx)
	onRW := newSemaphore(t, c, "faults-words-rw", 3)
	onLock := newSemaphore(t, c, "faults-words-lock", 3)
	sized := newSemaphore(t, c, "faults-words-sized", 0)
	if _, err := sized.TrySetPermits(ctx, 2); err != nil {
		t.Fatal(err)
	}
	rwOnSem := newRW(t, c, "faults-words-sem")
	for _, tc := range []struct {
		name string
		want error
		call func() error
	}{
		{"AcquireN above N", dlock.ErrInvalid, func() error { _, err := s.AcquireN(ctx, 4, dlock.MaxWait(time.Second)); return err }},
		{"AcquireN above the kept size", dlock.ErrInvalid, func() error { _, err := sized.AcquireN(ctx, 3, dlock.MaxWait(time.Second)); return err }},
		{"AcquireN of 0", dlock.ErrInvalid, func() error { _, err := s.AcquireN(ctx, 0); return err }},
		{"AddPermits below 1", dlock.ErrInvalid, func() error { _, err := sized.AddPermits(ctx, -2); return err }},
		{"AddPermits below 1 without a size", dlock.ErrInvalid, func() error { _, err := s.AddPermits(ctx, -3); return err }},
		{"Available of 0 without a size", dlock.ErrInvalid, func() error {
			_, err := newSemaphore(t, c, "faults-words-none", 0).Available(ctx)
			return err
		}},
		{"AcquireN of 0 permits without a size", dlock.ErrInvalid, func() error {
			_, err := newSemaphore(t, c, "faults-words-none", 0).AcquireN(ctx, 1, dlock.MaxWait(time.Second))
			return err
		}},
		{"AcquireN on a read-write lock", dlock.ErrWrongType, func() error { _, err := onRW.AcquireN(ctx, 2, dlock.MaxWait(time.Second)); return err }},
		{"AcquireN on a lock", dlock.ErrWrongType, func() error { _, err := onLock.AcquireN(ctx, 2, dlock.MaxWait(time.Second)); return err }},
		{"AddPermits on a read-write lock", dlock.ErrWrongType, func() error { _, err := onRW.AddPermits(ctx, 1); return err }},
		{"TrySetPermits on a lock", dlock.ErrWrongType, func() error { _, err := onLock.TrySetPermits(ctx, 1); return err }},
		{"Available on a lock", dlock.ErrWrongType, func() error { _, err := onLock.Available(ctx); return err }},
		{"UnsetPermits on a read-write lock", dlock.ErrWrongType, func() error { _, err := onRW.UnsetPermits(ctx); return err }},
		{"write on a semaphore", dlock.ErrWrongType, func() error { _, err := rwOnSem.Writer().Acquire(ctx, dlock.MaxWait(time.Second)); return err }},
		{"read on a semaphore", dlock.ErrWrongType, func() error { _, err := rwOnSem.Reader().TryAcquire(ctx); return err }},
		{"Downgrade of a permit", dlock.ErrInvalid, func() error { return rwOnSem.Downgrade(ctx, held) }},
		{"Downgrade of a read", dlock.ErrInvalid, func() error {
			r, err := newRW(t, c, "faults-words-rw2").Reader().Acquire(ctx)
			if err != nil {
				return err
			}
			defer r.Release(ctx)
			return newRW(t, c, "faults-words-rw2").Downgrade(ctx, r)
		}},
	} {
		err := tc.call()
		if !errors.Is(err, tc.want) {
			t.Errorf("%s = %v, want it to match %v", tc.name, err, tc.want)
			continue
		}
		for _, raw := range []string{"user_script", "DLOCK_", "ERR ", "Operation against a key", "REVOKED", "@user"} {
			if strings.Contains(err.Error(), raw) {
				t.Errorf("%s = %q: carries Redis's raw %q", tc.name, err, raw)
			}
		}
	}
}

// Growing the kept size lets in at once the waiters who now fit, on the
// same Client and on others, a waiter for several permits among them, in
// arrival order.
func TestSemaphoreGrowingLetsEveryWaiterThatFitsInAtOnce(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	const name = "faults-grow"
	shared := newClient(t, rdb)
	s := newSemaphore(t, shared, name, 0)
	if _, err := s.TrySetPermits(ctx, 3); err != nil {
		t.Fatal(err)
	}
	held, err := s.AcquireN(ctx, 3, dlock.LeaseTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(ctx)
	ks := []int{1, 3, 1, 2, 1}
	got := make(chan error, len(ks))
	var mu sync.Mutex
	var locks []*dlock.Lock
	for i, k := range ks {
		sem := s
		if i%2 == 1 {
			sem = newSemaphore(t, newClient(t, rdb), name, 0)
		}
		go func() {
			l, err := sem.AcquireN(ctx, k, dlock.LeaseTTL(time.Minute), dlock.MaxWait(20*time.Second))
			if err == nil {
				mu.Lock()
				locks = append(locks, l)
				mu.Unlock()
			}
			got <- err
		}()
		if !queued(ctx, rdb, name, int64(i+1)) {
			t.Fatalf("waiter %d never queued", i)
		}
	}
	if n, err := s.AddPermits(ctx, 8); err != nil || n != 11 {
		t.Fatalf("AddPermits(8) = %d, %v", n, err)
	}
	for range ks {
		select {
		case err := <-got:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("a waiter that fits was not let in 5s after the size grew (queue %v)", rdb.LRange(ctx, "dlock:{"+name+"}:q", 0, -1).Val())
		}
	}
	for _, l := range locks {
		l.Release(ctx)
	}
}

// A server restarted empty forgets the permits; a waiter for several
// permits is let in soon after (its pub/sub connection's return wakes it),
// not when the forgotten holds would have ended.
func TestSemaphoreAcquireNWaiterGetsInSoonAfterAnEmptyRestart(t *testing.T) {
	t.Parallel()
	s, rdb := setup(t)
	ctx := t.Context()
	const name = "faults-restart"
	holder := newSemaphore(t, newClient(t, rdb), name, 3)
	held, err := holder.AcquireN(ctx, 3, dlock.LeaseTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	waiter := newSemaphore(t, newClient(t, rdb), name, 3)
	got := make(chan error, 1)
	go func() {
		l, err := waiter.AcquireN(ctx, 2, dlock.LeaseTTL(time.Minute), dlock.MaxWait(30*time.Second))
		if err == nil {
			l.Release(ctx)
		}
		got <- err
	}()
	if !waitFor(10*time.Second, queuedAndListening(t, rdb, name, 1)) {
		t.Fatal("the waiter never queued")
	}
	s.Restart()
	start := time.Now()
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("the waiter after the restart: %v", err)
		}
		d := time.Since(start)
		t.Logf("the waiter got in %v after the restart", d)
		if d > 10*time.Second {
			t.Errorf("the waiter got in %v after the restart", d)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the waiter was not let in 20s after an empty restart")
	}
	held.Release(ctx) // (forgotten: nothing to give back)
}

// Size calls and AcquireN with a context already done fail with its error,
// sending nothing; AcquireN after the Client's Close fails with ErrClosed.
// (The size calls after Close are not acquisitions: like a Release or an
// Inspect, they are still sent.)
func TestSemaphoreCallsWithADoneContextSendNothing(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb)
	s := newSemaphore(t, c, "faults-closed", 3)
	done, cancel := context.WithCancel(ctx)
	cancel()
	calls := map[string]func(ctx context.Context) error{
		"AcquireN":      func(ctx context.Context) error { _, err := s.AcquireN(ctx, 2); return err },
		"AddPermits":    func(ctx context.Context) error { _, err := s.AddPermits(ctx, 1); return err },
		"TrySetPermits": func(ctx context.Context) error { _, err := s.TrySetPermits(ctx, 4); return err },
		"UnsetPermits":  func(ctx context.Context) error { _, err := s.UnsetPermits(ctx); return err },
		"Available":     func(ctx context.Context) error { _, err := s.Available(ctx); return err },
	}
	for name, call := range calls {
		if err := call(done); !errors.Is(err, context.Canceled) {
			t.Errorf("%s with a done context = %v, want context.Canceled", name, err)
		}
	}
	if keys := rdb.Keys(ctx, "dlock:*").Val(); len(keys) != 0 {
		t.Errorf("keys written: %v", keys)
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AcquireN(ctx, 2); !errors.Is(err, dlock.ErrClosed) {
		t.Errorf("AcquireN after Close = %v, want ErrClosed", err)
	}
}

// Waiters for 1 to 3 of 3 permits whose waits end within milliseconds, so
// that many end as a release hands them their permits: no more than 3 held
// while valid, and every permit free once they are all gone.
func TestSemaphoreWaitsEndingAsPermitsAreHandedLeaveNoneStuck(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	const name, N = "faults-handover-race", 3
	var inside atomic.Int64
	var over atomic.Int64
	var taken, refused atomic.Int64
	stop := time.Now().Add(3 * time.Second)
	var wg sync.WaitGroup
	for g := range 8 {
		s := newSemaphore(t, newClient(t, rdb), name, N)
		wg.Go(func() {
			for i := 0; i < 500 && time.Now().Before(stop); i++ {
				k := 1 + (g+i)%N
				wait := time.Duration(1+(g*7+i)%15) * time.Millisecond
				l, err := s.AcquireN(ctx, k, dlock.MaxWait(wait), dlock.LeaseTTL(2*time.Second))
				if err != nil {
					refused.Add(1)
					continue
				}
				taken.Add(1)
				if n := inside.Add(int64(k)); n > N && time.Now().Before(l.ValidUntil()) {
					over.Add(1)
				}
				time.Sleep(time.Duration(i%3) * time.Millisecond)
				inside.Add(-int64(k))
				l.Release(ctx)
			}
		})
	}
	wg.Wait()
	t.Logf("%d taken, %d waits ended", taken.Load(), refused.Load())
	if over.Load() > 0 {
		t.Errorf("%d times more than %d permits were held", over.Load(), N)
	}
	probe := newSemaphore(t, newClient(t, rdb), name, N)
	if n, err := probe.Available(ctx); err != nil || n != N {
		hs, _ := probe.Holders(ctx)
		t.Errorf("Available once every caller is gone = %d, %v, want %d (holds %+v, queue %v)", n, err, N, hs, rdb.LRange(ctx, "dlock:{"+name+"}:q", 0, -1).Val())
	}
	if q := rdb.LLen(ctx, "dlock:{"+name+"}:q").Val(); q != 0 {
		t.Errorf("%d queue entries left once every caller is gone", q)
	}
}

// A waiter for several permits whose request's reply is lost while it waits
// asks again under the same token and keeps its place: the waiter for one
// permit behind it does not pass it, and the release of the permits it
// waits for hands them to it first.
func TestSemaphoreAcquireNWaiterWithALostReplyKeepsItsPlace(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	const name = "faults-keeps-place"
	held, err := newSemaphore(t, newClient(t, rdb), name, 2).AcquireN(ctx, 2, dlock.LeaseTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	var lost atomic.Int32
	conn := &astrayConn{Conn: goredisdriver.Conn(rdb), script: "hold_acquire",
		rest: func(c *astrayConn, ctx context.Context, args []any) (any, error) {
			if lost.Add(1) == 1 { // the second call: ran, its reply lost
				c.Conn.Do(ctx, args...)
				return nil, io.EOF
			}
			return c.Conn.Do(ctx, args...)
		}}
	head := newSemaphore(t, astrayClient(t, conn), name, 2)
	got := make(chan *dlock.Lock, 1)
	go func() {
		l, err := head.AcquireN(ctx, 2, dlock.LeaseTTL(time.Minute), dlock.MaxWait(10*time.Second))
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	if !waitFor(5*time.Second, func() bool { return lost.Load() >= 2 }) {
		t.Fatal("the waiter never asked again after its lost reply")
	}
	if !queued(ctx, rdb, name, 1) {
		t.Fatal("the waiter for 2 is not queued")
	}
	behind := newSemaphore(t, newClient(t, rdb), name, 2)
	small := make(chan *dlock.Lock, 1)
	go func() {
		l, _ := behind.Acquire(ctx, dlock.LeaseTTL(time.Minute), dlock.MaxWait(10*time.Second))
		small <- l
	}()
	if !queued(ctx, rdb, name, 2) {
		t.Fatal("the waiter for 1 never queued")
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-got:
		if l == nil {
			t.Fatal("the waiter for 2 got nothing")
		}
		select {
		case s := <-small:
			t.Fatalf("the waiter for 1 got a permit (%v) beside the hold of 2 of 2", s)
		case <-time.After(200 * time.Millisecond):
		}
		l.Release(ctx)
	case s := <-small:
		t.Fatalf("the waiter for 1 passed the waiter for 2 that lost a reply (%v)", s)
	case <-time.After(8 * time.Second):
		t.Fatal("the waiter for 2 was not let in after the release")
	}
	if s := <-small; s != nil {
		s.Release(ctx)
	}
}
