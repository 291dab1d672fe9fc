package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/driver"
	"github.com/dlockio/dlock/internal/goredisdriver"
	"github.com/dlockio/dlock/internal/leakcheck"
	"github.com/dlockio/dlock/internal/redistest"
	"github.com/dlockio/dlock/internal/script"
)

// forcedKinds are the kinds whose leases ForceRelease ends: each takes a
// lease of name on c.
var forcedKinds = []struct {
	name     string
	opts     []dlock.Option
	scripted bool // the kind needs scripts
	take     func(ctx context.Context, c *dlock.Client, name string, o ...dlock.LockOption) (*dlock.Lock, error)
}{
	{"unfair", []dlock.Option{dlock.WithUnfair(nil)}, false, func(ctx context.Context, c *dlock.Client, name string, o ...dlock.LockOption) (*dlock.Lock, error) {
		return c.TryAcquire(ctx, name, o...)
	}},
	{"fair", nil, false, func(ctx context.Context, c *dlock.Client, name string, o ...dlock.LockOption) (*dlock.Lock, error) {
		return c.TryAcquire(ctx, name, o...)
	}},
	{"reentrant", []dlock.Option{dlock.WithReentrant(true)}, true, func(ctx context.Context, c *dlock.Client, name string, o ...dlock.LockOption) (*dlock.Lock, error) {
		return c.TryAcquire(ctx, name, o...)
	}},
	{"permit", nil, true, func(ctx context.Context, c *dlock.Client, name string, o ...dlock.LockOption) (*dlock.Lock, error) {
		s, err := c.Semaphore(name, 2)
		if err != nil {
			return nil, err
		}
		return s.TryAcquire(ctx, o...)
	}},
	{"read", nil, true, func(ctx context.Context, c *dlock.Client, name string, o ...dlock.LockOption) (*dlock.Lock, error) {
		rw, err := c.RWMutex(name)
		if err != nil {
			return nil, err
		}
		return rw.Reader().TryAcquire(ctx, o...)
	}},
	{"write", nil, true, func(ctx context.Context, c *dlock.Client, name string, o ...dlock.LockOption) (*dlock.Lock, error) {
		rw, err := c.RWMutex(name)
		if err != nil {
			return nil, err
		}
		return rw.Writer().TryAcquire(ctx, o...)
	}},
	{"leader", nil, true, func(ctx context.Context, c *dlock.Client, name string, o ...dlock.LockOption) (*dlock.Lock, error) {
		e, err := c.Election(name)
		if err != nil {
			return nil, err
		}
		ld, err := e.Campaign(ctx, "v", append(o, dlock.MaxWait(0))...)
		if err != nil {
			return nil, err
		}
		return ld.Lock(), nil
	}},
}

// noLuaWords fails the test if err carries the words of a script's error
// reply: a caller is told by sentinel, not by Redis's text.
func noLuaWords(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	for _, w := range []string{"REVOKED", "this lease was already ended", "ERR ", "user_script"} {
		if strings.Contains(err.Error(), w) {
			t.Errorf("%s: %v carries Redis's words %q", what, err, w)
		}
	}
}

