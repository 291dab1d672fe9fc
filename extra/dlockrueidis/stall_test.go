package dlockrueidis

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/redistest"
	"github.com/redis/rueidis"
)

func newDlock(t *testing.T, addr string, opts ...dlock.Option) *dlock.Client {
	t.Helper()
	c, err := New(client(t, addr), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c.Close(ctx)
	})
	return c
}

// heldBehindProxy starts a server and a proxy to it, and takes names on
// the server with a Client of its own; bg bounds the test.
func heldBehindProxy(t *testing.T, names ...string) (s *redistest.Server, p *redistest.Proxy, bg context.Context) {
	t.Helper()
	s = redistest.Start(t, redistest.TCP())
	p = redistest.NewProxy(t, s.Addr())
	holder := newDlock(t, s.Addr())
	bg = ctxT(t, 60*time.Second)
	for _, name := range names {
		if _, err := holder.TryAcquire(bg, name); err != nil {
			t.Fatal(err)
		}
	}
	return s, p, bg
}

// warmUp takes and releases locks until rueidis has dialled each of its
// connections: it dials one on the first command sent there, picked at
// random, and a command that finds its connection being dialled waits for
// that dial with no regard to its context (up to the dialling command's
// context or the dialer's timeout). The stall tests stall connections that
// are up.
func warmUp(t *testing.T, c *dlock.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := range 64 {
		l, err := c.TryAcquire(ctx, fmt.Sprint("warm", i))
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

func stacks() string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	// keep the goroutines running dlock code
	var out []byte
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		if bytes.Contains(g, []byte("dlock")) {
			out = append(append(out, g...), "\n\n"...)
		}
	}
	return string(out)
}

// A stalled pub/sub connection (a server that stops answering, a
// blackholed TCP connection) while the hub unsubscribes a channel whose
// last waiter left: an Acquire of the Client still ends with its context
// (the hub sends (un)subscriptions from its own goroutine, never under the
// lock its waiters share).
func TestStalledPubSubDoesNotHoldAcquire(t *testing.T) {
	// Serial: bounds how soon an Acquire returns.
	s, p, bg := heldBehindProxy(t, "x", "y", "z")
	c := newDlock(t, p.Addr())
	warmUp(t, c)
	xctx, xcancel := context.WithTimeout(bg, 30*time.Second)
	defer xcancel()
	xdone := make(chan struct{})
	go func() { defer close(xdone); c.Acquire(xctx, "x") }()
	if !listening(t, s, "dlock:{x}:ch") { // x is subscribed: the hub's connection stays open
		t.Fatal("the waiter for x never subscribed")
	}
	yctx, ycancel := context.WithTimeout(bg, 500*time.Millisecond)
	_, err := c.Acquire(yctx, "y")
	ycancel()
	if err == nil {
		t.Fatal("y acquired although held")
	}
	// y's waiter left: its channel is unsubscribed after linger (500ms).
	p.Stall()
	time.Sleep(800 * time.Millisecond)
	start := time.Now()
	zctx, zcancel := context.WithTimeout(bg, 300*time.Millisecond)
	done := make(chan error, 1)
	go func() { _, err := c.Acquire(zctx, "z"); done <- err }()
	var st string
	select {
	case err = <-done:
	case <-time.After(3 * time.Second):
		st = stacks()
		err = <-done
	}
	elapsed := time.Since(start)
	zcancel()
	p.Cut()
	xcancel()
	<-xdone
	if elapsed > 800*time.Millisecond {
		t.Fatalf("Acquire with a 300ms context returned after %v (err %v): blocked on the hub while it waited for the stalled pub/sub connection\n%s", elapsed, err, st)
	}
	t.Logf("Acquire returned after %v: %v", elapsed, err)
}

