package dlock_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
)

type ctxKey struct{}

// ctxRecorder is a go-redis hook that records the ctxKey value of every
// command's context, as a tracing hook would read its parent span.
type ctxRecorder struct {
	mu   sync.Mutex
	seen []any
}

func (r *ctxRecorder) DialHook(next redis.DialHook) redis.DialHook { return next }
func (r *ctxRecorder) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.record(ctx)
		return next(ctx, cmd)
	}
}
func (r *ctxRecorder) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		r.record(ctx)
		return next(ctx, cmds)
	}
}
func (r *ctxRecorder) record(ctx context.Context) {
	r.mu.Lock()
	r.seen = append(r.seen, ctx.Value(ctxKey{}))
	r.mu.Unlock()
}

// An Observer sees each operation start and end; the context its Start
// returns is the one the operation's Redis calls are made with (so a span
// started there is their parent), with and without pipelining.
func TestObserverContextReachesRedis(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	rec := &ctxRecorder{}
	rdb.AddHook(rec)
	for _, pipelining := range []bool{true, false} {
		var mu sync.Mutex
		var ops []string
		c := newClient(t, rdb, pipelined(pipelining), dlock.WithAutoExtend(false), dlock.WithObserver(dlock.Observer{
			Start: func(ctx context.Context, e *dlock.Event) context.Context {
				return context.WithValue(ctx, ctxKey{}, string(e.Op)+":"+e.Name)
			},
			End: func(ctx context.Context, e *dlock.Event) {
				mu.Lock()
				defer mu.Unlock()
				ops = append(ops, string(e.Op)+" "+e.Mode+" "+errString(e.Err)+" "+ctx.Value(ctxKey{}).(string))
			},
		}))
		rec.mu.Lock()
		rec.seen = nil
		rec.mu.Unlock()
		ctx := t.Context()
		l, err := c.Acquire(ctx, "traced")
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Extend(ctx, time.Second); err != nil {
			t.Fatal(err)
		}
		if _, err := c.TryAcquire(ctx, "traced"); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		want := "[acquire fair <nil> acquire:traced extend fair <nil> extend:traced acquire fair not-acquired acquire:traced release fair <nil> release:traced]"
		if got := "[" + strings.Join(ops, " ") + "]"; got != want {
			t.Errorf("pipelining=%v: observer saw %s, want %s", pipelining, got, want)
		}
		rec.mu.Lock()
		for _, v := range rec.seen {
			if v == nil { // a script load, or a command without the operation's context
				t.Errorf("pipelining=%v: a Redis command was sent without the observer's context (seen %v)", pipelining, rec.seen)
				break
			}
		}
		if len(rec.seen) < 4 {
			t.Errorf("pipelining=%v: %d Redis commands seen, want at least 4", pipelining, len(rec.seen))
		}
		rec.mu.Unlock()
	}
}

func errString(err error) string {
	switch {
	case err == nil:
		return "<nil>"
	case errors.Is(err, dlock.ErrNotAcquired):
		return "not-acquired"
	}
	return err.Error()
}