// A lease of any kind ended by ForceRelease is told ErrNotHeld at its
// holder's next Fence, Extend or Release (none of them reads the marker the
// force set as anything but ended, nor passes on a script's words), its
// token is not resumed, and the marker the force set refuses nobody else:
// the same Client takes the lock again at once, under a new token.
func TestForcedLeaseOfEveryKindIsToldNotHeldAndItsMarkerRefusesNoNewLease(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	for _, mode := range []string{"scripts", "noscripts", "forced-without-scripts"} {
		for _, k := range forcedKinds {
			if mode == "noscripts" && k.scripted {
				continue
			}
			for _, op := range []string{"fence", "extend", "release", "resume"} {
				// (A leader's and a reentrant lock's fence is issued with
				// the lease, and returned as issued; a reentrant hold's
				// token is not a resumable one.)
				if (op == "fence" && (k.name == "leader" || k.name == "reentrant")) || (op == "resume" && k.name == "reentrant") {
					continue
				}
				t.Run(mode+"/"+k.name+"/"+op, func(t *testing.T) {
					t.Parallel()
					ctx := t.Context()
					opts := k.opts
					if mode == "noscripts" {
						opts = append(append([]dlock.Option(nil), opts...), dlock.WithoutScripts())
					}
					c := newClient(t, rdb, opts...)
					defer c.Close(context.WithoutCancel(ctx))
					name := "forced-kind-" + mode + "-" + k.name + "-" + op
					l, err := k.take(ctx, c, name, dlock.LeaseTTL(time.Minute))
					if err != nil {
						t.Fatal(err)
					}
					forcer := c
					if mode == "forced-without-scripts" { // (a script-free Client forces a scripted one's lease)
						forcer = newClient(t, rdb, dlock.WithoutScripts())
						defer forcer.Close(context.WithoutCancel(ctx))
					}
					if ok, err := forcer.ForceRelease(ctx, name); err != nil || !ok {
						t.Fatalf("ForceRelease = %v, %v", ok, err)
					}
					switch op {
					case "fence":
						_, err = l.Fence(ctx)
					case "extend":
						err = l.Extend(ctx, time.Minute)
					case "release":
						err = l.Release(ctx)
					case "resume":
						var r *dlock.Lock
						r, err = k.take(ctx, c, name, dlock.Resume(l.Token()))
						if err == nil {
							r.Release(ctx)
						}
					}
					if !errors.Is(err, dlock.ErrNotHeld) {
						t.Errorf("%s of the forced lease = %v, want ErrNotHeld", op, err)
					}
					noLuaWords(t, op, err)
					l.Release(ctx)
					again, err := k.take(ctx, c, name, dlock.LeaseTTL(time.Minute))
					if err != nil {
						t.Fatalf("a new lease of the lock after the force: %v", err)
					}
					if again.Token() == l.Token() {
						t.Errorf("the new lease reuses the forced lease's token %s", l.Token())
					}
					if err := again.Extend(ctx, time.Minute); err != nil {
						t.Errorf("Extend of the new lease: %v", err)
					}
					if err := again.Release(ctx); err != nil {
						t.Errorf("Release of the new lease: %v", err)
					}
				})
			}
		}
	}
}

// Waiters of every queued kind keep getting in while ForceRelease ends
// their holders again and again: a force deletes the lock and announces
// it free, and the markers it sets refuse only the forced leases' own
// tokens, so no waiter is left queued behind a holding that is gone; when
// the churn ends the lock is free and its queue empty.
func TestWaitersGetInWhileForceReleaseEndsTheirHoldersAgainAndAgain(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	for _, k := range forcedKinds {
		if k.name == "leader" || k.name == "reentrant" || k.name == "unfair" {
			continue // (no queue of their own)
		}
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			name := "forced-churn-" + k.name
			c := newClient(t, rdb, k.opts...)
			defer c.Close(context.WithoutCancel(ctx))
			wait := func(ctx context.Context, c *dlock.Client, name string, o ...dlock.LockOption) (*dlock.Lock, error) {
				switch k.name {
				case "permit":
					s, _ := c.Semaphore(name, 2)
					return s.Acquire(ctx, o...)
				case "read", "write":
					rw, _ := c.RWMutex(name)
					if k.name == "read" {
						return rw.Reader().Acquire(ctx, o...)
					}
					return rw.Writer().Acquire(ctx, o...)
				}
				return c.Acquire(ctx, name, o...)
			}
			stop := make(chan struct{})
			forced := make(chan int, 1)
			go func() {
				n := 0
				defer func() { forced <- n }()
				for {
					select {
					case <-stop:
						return
					case <-time.After(15 * time.Millisecond):
					}
					// (holders that change between each read and the force
					// are an error that says to try again: the next round does)
					if ok, err := c.ForceRelease(ctx, name); err != nil && !strings.Contains(err.Error(), "try again") {
						t.Errorf("ForceRelease: %v", err)
						return
					} else if ok {
						n++
					}
				}
			}()
			errs := make(chan error, 4)
			for w := range 4 {
				go func() {
					for i := range 12 {
						l, err := wait(ctx, c, name, dlock.LeaseTTL(10*time.Second), dlock.MaxWait(4*time.Second))
						if err != nil {
							errs <- fmt.Errorf("worker %d, acquisition %d: %w", w, i, err)
							return
						}
						time.Sleep(3 * time.Millisecond)
						if err := l.Release(ctx); err != nil && !errors.Is(err, dlock.ErrNotHeld) {
							errs <- fmt.Errorf("worker %d, release %d: %w", w, i, err)
							return
						}
						noLuaWords(t, "release", l.Err())
					}
					errs <- nil
				}()
			}
			for range 4 {
				if err := <-errs; err != nil {
					t.Error(err)
				}
			}
			close(stop)
			t.Logf("%d forces ended a holding", <-forced)
			info, err := c.Inspect(ctx, name)
			if err != nil || info.Held || info.Queued != 0 {
				t.Errorf("the lock after the churn: %+v, %v; want it free with nobody queued", info, err)
			}
		})
	}
}

