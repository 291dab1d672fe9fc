package dlock_test

// The script-free mode's transactions against requests that arrive late,
// twice or not at all: a write to a watched key between a transaction's
// reads and its EXEC (what a request delayed in the network meets) must
// abort the EXEC, and a reply lost must leave nothing held by nobody.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/redistest"
)

// holdTx is a go-redis hook that holds the first transaction (MULTI …
// EXEC) with a command that match accepts, after the transaction's reads
// and before it is sent, until the test calls let; meanwhile the test
// writes what a concurrent client would.
type holdTx struct {
	match func(args []any) bool
	fn    func() // if set, called instead of holding the transaction
	once  sync.Once
	held  chan []any // the matching command's arguments
	go_   chan struct{}
}

func newHoldTx(match func(args []any) bool) *holdTx {
	return &holdTx{match: match, held: make(chan []any, 1), go_: make(chan struct{})}
}

func (h *holdTx) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *holdTx) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *holdTx) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 0 && cmds[0].Name() == "multi" {
			for _, cmd := range cmds {
				if h.match(cmd.Args()) {
					h.once.Do(func() {
						if h.fn != nil {
							h.fn()
							return
						}
						h.held <- cmd.Args()
						<-h.go_
					})
					break
				}
			}
		}
		return next(ctx, cmds)
	}
}

// wait returns the held command's arguments.
func (h *holdTx) wait(t *testing.T) []any {
	t.Helper()
	select {
	case args := <-h.held:
		return args
	case <-time.After(10 * time.Second):
		t.Fatal("the transaction was never sent")
		return nil
	}
}

func (h *holdTx) let() { close(h.go_) }

// cmdIs reports whether args is the command name (any case) with the
// given arguments after it, as text.
func cmdIs(args []any, name string, want ...string) bool {
	if len(args) < 1+len(want) || !strings.EqualFold(fmt.Sprint(args[0]), name) {
		return false
	}
	for i, w := range want {
		if w != "" && fmt.Sprint(args[1+i]) != w {
			return false
		}
	}
	return true
}

// hooked returns a noscript user's client of s that holds a transaction as
// h says, and a script-free Client of it with opts.
func hooked(t *testing.T, s *redistest.Server, h *holdTx, opts ...dlock.Option) *dlock.Client {
	t.Helper()
	rdb := noScriptUser(t, s, nil)
	rdb.AddHook(h)
	return newClient(t, rdb, append(opts, dlock.WithoutScripts(), dlock.WithAutoExtend(false))...)
}

// The undo of a lease (it writes the lease's marker) that lands between
// the acquire's reads and its EXEC aborts the EXEC: the lock is not taken
// for nobody.
func TestWithoutScriptsUndoBeforeExecTakesNothing(t *testing.T) {
	s, direct := setup(t)
	ctx := t.Context()
	h := newHoldTx(func(args []any) bool { return cmdIs(args, "set", "dlock:{undo}") })
	c := hooked(t, s, h)
	errc := make(chan error, 1)
	go func() {
		_, err := c.TryAcquire(ctx, "undo")
		errc <- err
	}()
	args := h.wait(t)
	token := fmt.Sprint(args[2])
	direct.Set(ctx, "dlock:{undo}:r:"+token, "0", time.Minute) // the lease's undo
	h.let()
	if err := <-errc; !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("TryAcquire whose lease was undone before its EXEC = %v, want ErrNotAcquired", err)
	}
	if n := liveKeys(ctx, direct, "dlock:{undo}"); n != 0 {
		t.Errorf("the lock key exists: %q, a lease held by nobody", direct.Get(ctx, "dlock:{undo}").Val())
	}
}