// A nil client is refused with ErrInvalid, never a panic.
func TestNilClientRefusedWithErrInvalid(t *testing.T) {
	t.Parallel()
	for name, f := range map[string]func() error{
		"New(nil)": func() error { _, err := New(nil); return err },
		"NewFrom(Conn(nil))": func() error {
			_, err := dlock.NewFrom(Conn(nil))
			return err
		},
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("%s panicked: %v", name, r)
				}
			}()
			if err := f(); !errors.Is(err, dlock.ErrInvalid) {
				t.Fatalf("%s = %v, want ErrInvalid", name, err)
			}
		})
	}
}

// As TestStalledPubSubDoesNotHoldAcquire, for Client.Close(ctx).
func TestStalledPubSubDoesNotHoldClose(t *testing.T) {
	// Serial: bounds how soon Close returns.
	s, p, bg := heldBehindProxy(t, "x", "y")
	c, err := New(client(t, p.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	warmUp(t, c)
	xctx, xcancel := context.WithTimeout(bg, 30*time.Second)
	defer xcancel()
	xdone := make(chan struct{})
	go func() { defer close(xdone); c.Acquire(xctx, "x") }()
	if !listening(t, s, "dlock:{x}:ch") {
		t.Fatal("the waiter for x never subscribed")
	}
	yctx, ycancel := context.WithTimeout(bg, 500*time.Millisecond)
	c.Acquire(yctx, "y")
	ycancel()
	p.Stall()
	time.Sleep(800 * time.Millisecond)
	start := time.Now()
	cctx, ccancel := context.WithTimeout(bg, 300*time.Millisecond)
	c.Close(cctx)
	elapsed := time.Since(start)
	ccancel()
	p.Cut()
	xcancel()
	<-xdone
	if elapsed > 800*time.Millisecond {
		t.Fatalf("Close with a 300ms context returned after %v", elapsed)
	}
}

// With the whole connection stalled (commands and pub/sub) while the hub
// drops a channel whose waiter left, many Acquires with short contexts all
// end soon after their contexts do: rueidis makes a command wait for the
// dial of its connection that another command started, and dlock runs
// driver calls apart once one has failed.
func TestStalledDropDoesNotHoldAcquire(t *testing.T) {
	// Serial: bounds how soon Acquires return, on a timed schedule.
	_, p, bg := heldBehindProxy(t, "x", "z")
	c := newDlock(t, p.Addr())
	warmUp(t, c)
	xctx, xcancel := context.WithTimeout(bg, 400*time.Millisecond)
	defer xcancel()
	go c.Acquire(xctx, "x")
	time.Sleep(300 * time.Millisecond)
	p.Stall()
	type result struct {
		elapsed time.Duration
		err     error
	}
	const n = 8
	results := make(chan result, n)
	for i := range n {
		go func() {
			time.Sleep(time.Duration(350+50*i) * time.Millisecond)
			ctx, cancel := context.WithTimeout(bg, 200*time.Millisecond)
			defer cancel()
			start := time.Now()
			_, err := c.Acquire(ctx, "z")
			results <- result{time.Since(start), err}
		}()
	}
	st := make(chan string, 1)
	timer := time.AfterFunc(1500*time.Millisecond, func() { st <- stacks() })
	var worst time.Duration
	for range n {
		r := <-results
		t.Logf("Acquire returned after %v: %v", r.elapsed, r.err)
		worst = max(worst, r.elapsed)
	}
	if timer.Stop() {
		st <- ""
	}
	p.Cut()
	if worst > 700*time.Millisecond {
		t.Fatalf("an Acquire with a 200ms context returned after %v\n%s", worst, <-st)
	}
}

// With the connection stalled, every call of every kind ends soon after
// its context does.
func TestStalledCallsEndWithContext(t *testing.T) {
	// Serial: bounds how soon each call returns.
	s := redistest.Start(t, redistest.TCP())
	p := redistest.NewProxy(t, s.Addr())
	c := newDlock(t, p.Addr(), dlock.WithAutoExtend(false))
	warmUp(t, c)
	bg, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	l, err := c.TryAcquire(bg, "held")
	if err != nil {
		t.Fatal(err)
	}
	l2, err := c.TryAcquire(bg, "held2")
	if err != nil {
		t.Fatal(err)
	}
	sem, err := c.Semaphore("sem", 2)
	if err != nil {
		t.Fatal(err)
	}
	rw, err := c.RWMutex("rw")
	if err != nil {
		t.Fatal(err)
	}
	el, err := c.Election("el")
	if err != nil {
		t.Fatal(err)
	}
	calls := []struct {
		name string
		f    func(ctx context.Context) error
	}{
		{"Extend", func(ctx context.Context) error { return l.Extend(ctx, 10*time.Second) }},
		{"Fence", func(ctx context.Context) error { _, err := l.Fence(ctx); return err }},
		{"TTL", func(ctx context.Context) error { _, err := l.TTL(ctx); return err }},
		{"Release", func(ctx context.Context) error { return l2.Release(ctx) }},
		{"TryAcquire", func(ctx context.Context) error { _, err := c.TryAcquire(ctx, "free"); return err }},
		{"Acquire", func(ctx context.Context) error { _, err := c.Acquire(ctx, "held"); return err }},
		{"Inspect", func(ctx context.Context) error { _, err := c.Inspect(ctx, "held"); return err }},
		{"List", func(ctx context.Context) error { _, err := c.List(ctx, "*"); return err }},
		{"ForceRelease", func(ctx context.Context) error { _, err := c.ForceRelease(ctx, "other"); return err }},
		{"Semaphore", func(ctx context.Context) error { _, err := sem.Acquire(ctx); return err }},
		{"RWMutex.Reader", func(ctx context.Context) error { _, err := rw.Reader().Acquire(ctx); return err }},
		{"RWMutex.Writer", func(ctx context.Context) error { _, err := rw.Writer().Acquire(ctx); return err }},
		{"Campaign", func(ctx context.Context) error { _, err := el.Campaign(ctx, "v"); return err }},
		{"Leader", func(ctx context.Context) error { _, err := el.Leader(ctx); return err }},
		{"AcquireAll", func(ctx context.Context) error { _, err := c.AcquireAll(ctx, []string{"m1", "m2"}); return err }},
	}
	p.Stall()
	defer p.Cut()
	for _, call := range calls {
		ctx, cancel := context.WithTimeout(bg, 200*time.Millisecond)
		start := time.Now()
		err := call.f(ctx)
		elapsed := time.Since(start)
		cancel()
		if err == nil {
			t.Errorf("%s succeeded through a stalled connection", call.name)
		}
		if elapsed > 700*time.Millisecond {
			t.Errorf("%s with a 200ms context returned after %v: %v", call.name, elapsed, err)
		}
	}
}

// namesOn returns n lock names whose keys live on node (dlock's keys of a
// name share the hash tag "{name}").
func namesOn(t *testing.T, node *redistest.Server, prefix string, n int) []string {
	t.Helper()
	var out []string
	for i := 0; len(out) < n && i < 10000; i++ {
		name := fmt.Sprint(prefix, i)
		if _, err := node.Do(context.Background(), "GET", "{"+name+"}"); err == nil || !strings.HasPrefix(err.Error(), "MOVED") {
			out = append(out, name)
		}
	}
	if len(out) < n {
		t.Fatalf("no %d names on %s", n, node.Addr())
	}
	return out
}

// On a Cluster with one master stalled: after a call there failed, and
// another with a longer context dials it again, a call that a healthy
// master answers does not end the trouble: a call on a name of the
// stalled master still ends with its context.
func TestClusterStalledMasterTroubleOutlastsOtherReplies(t *testing.T) {
	// Serial: SIGSTOPs a node and bounds how soon calls return.
	nodes := redistest.StartCluster(t, 3, 0)
	addrs := []string{nodes[0].Addr(), nodes[1].Addr(), nodes[2].Addr()}
	stalled, healthy := namesOn(t, nodes[0], "s", 3), namesOn(t, nodes[1], "h", 1)
	bg := ctxT(t, 60*time.Second)
	for _, n := range nodes { // the others serve on when the stalled one is taken for failed
		if _, err := n.Do(bg, "CONFIG", "SET", "cluster-require-full-coverage", "no"); err != nil {
			t.Fatal(err)
		}
	}
	c, err := New(client(t, addrs...), dlock.WithAutoExtend(false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(bg) })
	warmUp(t, c)
	for range 10 {
		for _, name := range []string{stalled[0], healthy[0]} {
			if _, err := c.Inspect(bg, name); err != nil {
				t.Fatal(err)
			}
		}
	}
	nodes[0].Pause()
	defer nodes[0].Resume()
	within := func(what string, d time.Duration, f func(ctx context.Context) error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(bg, d)
		defer cancel()
		start := time.Now()
		err := f(ctx)
		if elapsed := time.Since(start); elapsed > d+500*time.Millisecond {
			t.Errorf("%s with a %v context returned after %v: %v", what, d, elapsed, err)
		}
	}
	within("TryAcquire on the stalled master", 300*time.Millisecond, func(ctx context.Context) error {
		_, err := c.TryAcquire(ctx, stalled[0])
		return err
	})
	dialled := make(chan struct{})
	go func() {
		defer close(dialled)
		ctx, cancel := context.WithTimeout(bg, 4*time.Second)
		defer cancel()
		c.Inspect(ctx, stalled[1])
	}()
	time.Sleep(150 * time.Millisecond)
	l, err := c.TryAcquire(bg, healthy[0])
	if err != nil {
		t.Fatalf("TryAcquire on a healthy master: %v", err)
	}
	defer l.Release(bg)
	within("a second TryAcquire on the stalled master", 300*time.Millisecond, func(ctx context.Context) error {
		_, err := c.TryAcquire(ctx, stalled[2])
		return err
	})
	nodes[0].Resume()
	<-dialled
}

// Two dlock Clients on one rueidis client share its trouble: after the
// first's commands failed on a stalled server and others of it dial the
// connection again with long contexts, the second's calls still end with
// their contexts.
func TestSharedClientSharesTrouble(t *testing.T) {
	// Serial: bounds how soon TryAcquire returns.
	s := redistest.Start(t, redistest.TCP())
	p := redistest.NewProxy(t, s.Addr())
	rc := client(t, p.Addr())
	a, b := newOn(t, rc), newOn(t, rc)
	warmUp(t, a)
	warmUp(t, b)
	bg := ctxT(t, 30*time.Second)
	p.Stall()
	defer p.Cut()
	for i := range 10 { // each of rueidis's connections, picked at random, breaks
		ctx, cancel := context.WithTimeout(bg, 100*time.Millisecond)
		a.TryAcquire(ctx, fmt.Sprint("a", i))
		cancel()
	}
	var dials sync.WaitGroup
	for i := range 8 {
		dials.Go(func() {
			ctx, cancel := context.WithTimeout(bg, 4*time.Second)
			defer cancel()
			a.TryAcquire(ctx, fmt.Sprint("long", i))
		})
	}
	time.Sleep(150 * time.Millisecond)
	for i := range 3 {
		ctx, cancel := context.WithTimeout(bg, 300*time.Millisecond)
		lag := redistest.TimerLag()
		start := time.Now()
		_, err := b.TryAcquire(ctx, fmt.Sprint("b", i))
		elapsed := time.Since(start)
		cancel()
		// Its context, then up to 100ms for its undo's first try, each end
		// a goroutine's wake-up that a loaded machine runs late; a call held
		// by a dial of the long calls returns seconds later.
		if late := lag(); elapsed > 800*time.Millisecond+late {
			t.Errorf("the second Client's TryAcquire with a 300ms context returned after %v (timers ran up to %v late): %v", elapsed, late, err)
		}
	}
	p.Cut()
	dials.Wait()
}

// newOn returns a dlock Client on rc, closed in t's cleanup.
func newOn(t *testing.T, rc rueidis.Client) *dlock.Client {
	t.Helper()
	c, err := New(rc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}
