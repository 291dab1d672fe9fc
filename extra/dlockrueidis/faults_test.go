package dlockrueidis

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/redistest"
)

type holding struct {
	who        string
	start, end time.Time
	token      string
}

// exclusionUnderFaults runs clients x goroutines contending for one lock through
// rueidis, each client behind its own proxy, while faults hit the proxies;
// it returns the holdings' intervals [Acquire returned, min(release
// started, ValidUntil)] and fails the test if two overlap.
func exclusionUnderFaults(t *testing.T, dur time.Duration, fault func(r *rand.Rand, ps []*redistest.Proxy), opts ...dlock.Option) {
	s := redistest.Start(t, redistest.TCP())
	const clients, workers = 3, 4
	var ps []*redistest.Proxy
	var cs []*dlock.Client
	for range clients {
		p := redistest.NewProxy(t, s.Addr())
		ps = append(ps, p)
		cs = append(cs, newDlock(t, p.Addr(), opts...))
	}
	var (
		mu    sync.Mutex
		holds []holding
		errs  = map[string]int{}
	)
	stop := time.Now().Add(dur)
	var wg sync.WaitGroup
	for ci, c := range cs {
		for wi := range workers {
			wg.Go(func() {
				r := rand.New(rand.NewPCG(uint64(ci), uint64(wi)))
				for time.Now().Before(stop) {
					ctx, cancel := context.WithTimeout(context.Background(), time.Duration(50+r.IntN(700))*time.Millisecond)
					l, err := c.Acquire(ctx, "m", dlock.LeaseTTL(time.Duration(300+r.IntN(500))*time.Millisecond))
					cancel()
					if err != nil {
						mu.Lock()
						errs[fmt.Sprintf("%.60v", err)]++
						mu.Unlock()
						continue
					}
					h := holding{who: fmt.Sprintf("c%d/w%d", ci, wi), start: time.Now(), token: l.Token()}
					time.Sleep(time.Duration(r.IntN(30)) * time.Millisecond)
					end := time.Now()
					if v := l.ValidUntil(); v.Before(end) {
						end = v
					}
					h.end = end
					mu.Lock()
					holds = append(holds, h)
					mu.Unlock()
					rctx, rcancel := context.WithTimeout(context.Background(), time.Duration(20+r.IntN(500))*time.Millisecond)
					l.Release(rctx)
					rcancel()
				}
			})
		}
	}
	wg.Go(func() {
		r := rand.New(rand.NewPCG(99, 99))
		for time.Now().Before(stop) {
			fault(r, ps)
		}
		for _, p := range ps {
			p.Cut()
		}
	})
	wg.Wait()
	bad := overlaps(t, holds)
	t.Logf("%d holdings, %d overlaps; errors: %v", len(holds), bad, errs)
	freeAgain(t, s.Addr(), opts...)
}

// overlaps sorts holds by start and fails the test for each holding that
// began before one of the 20 before it ended; it returns how many did.
func overlaps(t *testing.T, holds []holding) int {
	t.Helper()
	sort.Slice(holds, func(i, j int) bool { return holds[i].start.Before(holds[j].start) })
	bad := 0
	for i := 1; i < len(holds); i++ {
		for j := i - 1; j >= 0 && j >= i-20; j-- {
			if holds[j].end.After(holds[i].start) && !holds[j].end.Before(holds[j].start) {
				bad++
				if bad < 5 {
					t.Errorf("two holders: %s %s..%s (tok %s) and %s from %s (tok %s), overlap %v",
						holds[j].who, holds[j].start.Format("05.000"), holds[j].end.Format("05.000"), holds[j].token,
						holds[i].who, holds[i].start.Format("05.000"), holds[i].token, holds[j].end.Sub(holds[i].start))
				}
			}
		}
	}
	return bad
}

// freeAgain checks that, after the faults, a Client of its own with the
// workers' options takes the lock on the server at addr: nothing stuck
// beyond a lease. (A reentrant lease left by a failed release is a hash,
// which a plain Client's Acquire reports as a value of another type.)
func freeAgain(t *testing.T, addr string, opts ...dlock.Option) {
	t.Helper()
	c := newDlock(t, addr, opts...)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	start := time.Now()
	l, err := c.Acquire(ctx, "m")
	if err != nil {
		t.Fatalf("the lock stayed stuck: %v", err)
	}
	t.Logf("free again after %v", time.Since(start))
	l.Release(ctx)
}

func TestExclusionUnderFaults(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("20s of faults")
	}
	exclusionUnderFaults(t, 10*time.Second, func(r *rand.Rand, ps []*redistest.Proxy) {
		p := ps[r.IntN(len(ps))]
		switch r.IntN(4) {
		case 0:
			p.Delay(time.Duration(r.IntN(300))*time.Millisecond, time.Duration(r.IntN(300))*time.Millisecond)
		case 1:
			p.StallReplies()
		case 2:
			p.Stall()
		case 3:
			p.Cut()
		}
		time.Sleep(time.Duration(50+r.IntN(400)) * time.Millisecond)
		if r.IntN(2) == 0 {
			p.Cut()
		}
	})
}

func TestExclusionUnderFaultsUnfairReentrant(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("20s of faults")
	}
	for name, opt := range map[string]dlock.Option{"unfair": dlock.WithUnfair(nil), "reentrant": dlock.WithReentrant(true)} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			exclusionUnderFaults(t, 5*time.Second, func(r *rand.Rand, ps []*redistest.Proxy) {
				p := ps[r.IntN(len(ps))]
				switch r.IntN(3) {
				case 0:
					p.Delay(time.Duration(r.IntN(300))*time.Millisecond, 0)
				case 1:
					p.StallReplies()
				case 2:
					p.Cut()
				}
				time.Sleep(time.Duration(50+r.IntN(300)) * time.Millisecond)
				p.Cut()
			}, opt)
		})
	}
}