// A release whose lease ran out, and whose lock another lease took,
// between its reads and its EXEC deletes nothing: it reports the loss.
func TestWithoutScriptsLateReleaseKeepsTheNextHolder(t *testing.T) {
	s, direct := setup(t)
	ctx := t.Context()
	h := newHoldTx(func(args []any) bool { return cmdIs(args, "del", "dlock:{late}") })
	c := hooked(t, s, h)
	l, err := c.TryAcquire(ctx, "late")
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- l.Release(ctx) }()
	h.wait(t)
	direct.Set(ctx, "dlock:{late}", "next-lease", 10*time.Second) // expired, taken by another
	h.let()
	if err := <-errc; !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Release after the lock passed to another before its EXEC = %v, want ErrNotHeld", err)
	}
	if v := direct.Get(ctx, "dlock:{late}").Val(); v != "next-lease" {
		t.Errorf("the lock holds %q, want the next lease's (the late release deleted it)", v)
	}
	if m := direct.Get(ctx, "dlock:{late}:r:"+l.Token()).Val(); m != "0" {
		t.Errorf("the lease's marker = %q, want \"0\"", m)
	}
}

// An older extension that reads before a newer one writes, and would act
// after it, must not cut short what the newer one set; nor may its Lock
// claim the lease for its own terms: the newer extension, which it did not
// send (a Lock's own are one at a time), came from a Lock that resumed it.
func TestWithoutScriptsOlderExtendCannotCutNewer(t *testing.T) {
	s, direct := setup(t)
	ctx := t.Context()
	h := newHoldTx(func(args []any) bool { return cmdIs(args, "pexpire", "dlock:{ext}") })
	c := hooked(t, s, h)
	l, err := c.TryAcquire(ctx, "ext")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	errc := make(chan error, 1)
	go func() { errc <- l.Extend(ctx, 500*time.Millisecond) }()
	h.wait(t)
	// A newer extension of the lease (a higher sequence number) lands first.
	direct.Set(ctx, "dlock:{ext}:r:"+l.Token(), "e1000", 30*time.Second)
	direct.PExpire(ctx, "dlock:{ext}", 30*time.Second)
	h.let()
	if err := <-errc; !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("the older Extend = %v, want ErrNotHeld (superseded by another Lock's extension)", err)
	}
	if left := direct.PTTL(ctx, "dlock:{ext}").Val(); left < 20*time.Second {
		t.Errorf("the lock's PTTL is %v after the older Extend(500ms) landed, want the newer 30s kept", left)
	}
}

// A fence issued by someone else between a fence's reads and its EXEC
// makes it read again and issue one above.
func TestWithoutScriptsFenceRaceStaysMonotonic(t *testing.T) {
	s, direct := setup(t)
	ctx := t.Context()
	h := newHoldTx(func(args []any) bool { return cmdIs(args, "set", "dlock:{fr}:fence") })
	c := hooked(t, s, h)
	l, err := c.TryAcquire(ctx, "fr")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	got := make(chan int64, 1)
	go func() {
		f, _ := l.Fence(ctx)
		got <- f
	}()
	h.wait(t)
	const other = int64(1) << 60
	direct.Set(ctx, "dlock:{fr}:fence", other, time.Minute)
	h.let()
	if f := <-got; f != other+1 {
		t.Errorf("fence after another was issued before the EXEC = %d, want %d", f, other+1)
	}
}

// proxiedNoScript starts a TCP server behind a proxy and returns the
// proxy, a noscript user's client through it, and a client straight to the
// server.
func proxiedNoScript(t *testing.T, retries int, readTimeout time.Duration) (*redistest.Proxy, *redis.Client, *redis.Client) {
	t.Helper()
	s := redistest.Start(t, redistest.TCP())
	p := redistest.NewProxy(t, s.Addr())
	rdb := noScriptUser(t, s, &redis.Options{Addr: p.Addr(), MaxRetries: retries, ReadTimeout: readTimeout})
	return p, rdb, s.Client(t)
}