// ForceRelease over a Redlock quorum ends the lease on every node and sets
// its marker on each: the forced holder's extension is told ErrNotHeld,
// Resume of its token is refused, and a new lease is taken at once; with
// one node paused the force ends the lease on the other two, a majority,
// and reports it so, with no error (its marker there refuses the lease:
// it cannot hold a majority again), and the holder is still told lost.
func TestRedlockForceReleaseEndsTheLeaseAndRefusesOnlyItsToken(t *testing.T) {
	t.Parallel()
	srvs, nodes := startQuorum(t, 3)
	ctx := t.Context()
	c := newRedlock(t, nodes, 300*time.Millisecond)
	defer c.Close(context.WithoutCancel(ctx))
	for _, paused := range []bool{false, true} {
		name := fmt.Sprintf("forced-quorum-%v", paused)
		l, err := c.TryAcquire(ctx, name, dlock.LeaseTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		if paused {
			srvs[2].Pause()
		}
		ok, err := c.ForceRelease(ctx, name)
		if paused {
			srvs[2].Resume()
		}
		t.Logf("paused=%v: ForceRelease = %v, %v", paused, ok, err)
		noLuaWords(t, "ForceRelease", err)
		if err != nil || !ok {
			t.Fatalf("paused=%v: ForceRelease = %v, %v; want true, nil", paused, ok, err)
		}
		if err := l.Extend(ctx, time.Minute); !errors.Is(err, dlock.ErrNotHeld) {
			t.Errorf("paused=%v: Extend of the forced lease = %v, want ErrNotHeld", paused, err)
		}
		if r, err := c.TryAcquire(ctx, name, dlock.Resume(l.Token())); !errors.Is(err, dlock.ErrNotHeld) {
			t.Errorf("paused=%v: Resume of the forced token = %v, %v; want ErrNotHeld", paused, r, err)
		}
		l.Release(ctx)
		if paused {
			// The paused node still holds the forced lease (the force never
			// reached it): a minority, which blocks nobody's quorum.
			ok, err := c.ForceRelease(ctx, name)
			t.Logf("the second ForceRelease = %v, %v", ok, err)
		}
		again, err := c.TryAcquire(ctx, name, dlock.LeaseTTL(time.Minute))
		if err != nil {
			t.Fatalf("paused=%v: a new lease after the force: %v", paused, err)
		}
		if err := again.Release(ctx); err != nil {
			t.Error(err)
		}
	}
}

// An extension whose context ends while it is in flight on a call of its
// own (script-free, on a frozen server) leaves at its context's end and is
// not a loss: the Lock stays held, extends again once the server answers,
// and its release frees the lock. (The replica-acknowledged path shares
// leftWith; its setup, a synced replica, takes seconds.)
func TestExtensionLeftInFlightAtItsContextsEndIsNoLoss(t *testing.T) {
	t.Parallel()
	leakcheck.Check(t)
	ctx := t.Context()
	master := redistest.Start(t, redistest.TCP())
	rdb := master.Client(t)
	c := newClient(t, rdb, dlock.LeaseTTL(5*time.Second), dlock.WithAutoExtend(false), dlock.WithoutScripts())
	defer c.Close(context.WithoutCancel(ctx))
	l, err := c.TryAcquire(ctx, "left-extension")
	if err != nil {
		t.Fatal(err)
	}
	master.Pause()
	resumed := false
	defer func() {
		if !resumed {
			master.Resume()
		}
	}()
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = l.Extend(short, 5*time.Second)
	took := time.Since(start)
	master.Resume()
	resumed = true
	if took > 2500*time.Millisecond { // (go-redis's read timeout: 5s)
		t.Errorf("Extend took %v past its 200ms ctx", took)
	}
	if err == nil || errors.Is(err, dlock.ErrNotHeld) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Extend whose ctx ends in flight = %v; want its context's error, not ErrNotHeld", err)
	}
	noLuaWords(t, "extend", err)
	select {
	case <-l.Done():
		t.Fatalf("the Lock ended after an extension left in flight: %v", l.Err())
	default:
	}
	if err := l.Extend(ctx, 5*time.Second); err != nil {
		t.Errorf("Extend once the server answers: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Errorf("Release: %v", err)
	}
	if !waitFor(3*time.Second, func() bool { return !exists(ctx, master, l.Key()) }) {
		t.Errorf("the lock is still held after its release")
	}
}

// A script-free Client's calls with a context already done send nothing
// and say so, as a scripting Client's do: their error matches the
// context's and driver.ErrNotSent, not "left in flight" (a call that
// never left is not in flight: a Release so told counts its release as
// maybe sent, an acquisition so told is undone for nothing). Each call is
// made several times: which of two ready channels leftWith's select takes
// is random.
func TestWithoutScriptsCallsWithADoneContextAreToldNotSent(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	for _, mode := range []string{"scripts", "noscripts"} {
		opts := []dlock.Option{dlock.WithAutoExtend(false)}
		if mode == "noscripts" {
			opts = append(opts, dlock.WithoutScripts())
		}
		c := newClient(t, rdb, opts...)
		defer c.Close(context.WithoutCancel(ctx))
		name := "done-ctx-" + mode
		l, err := c.TryAcquire(ctx, name, dlock.LeaseTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		done, cancel := context.WithCancel(ctx)
		cancel()
		calls := map[string]func() error{
			"Fence":        func() error { _, err := l.Fence(done); return err },
			"Extend":       func() error { return l.Extend(done, time.Minute) },
			"Inspect":      func() error { _, err := c.Inspect(done, name); return err },
			"ForceRelease": func() error { _, err := c.ForceRelease(done, name); return err },
		}
		for call, f := range calls {
			for range 10 {
				if err := f(); !errors.Is(err, context.Canceled) || !errors.Is(err, driver.ErrNotSent) {
					t.Errorf("%s: %s with a done context = %v; want context.Canceled and driver.ErrNotSent", mode, call, err)
					break
				}
			}
		}
		if info, err := c.Inspect(ctx, name); err != nil || !info.Held {
			t.Errorf("%s: the lock after calls with a done context: %+v, %v; want it still held", mode, info, err)
		}
		if err := l.Release(done); !errors.Is(err, context.Canceled) || !errors.Is(err, driver.ErrNotSent) {
			t.Errorf("%s: Release with a done context = %v; want context.Canceled and driver.ErrNotSent", mode, err)
		}
		if err := l.Release(ctx); err != nil {
			t.Errorf("%s: Release: %v", mode, err)
		}
	}
}

// cancelAfterMarkerRead is a go-redis hook that cancels a context once a
// GET of a lease's marker (a resume's read of its sequence number) has
// been answered, while armed.
type cancelAfterMarkerRead struct {
	cancel context.CancelFunc
	armed  atomic.Bool
}

func (h *cancelAfterMarkerRead) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *cancelAfterMarkerRead) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if args := cmd.Args(); len(args) == 2 && strings.EqualFold(fmt.Sprint(args[0]), "get") && strings.Contains(fmt.Sprint(args[1]), ":r:") && h.armed.CompareAndSwap(true, false) {
			h.cancel()
		}
		return err
	}
}