// Waiting counts Acquire calls that wait for a taken lock, and goes back to
// zero when they stop; the Observer's Waiting sees +1 and -1.
func TestObserverWaitingAndLost(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	var mu sync.Mutex
	var deltas []int
	lost := make(chan *dlock.Event, 1)
	c := newClient(t, rdb, dlock.LeaseTTL(1500*time.Millisecond), dlock.WithObserver(dlock.Observer{
		Waiting: func(_ context.Context, name string, d int) {
			mu.Lock()
			deltas = append(deltas, d)
			mu.Unlock()
		},
		Lost: func(_ context.Context, e *dlock.Event) { lost <- e },
	}))
	ctx := t.Context()
	l, err := c.Acquire(ctx, "w")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		l2, err := c.Acquire(ctx, "w")
		if err == nil {
			l2.Release(ctx)
		}
		done <- err
	}()
	if !waitFor(2*time.Second, func() bool { return c.Stats().Waiting == 1 }) {
		t.Fatalf("Stats().Waiting = %d with one Acquire waiting, want 1", c.Stats().Waiting)
	}
	rdb.Del(ctx, l.Key()) // the lease is lost; the waiter takes the lock
	select {
	case e := <-lost:
		if e.Op != dlock.OpLost || e.Name != "w" || !errors.Is(e.Err, dlock.ErrNotHeld) {
			t.Errorf("Lost event = %+v", e)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Lost was not called within 5s of the key's deletion")
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if s := c.Stats(); s.Waiting != 0 || s.Lost != 1 || s.Acquired != 2 {
		t.Errorf("Stats = %+v, want 0 waiting, 1 lost, 2 acquired", s)
	}
	if len(deltas) != 2 || deltas[0] != 1 || deltas[1] != -1 {
		t.Errorf("Waiting deltas = %v, want [1 -1]", deltas)
	}
}

// SlogObserver logs acquisitions and releases at debug level, a loss as an
// error, with the operation's context; without it nothing is logged.
func TestLogger(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	var buf bytes.Buffer
	var mu sync.Mutex
	h := &ctxHandler{Handler: slog.NewTextHandler(&lockedWriter{w: &buf, mu: &mu}, &slog.HandlerOptions{Level: slog.LevelDebug})}
	c := newClient(t, rdb, dlock.LeaseTTL(1500*time.Millisecond), dlock.WithObserver(dlock.SlogObserver(slog.New(h))))
	ctx := context.WithValue(t.Context(), ctxKey{}, "req-7")
	l, err := c.Acquire(ctx, "logged")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l, err = c.Acquire(ctx, "logged")
	if err != nil {
		t.Fatal(err)
	}
	rdb.Del(ctx, l.Key())
	if !closedWithin(l.Done(), 5*time.Second) {
		t.Fatal("loss not signalled")
	}
	read := func() string {
		mu.Lock()
		defer mu.Unlock()
		return buf.String()
	}
	waitFor(2*time.Second, func() bool { return strings.Contains(read(), "lease lost") }) // logged just after Done closes
	out := read()
	for _, want := range []string{
		`level=DEBUG msg="dlock: acquire" lock=logged mode=fair`,
		`level=DEBUG msg="dlock: release" lock=logged mode=fair`,
		`level=ERROR msg="dlock: lease lost" lock=logged mode=fair`,
		`req=req-7`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
}

// A repeated Release does nothing, and nothing is told of it: no Observer
// event and no log line; the first Release, a Do's release and a
// MultiLock's each give one.
func TestRepeatedReleaseIsSilent(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	var buf bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(&lockedWriter{w: &buf, mu: &mu}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	var starts, ends, released atomic.Int32
	c := newClient(t, rdb, dlock.WithObserver(dlock.SlogObserver(logger)), dlock.WithObserver(dlock.Observer{
		Start: func(ctx context.Context, e *dlock.Event) context.Context {
			if e.Op == dlock.OpRelease {
				starts.Add(1)
			}
			return ctx
		},
		End: func(_ context.Context, e *dlock.Event) {
			if e.Op == dlock.OpRelease {
				ends.Add(1)
			}
		},
	}), dlock.WithObserver(dlock.Observer{End: func(_ context.Context, e *dlock.Event) {
		if e.Op == dlock.OpRelease && e.Err == nil && e.Held > 0 {
			released.Add(1)
		}
	}}))
	ctx := t.Context()
	releases := func() int {
		mu.Lock()
		defer mu.Unlock()
		return strings.Count(buf.String(), `msg="dlock: release"`)
	}
	check := func(when string, want int) {
		t.Helper()
		if s, e, r, logged := starts.Load(), ends.Load(), released.Load(), releases(); s != int32(want) || e != int32(want) || r != int32(want) || logged != want {
			t.Errorf("%s: %d Start, %d End, %d releases told, %d release log lines; want %d of each:\n%s", when, s, e, r, logged, want, buf.String())
		}
	}

	l, err := c.Acquire(ctx, "twice")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	check("after Release", 1)
	for range 3 {
		if err := l.Release(ctx); err != nil {
			t.Fatalf("repeated Release = %v", err)
		}
	}
	check("after repeated Releases", 1)

	var held *dlock.Lock
	if err := c.Do(ctx, "twice", func(_ context.Context, l *dlock.Lock) error { held = l; return nil }); err != nil {
		t.Fatal(err)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatalf("Release after Do = %v", err)
	}
	check("after Do and a Release of its lock", 2)

	m, err := c.AcquireAll(ctx, []string{"a", "b"})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := m.Release(ctx); err != nil {
			t.Fatalf("MultiLock.Release = %v", err)
		}
	}
	check("after a MultiLock's Release twice", 4)
}

// ctxHandler adds the request id of the context, as a handler adds a trace id.
type ctxHandler struct{ slog.Handler }

func (h *ctxHandler) Handle(ctx context.Context, r slog.Record) error {
	if v, ok := ctx.Value(ctxKey{}).(string); ok {
		r.AddAttrs(slog.String("req", v))
	}
	return h.Handler.Handle(ctx, r)
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}

// A panicking observer cannot leave a lease held that no caller has a
// handle to: the caller gets its Lock, and each panic is counted in
// Stats.ObserverPanics.
func TestObserverPanicIsCountedAndBreaksNothing(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	boom := func() { panic("observer failed") }
	c := newClient(t, rdb, dlock.LeaseTTL(1500*time.Millisecond), dlock.WithObserver(dlock.Observer{
		Start:   func(ctx context.Context, e *dlock.Event) context.Context { boom(); return ctx },
		End:     func(context.Context, *dlock.Event) { boom() },
		Lost:    func(context.Context, *dlock.Event) { boom() },
		Waiting: func(context.Context, string, int) { boom() },
	}))
	ctx := t.Context()
	l, err := c.TryAcquire(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Extend(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n := liveKeys(ctx, rdb, "dlock:{p}"); n != 0 {
		t.Errorf("%d lock keys left after release", n)
	}
	// Start and End of the acquire, the extension and the release.
	if got := c.Stats().ObserverPanics; got != 6 {
		t.Errorf("Stats().ObserverPanics = %d, want 6", got)
	}
}
