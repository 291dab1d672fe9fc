package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/goredisdriver"
)

// downgradedWithALateWriteCopy takes a write hold through a connection that
// loses the reply to its first request (the request held in the network, a
// copy asked again and granted), downgrades it to a read, and then lets the
// first copy of the write's request land. It returns the downgraded hold.
func downgradedWithALateWriteCopy(t *testing.T, name string) (*dlock.Lock, *dlock.RWMutex, *dlock.Client) {
	t.Helper()
	_, rdb := setup(t)
	ctx := t.Context()
	lc := lateCopy{make(chan struct{}), make(chan struct{})}
	conn := &astrayConn{Conn: goredisdriver.Conn(rdb), script: "hold_acquire", first: lc.first}
	c := astrayClient(t, conn)
	rw, err := c.RWMutex(name)
	if err != nil {
		t.Fatal(err)
	}
	w, err := rw.Writer().Acquire(ctx, dlock.LeaseTTL(time.Minute), dlock.MaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if conn.mu.Lock(); conn.n < 2 {
		conn.mu.Unlock()
		t.Fatal("the write's request was not asked again")
	} else {
		conn.mu.Unlock()
	}
	if err := rw.Downgrade(ctx, w); err != nil {
		t.Fatal(err)
	}
	close(lc.land)
	select {
	case <-lc.landed:
	case <-time.After(5 * time.Second):
		t.Fatal("the delayed copy never landed")
	}
	other, err := newClient(t, rdb).RWMutex(name)
	if err != nil {
		t.Fatal(err)
	}
	return w, other, c
}

// A write whose first request was delayed in the network (its reply lost,
// asked again and granted) and then downgraded: the first copy, landing
// while the downgraded read is held, must take nothing. Another reader
// then gets a read at once: only reads are held, nobody waits.
func TestRWMutexLateWriteCopyAfterDowngradeBlocksNoReader(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	w, other, _ := downgradedWithALateWriteCopy(t, "faults-dg-late-read")
	defer w.Release(ctx)
	r, err := other.Reader().TryAcquire(ctx, dlock.LeaseTTL(time.Minute))
	if err != nil {
		hs, _ := other.Holders(ctx)
		t.Fatalf("a read beside the downgraded read (holds %+v, nobody waiting) = %v: the late copy of the write's request queued a phantom writer", hs, err)
	}
	r.Release(ctx)
}

// The same late copy, once the downgraded read was extended to a shorter
// lease (a numbered extension) and released: the lock must be free, not
// handed as a write to the released hold's token, held by nobody.
func TestRWMutexLateWriteCopyAfterDowngradeLeavesNoWriteAfterRelease(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	w, other, _ := downgradedWithALateWriteCopy(t, "faults-dg-late-release")
	if err := w.Extend(ctx, 30*time.Second); err != nil { // shorter than the minute: numbered
		t.Fatal(err)
	}
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l, err := other.Writer().TryAcquire(ctx, dlock.LeaseTTL(time.Minute))
	if err != nil {
		hs, _ := other.Holders(ctx)
		if errors.Is(err, dlock.ErrNotAcquired) && len(hs) == 1 && hs[0].Token == w.Token() {
			t.Fatalf("after the downgraded read's release the lock is held as a write by its token (TTL %v), by nobody: %v", hs[0].TTL, err)
		}
		t.Fatalf("a write after the release = %v (holds %+v)", err, hs)
	}
	l.Release(ctx)
}

// span is the time a hold was used as a read or a write: from its grant to
// its release, cut at its validity.
type rwSpan struct {
	from, to time.Time
	write    bool
	hold     int
}

// Readers, writers and writers that downgrade, on several Clients through a
// proxy that delays, stalls and cuts replies: no write is used while any
// other hold, read or write, is (each counted from its grant until its
// release or its ValidUntil, whichever is first).
func TestRWMutexExclusionUnderFaultsWithDowngrades(t *testing.T) {
	t.Parallel()
	p, rdb, _ := proxied(t, 3, 300*time.Millisecond)
	ctx := t.Context()
	const name = "faults-rw-faults"
	var mu sync.Mutex
	var spans []rwSpan
	var holds atomic.Int64
	record := func(s rwSpan) {
		if s.to.After(s.from) {
			mu.Lock()
			spans = append(spans, s)
			mu.Unlock()
		}
	}
	until := func(l *dlock.Lock) time.Time {
		now, v := time.Now(), l.ValidUntil()
		if v.Before(now) {
			return v
		}
		return now
	}
	stop := time.Now().Add(4 * time.Second)
	var wg sync.WaitGroup
	for g := range 6 {
		rw := newRW(t, newClient(t, rdb, dlock.LeaseTTL(time.Second)), name)
		wg.Go(func() {
			for i := 0; i < 300 && time.Now().Before(stop); i++ {
				write := (g+i)%3 != 0
				locker := rw.Reader()
				if write {
					locker = rw.Writer()
				}
				l, err := locker.Acquire(ctx, dlock.MaxWait(time.Second))
				if err != nil {
					continue
				}
				id := int(holds.Add(1))
				from := time.Now()
				time.Sleep(time.Millisecond)
				if write && i%2 == 0 {
					record(rwSpan{from, until(l), true, id})
					// Settle the downgrade: an unknown outcome leaves a
					// read or a write, so only a read is used after it.
					var err error
					for try := 0; try < 5; try++ {
						dctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
						err = rw.Downgrade(dctx, l)
						cancel()
						if err == nil || l.Err() != nil {
							break
						}
					}
					if err != nil {
						l.Release(ctx)
						continue
					}
					from, write = time.Now(), false
					time.Sleep(time.Millisecond)
				}
				record(rwSpan{from, until(l), write, id})
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
	var bad []string
	for i, a := range spans {
		for _, b := range spans[i+1:] {
			if a.hold != b.hold && (a.write || b.write) && a.from.Before(b.to) && b.from.Before(a.to) {
				bad = append(bad, fmt.Sprintf("hold %d (write %v) and hold %d (write %v) overlap by %v", a.hold, a.write, b.hold, b.write,
					earliest(a.to, b.to).Sub(latest(a.from, b.from))))
			}
		}
	}
	t.Logf("%d spans", len(spans))
	// Faults over and every holder gone: the lock is free again once the
	// leases (1s) and queue entries (as long) that went astray ran out.
	p.Cut()
	probe := newRW(t, newClient(t, rdb), name)
	if !waitFor(5*time.Second, func() bool {
		l, err := probe.Writer().TryAcquire(ctx)
		if err == nil {
			l.Release(ctx)
		}
		return err == nil
	}) {
		hs, _ := probe.Holders(ctx)
		t.Errorf("the lock is not free 5s after its last holder: holds %+v", hs)
	}
	if len(bad) > 0 {
		t.Fatalf("%d overlaps with a write: %v", len(bad), bad[:min(len(bad), 5)])
	}
}

func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// A Downgrade of a write hold that ended is told with the hold's own error:
// released (ErrReleased), lapsed or taken away (ErrNotHeld); the hold is
// not turned into a read.
func TestRWMutexDowngradeOfAnEndedHoldIsToldItsEnd(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.WithAutoExtend(false))
	for _, tc := range []struct {
		name string
		end  func(rw *dlock.RWMutex, w *dlock.Lock)
		want error
	}{
		{"released", func(_ *dlock.RWMutex, w *dlock.Lock) { w.Release(ctx) }, dlock.ErrReleased},
		{"deleted", func(_ *dlock.RWMutex, w *dlock.Lock) { rdb.Del(ctx, w.Key()) }, dlock.ErrNotHeld},
		{"forced", func(rw *dlock.RWMutex, w *dlock.Lock) {
			if _, err := c.ForceRelease(ctx, rw.Name()); err != nil {
				t.Fatal(err)
			}
		}, dlock.ErrNotHeld},
	} {
		rw := newRW(t, c, "faults-dg-ended-"+tc.name)
		w, err := rw.Writer().Acquire(ctx, dlock.LeaseTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		tc.end(rw, w)
		err = rw.Downgrade(ctx, w)
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: Downgrade = %v, want it to match %v", tc.name, err, tc.want)
		}
		if n := rdb.Exists(ctx, w.Key()).Val(); n != 0 {
			t.Errorf("%s: the lock's key exists after the Downgrade of an ended hold: %v", tc.name, rdb.ZRangeWithScores(ctx, w.Key(), 0, -1).Val())
		}
		w.Release(ctx)
	}
}

// Readers, writers and downgrading writers whose waits end within
// milliseconds, so that many end as a release or a downgrade hands them the
// lock: the lock is free, its line empty, once they are all gone.
func TestRWMutexWaitsEndingAsHoldsAreHandedLeaveNothingStuck(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	const name = "faults-rw-handover-race"
	var writers, readers, bad atomic.Int64
	stop := time.Now().Add(3 * time.Second)
	var wg sync.WaitGroup
	for g := range 8 {
		rw := newRW(t, newClient(t, rdb), name)
		wg.Go(func() {
			for i := 0; i < 500 && time.Now().Before(stop); i++ {
				write := (g+i)%2 == 0
				locker := rw.Reader()
				if write {
					locker = rw.Writer()
				}
				wait := time.Duration(1+(g*5+i)%12) * time.Millisecond
				l, err := locker.Acquire(ctx, dlock.MaxWait(wait), dlock.LeaseTTL(2*time.Second))
				if err != nil {
					continue
				}
				if write {
					if writers.Add(1) > 1 || readers.Load() > 0 {
						bad.Add(1)
					}
					time.Sleep(time.Duration(i%2) * time.Millisecond)
					writers.Add(-1)
					if i%3 == 0 {
						if err := rw.Downgrade(ctx, l); err == nil {
							readers.Add(1)
							time.Sleep(time.Duration(i%2) * time.Millisecond)
							readers.Add(-1)
						}
					}
				} else {
					readers.Add(1)
					if writers.Load() > 0 {
						bad.Add(1)
					}
					time.Sleep(time.Duration(i%2) * time.Millisecond)
					readers.Add(-1)
				}
				l.Release(ctx)
			}
		})
	}
	wg.Wait()
	if bad.Load() > 0 {
		t.Errorf("%d times a write was held beside another hold", bad.Load())
	}
	probe := newRW(t, newClient(t, rdb), name)
	l, err := probe.Writer().TryAcquire(ctx)
	if err != nil {
		hs, _ := probe.Holders(ctx)
		t.Fatalf("a write once every caller is gone = %v (holds %+v, line %v)", err, hs, rdb.LRange(ctx, "dlock:{"+name+"}:q", 0, -1).Val())
	}
	l.Release(ctx)
	if q := rdb.LLen(ctx, "dlock:{"+name+"}:q").Val(); q != 0 {
		t.Errorf("%d entries left in the line once every caller is gone", q)
	}
}

// Release, Extend and Fence racing a Downgrade of the same hold: each call
// either comes before the Downgrade or after it; whichever wins, the lock
// is free once the Release returned, with no read or write left behind.
func TestRWMutexDowngradeRacingReleaseExtendFenceLeavesNothing(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb)
	for i := range 30 {
		name := fmt.Sprint("faults-dg-race-", i)
		rw := newRW(t, c, name)
		w, err := rw.Writer().Acquire(ctx, dlock.LeaseTTL(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var dgErr, relErr error
		wg.Go(func() { dgErr = rw.Downgrade(ctx, w) })
		wg.Go(func() { w.Extend(ctx, 10*time.Second) })
		wg.Go(func() { w.Fence(ctx) })
		wg.Go(func() {
			time.Sleep(time.Duration(i%4) * 200 * time.Microsecond)
			relErr = w.Release(ctx)
		})
		wg.Wait()
		if relErr != nil {
			t.Fatalf("%s: Release racing a Downgrade = %v", name, relErr)
		}
		if dgErr != nil && !errors.Is(dgErr, dlock.ErrReleased) {
			t.Errorf("%s: Downgrade racing a Release = %v, want nil or ErrReleased", name, dgErr)
		}
		if m := rdb.ZRange(ctx, w.Key(), 0, -1).Val(); len(m) != 0 {
			t.Errorf("%s: holds left after the Release: %v", name, m)
		}
	}
}