func (h *cancelAfterMarkerRead) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A script-free Resume whose context ends between its read of the lease's
// sequence number and its extension sends no extension, and so undoes
// nothing: the lease it failed to resume stays its holder's, who extends
// it. (Told "left in flight", the extension was taken as maybe landed and
// undone, which ended the holder's live lease though nothing was sent.)
func TestWithoutScriptsResumeWhoseContextEndsBeforeItsExtensionLeavesTheLeaseToItsHolder(t *testing.T) {
	t.Parallel()
	srv, rdb := setup(t)
	ctx := t.Context()
	holder := newClient(t, rdb, dlock.WithoutScripts(), dlock.WithAutoExtend(false))
	defer holder.Close(context.WithoutCancel(ctx))
	l, err := holder.TryAcquire(ctx, "resume-cut-short", dlock.LeaseTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	rdb2 := srv.Client(t)
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	hook := &cancelAfterMarkerRead{cancel: cancel}
	rdb2.AddHook(hook)
	resumer := newClient(t, rdb2, dlock.WithoutScripts(), dlock.WithAutoExtend(false))
	defer resumer.Close(context.WithoutCancel(ctx))
	hook.armed.Store(true)
	r, err := resumer.TryAcquire(rctx, "resume-cut-short", dlock.Resume(l.Token()))
	if err == nil {
		r.Release(ctx)
		t.Fatal("the resume succeeded though its context ended before its extension")
	}
	if hook.armed.Load() {
		t.Fatalf("the resume never read the marker: %v", err)
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("the resume = %v, want context.Canceled", err)
	}
	time.Sleep(100 * time.Millisecond) // (an undo in the background would have run)
	if v, err := rdb.Get(ctx, l.Key()).Result(); err != nil || v != l.Token() {
		t.Errorf("the lock after a resume that sent no extension = %q, %v; want the holder's token", v, err)
	}
	if err := l.Extend(ctx, time.Minute); err != nil {
		t.Errorf("the holder's Extend after a resume that sent nothing = %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Error(err)
	}
}

// A leader ended by ForceRelease, whose campaign request was delayed in
// the network (its reply lost, the request asked again and granted), is
// told lost at its next extension though that copy lands after another
// candidate led and resigned: the force set its token's marker ended, so
// the copy takes no term for a leader that would never learn of the force.
func TestForcedLeaderIsToldLostDespiteALateCopyOfItsCampaign(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	name := "forced-late-leader"
	lc := lateCopy{make(chan struct{}), make(chan struct{})}
	conn := &astrayConn{Conn: goredisdriver.Conn(rdb), script: "campaign_acquire", first: lc.first}
	e, err := astrayClient(t, conn).Election(name)
	if err != nil {
		t.Fatal(err)
	}
	ld, err := e.Campaign(ctx, "first", dlock.LeaseTTL(time.Minute), dlock.MaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer ld.Resign(ctx)
	other := newClient(t, rdb)
	if ok, err := other.ForceRelease(ctx, name); err != nil || !ok {
		t.Fatalf("ForceRelease = %v, %v", ok, err)
	}
	oe, err := other.Election(name)
	if err != nil {
		t.Fatal(err)
	}
	next, err := oe.Campaign(ctx, "second", dlock.MaxWait(2*time.Second))
	if err != nil {
		t.Fatalf("a campaign after the ForceRelease: %v", err)
	}
	if err := next.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	close(lc.land)
	select {
	case <-lc.landed:
	case <-time.After(5 * time.Second):
		t.Fatal("the delayed copy never landed")
	}
	if err := ld.Lock().Extend(ctx, time.Minute); !errors.Is(err, dlock.ErrNotHeld) {
		info, _ := other.Inspect(ctx, name)
		t.Fatalf("Extend of the forced leader after another came and went = %v, want ErrNotHeld (the lock now: %+v)", err, info)
	}
	if info, err := other.Inspect(ctx, name); err != nil || info.Held {
		t.Errorf("the lock after the late copy landed: %+v, %v; want it free", info, err)
	}
}

// afterInspect is a go-redis hook that runs between, once, when a reply to
// the inspect script (ForceRelease's read of the lock) has come back: the
// moment between a force's read and its script.
type afterInspect struct {
	between func()
	every   bool // between runs after every read, not the first only
	armed   atomic.Bool
	once    sync.Once
	forces  atomic.Int32 // the force scripts run
}

func (h *afterInspect) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *afterInspect) inspected(cmds ...redis.Cmder) {
	for _, cmd := range cmds {
		args := cmd.Args()
		if len(args) > 1 && fmt.Sprint(args[1]) == script.ForceRelease.Hash() {
			h.forces.Add(1)
		}
		if h.armed.Load() && cmd.Err() == nil && len(args) > 1 && strings.EqualFold(fmt.Sprint(args[0]), "evalsha") && fmt.Sprint(args[1]) == script.Inspect.Hash() {
			if h.every {
				h.between()
			} else {
				h.once.Do(h.between)
			}
		}
	}
}

func (h *afterInspect) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.inspected(cmd)
		return err
	}
}