// A request delayed in the network past its caller's timeout lands after
// the caller's undo, with or without go-redis's retries: it takes nothing.
func TestWithoutScriptsDelayedAcquireTakesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("a long fault/timing scenario; run without -short")
	}
	for _, retries := range []int{-1, 3} {
		p, rdb, direct := proxiedNoScript(t, retries, 300*time.Millisecond)
		c := newClient(t, rdb, dlock.WithoutScripts(), dlock.LeaseTTL(5*time.Second))
		for _, delayAt := range []time.Duration{0, 3 * time.Millisecond} {
			name := fmt.Sprint("delayed-", retries, "-", delayAt)
			start := time.Now()
			done := make(chan struct{})
			if delayAt == 0 {
				p.Delay(time.Second, 0)
			}
			go func() {
				defer close(done)
				if delayAt > 0 { // later in the transaction: its reads pass
					time.Sleep(delayAt)
					p.Delay(time.Second, 0)
				}
				time.Sleep(100 * time.Millisecond)
				p.Delay(0, 0) // the undo goes straight through
			}()
			l, err := c.TryAcquire(t.Context(), name)
			<-done
			if l != nil {
				if err := l.Release(t.Context()); err != nil {
					t.Errorf("%s: Release = %v", name, err)
				}
			} else if !errors.Is(err, dlock.ErrNotAcquired) && err == nil {
				t.Errorf("%s: TryAcquire = nil Lock, nil error", name)
			}
			time.Sleep(time.Until(start.Add(1500 * time.Millisecond))) // what was delayed has landed
			if n := liveKeys(t.Context(), direct, "dlock:{"+name+"}"); n != 0 {
				t.Errorf("%s: the lock key exists after the delayed request landed: a lease held by nobody", name)
			}
		}
	}
}

// An acquire or release whose reply is lost (the transaction ran; go-redis
// does not send a transaction's commands again on another connection)
// leaves nothing held: the acquire's undo ends the lease, and a release
// tried again reports the release.
func TestWithoutScriptsLostRepliesLeaveNothing(t *testing.T) {
	p, rdb, direct := proxiedNoScript(t, 3, 5*time.Second) // the cut, not a timeout, ends the wait
	key := "dlock:{lost}"
	// lostReply runs op with the replies stalled from its transaction on
	// (its reads answered), and cuts the connection once cond shows that
	// the transaction ran.
	lostReply := func(cmd string, op func() error, cond func() bool) error {
		h := newHoldTx(func(args []any) bool { return cmdIs(args, cmd, key) })
		h.fn = p.StallReplies
		rdb.AddHook(h)
		errc := make(chan error, 1)
		go func() { errc <- op() }()
		if !waitFor(5*time.Second, cond) {
			t.Errorf("the %s transaction never ran", cmd)
		}
		p.Cut()
		select {
		case err := <-errc:
			return err
		case <-time.After(10 * time.Second):
			t.Fatal("the call did not return 10s after the cut")
			return nil
		}
	}
	c := newClient(t, rdb, dlock.WithoutScripts(), dlock.WithAutoExtend(false))
	var l *dlock.Lock
	err := lostReply("set", func() (err error) {
		l, err = c.TryAcquire(t.Context(), "lost")
		return err
	}, func() bool { return liveKeys(t.Context(), direct, key) == 1 })
	if err == nil {
		t.Fatal("TryAcquire whose EXEC's reply was lost succeeded: was the transaction sent again?")
	}
	if !waitFor(5*time.Second, func() bool { return liveKeys(t.Context(), direct, key) == 0 }) {
		t.Errorf("the lock key is left after the acquire's reply was lost (TryAcquire: %v)", err)
	}
	c = newClient(t, rdb, dlock.WithoutScripts(), dlock.WithAutoExtend(false))
	if l, err = c.TryAcquire(t.Context(), "lost"); err != nil {
		t.Fatal(err)
	}
	err = lostReply("del", func() error { return l.Release(t.Context()) },
		func() bool { return liveKeys(t.Context(), direct, key) == 0 })
	if err == nil {
		t.Error("Release whose EXEC's reply was lost succeeded: was the transaction sent again?")
	}
	if err := l.Release(t.Context()); err != nil {
		t.Errorf("Release tried again after its reply was lost = %v, want nil (it was held until then)", err)
	}
}