func (h *afterInspect) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		h.inspected(cmds...)
		return err
	}
}

// A reentrant lock's hold taken by its owner between ForceRelease's read
// and its script is forced out with the holds the force read (the holding
// it names, "<owner> <fence>", is the same), so its marker must be set
// ended too: else a late copy of that hold's request, landing after
// another owner came and went, takes the lock again for a holder that
// never learns of the force, and whose next extension succeeds.
func TestReentrantHoldTakenBetweenAForcesReadAndItsScriptIsToldLost(t *testing.T) {
	t.Parallel()
	srv, rdb := setup(t)
	ctx := t.Context()
	name := "forced-between-reentrant"
	lc := lateCopy{make(chan struct{}), make(chan struct{})}
	var delayed atomic.Bool
	conn := &astrayConn{Conn: goredisdriver.Conn(rdb), script: "acquire_reentrant",
		rest: func(c *astrayConn, ctx context.Context, args []any) (any, error) {
			if delayed.CompareAndSwap(false, true) {
				return lc.first(c, ctx, args) // the second hold's first request: held in the network
			}
			return c.Conn.Do(ctx, args...)
		}}
	owner, err := astrayClient(t, conn, dlock.WithReentrant(true)).Owner("o")
	if err != nil {
		t.Fatal(err)
	}
	first, err := owner.TryAcquire(ctx, name, dlock.LeaseTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer first.Release(ctx)
	var second *dlock.Lock
	rdbF := srv.Client(t)
	hook := &afterInspect{between: func() {
		// The owner enters again: its first request is delayed, its reply
		// lost, and the request asked again is granted.
		second, err = owner.TryAcquire(ctx, name, dlock.LeaseTTL(time.Minute))
	}}
	rdbF.AddHook(hook)
	forcer := newClient(t, rdbF, dlock.WithReentrant(true))
	if _, err := forcer.Inspect(ctx, name); err != nil { // (its scripts loaded: the force reads once)
		t.Fatal(err)
	}
	hook.armed.Store(true)
	ok, ferr := forcer.ForceRelease(ctx, name)
	if err != nil {
		t.Fatalf("the second hold, taken between the force's read and its script: %v", err)
	}
	if second == nil {
		t.Fatal("the force never read the lock")
	}
	defer second.Release(ctx)
	if ferr != nil || !ok {
		t.Fatalf("ForceRelease = %v, %v", ok, ferr)
	}
	other := newClient(t, rdb, dlock.WithReentrant(true))
	next, err := other.TryAcquire(ctx, name)
	if err != nil {
		t.Fatalf("another owner after the force: %v", err)
	}
	if err := next.Release(ctx); err != nil {
		t.Fatal(err)
	}
	close(lc.land)
	select {
	case <-lc.landed:
	case <-time.After(5 * time.Second):
		t.Fatal("the delayed copy never landed")
	}
	if err := second.Extend(ctx, time.Minute); !errors.Is(err, dlock.ErrNotHeld) {
		info, _ := other.Inspect(ctx, name)
		t.Fatalf("Extend of the hold forced out after another owner came and went = %v, want ErrNotHeld (the lock now: %+v)", err, info)
	}
}

// ForceRelease reports whether it deleted a holding; a false is read as
// "not held" (the CLI prints so). A semaphore's permit or a fair lock's
// handover that comes between the force's read and its script changes the
// holding the script names: the script then deletes nothing. The lock was
// held throughout, and still is: the force must not report that nothing
// was held and leave the holders in.
func TestForceReleaseRacingANewHolderDoesNotReportNothingHeldWhileHeld(t *testing.T) {
	t.Parallel()
	srv, rdb := setup(t)
	ctx := t.Context()
	for _, k := range forcedKinds {
		if k.name != "permit" && k.name != "read" {
			continue
		}
		t.Run(k.name, func(t *testing.T) {
			name := "force-racing-" + k.name
			c := newClient(t, rdb, k.opts...)
			defer c.Close(context.WithoutCancel(ctx))
			first, err := k.take(ctx, c, name, dlock.LeaseTTL(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			defer first.Release(ctx)
			var second *dlock.Lock
			hook := &afterInspect{between: func() { second, err = k.take(ctx, c, name, dlock.LeaseTTL(time.Minute)) }}
			rdbF := srv.Client(t)
			rdbF.AddHook(hook)
			forcer := newClient(t, rdbF)
			defer forcer.Close(context.WithoutCancel(ctx))
			if _, err := forcer.Inspect(ctx, name); err != nil {
				t.Fatal(err)
			}
			hook.armed.Store(true)
			ok, ferr := forcer.ForceRelease(ctx, name)
			if err != nil || second == nil {
				t.Fatalf("the second hold, taken between the force's read and its script: %v", err)
			}
			defer second.Release(ctx)
			info, ierr := forcer.Inspect(ctx, name)
			if ferr != nil || ierr != nil || (!ok && info.Held) {
				t.Errorf("ForceRelease = %v, %v, and the lock after it held=%v (%v): told nothing was held while two holds hold it", ok, ferr, info.Held, ierr)
			}
		})
	}
}

// A ForceRelease whose every read of the holders is followed by a new
// permit, so that its script never finds the holding it read, gives up
// after a few tries with an error, not with "nothing held": the lock was
// held all along. One whose last read is followed by the lock's release
// reports it as not held, with no error.
func TestForceReleaseWhoseHoldersChangeAfterEveryReadIsAnError(t *testing.T) {
	t.Parallel()
	for _, freedAtLast := range []bool{false, true} {
		t.Run(fmt.Sprint("freed at the last read ", freedAtLast), func(t *testing.T) {
			t.Parallel()
			srv, rdb := setup(t)
			ctx := t.Context()
			c := newClient(t, rdb)
			sem, err := c.Semaphore("force-busy", 10)
			if err != nil {
				t.Fatal(err)
			}
			var taken []*dlock.Lock
			defer func() {
				for _, l := range taken {
					l.Release(ctx)
				}
			}()
			hook := &afterInspect{every: true}
			hook.between = func() {
				if freedAtLast && hook.forces.Load() == 2 { // (the last read)
					for _, l := range taken {
						l.Release(ctx)
					}
					taken = nil
				} else if l, err := sem.TryAcquire(ctx, dlock.LeaseTTL(time.Minute)); err == nil {
					taken = append(taken, l)
				}
			}
			rdbF := srv.Client(t)
			rdbF.AddHook(hook)
			forcer := newClient(t, rdbF)
			if _, err := sem.TryAcquire(ctx, dlock.LeaseTTL(time.Minute)); err != nil {
				t.Fatal(err)
			}
			if ok, err := forcer.ForceRelease(ctx, "force-busy"); !ok || err != nil { // (loads the scripts: each is sent once in the force below)
				t.Fatalf("the first ForceRelease = %v, %v", ok, err)
			}
			first, err := sem.TryAcquire(ctx, dlock.LeaseTTL(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			taken = append(taken, first)
			hook.forces.Store(0)
			hook.armed.Store(true)
			ok, ferr := forcer.ForceRelease(ctx, "force-busy")
			hook.armed.Store(false)
			if freedAtLast && (ok || ferr != nil) {
				t.Errorf("ForceRelease of a lock freed after its last read = %v, %v; want false, nil", ok, ferr)
			}
			if !freedAtLast && (ok || ferr == nil) {
				t.Errorf("ForceRelease whose holders changed after each read = %v, %v; want an error", ok, ferr)
			}
			if info, err := c.Inspect(ctx, "force-busy"); err != nil || len(info.Permits) != len(taken) {
				t.Errorf("after the force: %d permits held, %v; want the %d taken", len(info.Permits), err, len(taken))
			}
		})
	}
}
