package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/redistest"
)

// RWMutex.Downgrade: a write hold becomes a read in one step, keeping its
// token, fence and lease; the readers first in line join it, a writer
// never comes in between, and the downgraded hold extends and releases as
// a read.
func TestRWMutexDowngrade(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	const name = "rw-down"
	c := newClient(t, rdb)
	rw := newRW(t, c, name)
	w, err := rw.Writer().TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fence := fenceOf(t, w)
	wait := func(l *dlock.RWLocker) <-chan *dlock.Lock { return rwWaitFor(ctx, t, l) }
	queued := func(n int64) { t.Helper(); rwWaitQueued(ctx, t, rdb, name, n) }
	reader := wait(rw.Reader())
	queued(1)
	writer := wait(rw.Writer())
	queued(2)

	if err := rw.Downgrade(ctx, w); err != nil {
		t.Fatal(err)
	}
	var r *dlock.Lock
	select {
	case r = <-reader:
	case <-time.After(3 * time.Second):
		t.Fatal("the reader first in line was not let in by the downgrade")
	}
	if m := rwMembers(ctx, rdb, name); len(m) != 2 || m[0][0] != 'r' || m[1][0] != 'r' {
		t.Fatalf("holds after the downgrade: %v, want two reads", m)
	}
	if f := fenceOf(t, w); f != fence {
		t.Errorf("fence after the downgrade = %d, want the write's %d", f, fence)
	}
	if err := w.Extend(ctx, 5*time.Second); err != nil {
		t.Errorf("Extend of the downgraded hold: %v", err)
	}
	if err := rw.Downgrade(ctx, w); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("a second Downgrade = %v, want ErrInvalid", err)
	}
	if err := rw.Downgrade(ctx, r); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("Downgrade of a read = %v, want ErrInvalid", err)
	}
	select {
	case <-writer:
		t.Fatal("a writer got in while reads are held")
	case <-time.After(200 * time.Millisecond):
	}
	if err := w.Release(ctx); err != nil {
		t.Fatalf("Release of the downgraded hold: %v", err)
	}
	if err := r.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case w2 := <-writer:
		if w2 == nil {
			t.Fatal("the writer was not let in once the reads were released")
		}
		w2.Release(ctx)
	case <-time.After(3 * time.Second):
		t.Fatal("the writer was not let in once the reads were released")
	}
	downgradeBeforeAWriterFirstInLine(ctx, t, rdb, rw, name)
}

// rwWaitFor acquires l in a goroutine, for up to 5s, and sends the hold (nil
// if the wait ran out) on the channel it returns.
func rwWaitFor(ctx context.Context, t *testing.T, l *dlock.RWLocker) <-chan *dlock.Lock {
	ch := make(chan *dlock.Lock, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		h, err := l.Acquire(wctx)
		if err != nil && ctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Acquire: %v", err)
		}
		ch <- h
	}()
	return ch
}

// rwWaitQueued waits until the read-write lock name has n waiters in its queue.
func rwWaitQueued(ctx context.Context, t *testing.T, rdb *redis.Client, name string, n int64) {
	t.Helper()
	if !waitFor(3*time.Second, func() bool { return rwQueued(ctx, rdb, name) == n }) {
		t.Fatalf("%d waiters never queued", n)
	}
}

// downgradeBeforeAWriterFirstInLine: with a writer first in line, a
// downgrade lets in nobody behind it, neither the reader behind the writer
// nor the writer; the writer gets the lock once the downgraded hold goes.
func downgradeBeforeAWriterFirstInLine(ctx context.Context, t *testing.T, rdb *redis.Client, rw *dlock.RWMutex, name string) {
	t.Helper()
	wait := func(l *dlock.RWLocker) <-chan *dlock.Lock { return rwWaitFor(ctx, t, l) }
	queued := func(n int64) { t.Helper(); rwWaitQueued(ctx, t, rdb, name, n) }
	w, err := rw.Writer().TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	writer := wait(rw.Writer())
	queued(1)
	reader := wait(rw.Reader())
	queued(2)
	if err := rw.Downgrade(ctx, w); err != nil {
		t.Fatal(err)
	}
	select {
	case <-reader:
		t.Fatal("a reader passed the writer first in line")
	case <-writer:
		t.Fatal("a writer got in beside a read")
	case <-time.After(300 * time.Millisecond):
	}
	w.Release(ctx)
	if w2 := <-writer; w2 != nil {
		w2.Release(ctx)
	} else {
		t.Fatal("the writer first in line never got the lock")
	}
	if r := <-reader; r != nil {
		r.Release(ctx)
	}
	if err := rw.Downgrade(ctx, w); !errors.Is(err, dlock.ErrInvalid) && !errors.Is(err, dlock.ErrReleased) {
		t.Errorf("Downgrade after Release = %v", err)
	}
}

// TestRWMutexDowngradeLetsReadersInAndKeepsExtending: Downgrade of a write hold keeps its token and fence, lets a
// waiting reader in, not a waiting writer, and its watchdog then extends
// the read hold past several TTLs; a second Downgrade is ErrInvalid, and a
// Downgrade of a write that lapsed is ErrNotHeld.
func TestRWMutexDowngradeLetsReadersInAndKeepsExtending(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.LeaseTTL(1500*time.Millisecond))
	rw, _ := c.RWMutex("dg")
	w, err := rw.Writer().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f := fenceOf(t, w)
	tok := w.Token()
	wdone := make(chan error, 1)
	c2 := newClient(t, rdb, dlock.LeaseTTL(time.Second))
	rw2, _ := c2.RWMutex("dg")
	go func() {
		l, err := rw2.Writer().Acquire(ctx, dlock.MaxWait(4*time.Second))
		if l != nil {
			l.Release(ctx)
		}
		wdone <- err
	}()
	if !waitFor(2*time.Second, func() bool { return rdb.LLen(ctx, "dlock:{dg}:q").Val() == 1 }) {
		t.Fatal("the writer did not queue")
	}
	if err := rw.Downgrade(ctx, w); err != nil {
		t.Fatal(err)
	}
	if w.Token() != tok || fenceOf(t, w) != f {
		t.Errorf("token or fence changed by Downgrade")
	}
	if err := rw.Downgrade(ctx, w); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("a second Downgrade = %v, want ErrInvalid", err)
	}
	time.Sleep(2 * time.Second) // past the 1.5s TTL: the watchdog extends the read
	if err := w.Err(); err != nil {
		t.Fatalf("the downgraded hold was lost: %v", err)
	}
	select {
	case err := <-wdone:
		t.Fatalf("a writer got in beside the downgraded read: %v", err)
	default:
	}
	hs, err := rw.Holders(ctx)
	if err != nil || len(hs) != 1 || hs[0].Write || hs[0].Token != tok {
		t.Errorf("Holders = %+v, %v; want the one read", hs, err)
	}
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-wdone; err != nil {
		t.Errorf("the waiting writer after the read released: %v", err)
	}

	c3 := newClient(t, rdb, dlock.LeaseTTL(100*time.Millisecond), dlock.WithAutoExtend(false))
	rw3, _ := c3.RWMutex("dg2")
	w3, err := rw3.Writer().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !waitFor(3*time.Second, func() bool { return rdb.Exists(ctx, "dlock:{dg2}").Val() == 0 }) {
		t.Fatal("the 100ms write never lapsed")
	}
	if err := rw3.Downgrade(ctx, w3); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Downgrade of a lapsed write = %v, want ErrNotHeld", err)
	}
}

// TestRWMutexDowngradeReplyAfterMaxHoldFreesTheLock: a Downgrade whose reply arrives after the write hold reached its
// max hold (the cap's undo runs meanwhile, on a copy of the claim, which is
// Downgrading while the request is in flight) leaves nothing held for
// long: a writer gets the lock within a second of the cap.
func TestRWMutexDowngradeReplyAfterMaxHoldFreesTheLock(t *testing.T) {
	t.Parallel()
	p, rdb, direct := proxied(t, 0, 0)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.LeaseTTL(2*time.Second))
	other := newClient(t, direct, dlock.LeaseTTL(2*time.Second))
	for round := range 3 {
		name := fmt.Sprint("dgr-", round)
		rw, _ := c.RWMutex(name)
		w, err := rw.Writer().Acquire(ctx, dlock.MaxHold(200*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		w.Done() // arm the expiry timer
		time.Sleep(150 * time.Millisecond)
		p.Delay(0, 150*time.Millisecond) // the reply of the downgrade arrives after the cap
		err = rw.Downgrade(ctx, w)
		p.Delay(0, 0)
		t.Logf("round %d: Downgrade = %v, Err = %v", round, err, w.Err())
		orw, _ := other.RWMutex(name)
		l, err := orw.Writer().Acquire(ctx, dlock.MaxWait(time.Second))
		if err != nil {
			t.Fatalf("round %d: a writer after the downgraded hold's cap: %v", round, err)
		}
		l.Release(ctx)
		w.Release(ctx)
	}
}

// A Downgrade whose outcome is unknown (its reply lost, or its context
// ended while the request was held on the way) leaves the hold a read or
// a write: its extensions, its fence and its Release act on whichever the
// lock has, a second Downgrade settles it, and a Release ends it at once.
func TestRWMutexDowngradeUnknownOutcome(t *testing.T) {
	t.Parallel()
	p, rdb, direct := proxied(t, 0, 0)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.LeaseTTL(time.Second))
	ext := extensionLog(c)
	other := newClient(t, direct)
	for _, tc := range []struct {
		name  string
		fault func()
		late  time.Duration // how long after the cut a held request may still land
	}{
		{"reply lost", p.StallReplies, 0},
		{"request late", func() { p.Delay(400*time.Millisecond, 0) }, 600 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A run whose hold lapsed for load alone (the watchdog's
			// extensions answered too late) tells nothing: it runs
			// again, on a new lock, a few times at most.
			for try := 1; ; try++ {
				name := fmt.Sprint("dg-unknown-", strings.ReplaceAll(tc.name, " ", "-"), "-", try)
				lag := redistest.TimerLag()
				err := downgradeUnknownRun(ctx, t, p, c, other, direct, name, tc.fault, tc.late, ext)
				if worst := lag(); err == nil || !lostToLag(t, err, worst, time.Second) {
					if err != nil {
						t.Fatalf("the hold was lost after the unknown Downgrade: %v\n%s", err, ext.of(name))
					}
					return
				}
				if try == 5 {
					t.Fatalf("the hold lapsed for load in each of %d runs (the last: %v)", try, err)
				}
				t.Logf("run %d: the hold lapsed for load (%v): again", try, err)
			}
		})
	}
	downgradeUnknownThenReleased(ctx, t, p, c, direct)
}

// downgradeUnknownRun is one run of TestRWMutexDowngradeUnknownOutcome on
// the lock name: it returns the hold's loss if the hold was lost while it
// should live (the caller decides whether load explains it).
func downgradeUnknownRun(ctx context.Context, t *testing.T, p *redistest.Proxy, c, other *dlock.Client, direct *redis.Client,
	name string, fault func(), late time.Duration, ext *extensions) error {
	t.Helper()
	rw := newRW(t, c, name)
	orw := newRW(t, other, name)
	w, err := rw.Writer().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Release(ctx)
	fault()
	dctx, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
	err = rw.Downgrade(dctx, w)
	cancel()
	p.Cut()
	if err == nil {
		t.Fatal("Downgrade succeeded through the fault")
	}
	if _, err := w.Fence(ctx); err != nil {
		if w.Err() != nil {
			return w.Err()
		}
		t.Fatalf("Fence after the unknown Downgrade: %v", err)
	}
	time.Sleep(late)
	// Three extensions by the watchdog: the hold, read or write, lives.
	time.Sleep(1500 * time.Millisecond)
	// The other writer is refused while the hold is valid: its success is
	// a violation if it returned before the hold's validity as read before
	// it was sent. (Its request may land after that validity ran out, the
	// watchdog's extension late for load: then the hold is lost, for load.)
	valid := w.ValidUntil()
	if err := w.Err(); err != nil {
		return err
	}
	key := "dlock:{" + name + "}"
	// Redis keeps the hold, read or write, at least as long as its
	// validity: its member's deadline (ms, server clock) is not before it.
	if at := holdDeadline(ctx, direct, key, w.Token()); at < valid.UnixMilli() {
		t.Fatalf("the hold's deadline in Redis, %d, is before its validity, %d (%s): %v", at, valid.UnixMilli(), valid.Format("15:04:05.000"),
			direct.ZRangeWithScores(ctx, key, 0, -1).Val())
	}
	state := func() string {
		now, _ := direct.Time(ctx).Result()
		return fmt.Sprintf("server time %s: set %v, PTTL %v", now.Format("15:04:05.000"),
			direct.ZRangeWithScores(ctx, key, 0, -1).Val(), direct.PTTL(ctx, key).Val())
	}
	before, sent := state(), time.Now()
	l, err := orw.Writer().TryAcquire(ctx)
	back := time.Now()
	if err == nil {
		l.Release(ctx)
		if back.Before(valid) {
			t.Fatalf("a writer got in beside the hold: sent %s, back %s, the hold valid until %s (%v)\nbefore: %s\nafter: %s\n%s",
				sent.Format("15:04:05.000"), back.Format("15:04:05.000"), valid.Format("15:04:05.000"), w.Err(), before, state(), ext.of(name))
		}
		t.Logf("a writer got in after the hold's validity (until %s, the writer sent %s, back %s): %v\nbefore: %s\nafter: %s\n%s",
			valid.Format("15:04:05.000"), sent.Format("15:04:05.000"), back.Format("15:04:05.000"), w.Err(), before, state(), ext.of(name))
		if err := w.Err(); err != nil {
			return err
		}
		t.Fatalf("a writer got in and the hold still reports no loss: back %s, valid until %s", back.Format("15:04:05.000"), w.ValidUntil().Format("15:04:05.000"))
	}
	if err := rw.Downgrade(ctx, w); err != nil {
		t.Fatalf("the second Downgrade: %v", err)
	}
	hs, err := rw.Holders(ctx)
	if err != nil || len(hs) != 1 || hs[0].Write || hs[0].Token != w.Token() {
		t.Fatalf("Holders after the second Downgrade = %+v, %v; want one read", hs, err)
	}
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l, err = orw.Writer().TryAcquire(ctx)
	if err != nil {
		t.Fatalf("a writer after the Release: %v", err)
	}
	l.Release(ctx)
	return nil
}

// holdDeadline returns the deadline (ms, server clock) of the read-write
// lock key's hold of token, read or write; 0 if it has none.
func holdDeadline(ctx context.Context, rdb *redis.Client, key, token string) int64 {
	var at float64
	for _, m := range []string{"w:", "r:"} {
		if s, err := rdb.ZScore(ctx, key, m+token).Result(); err == nil {
			at = max(at, s)
		}
	}
	return int64(at)
}

// extensions records a Client's extensions, as its Observer is told of
// them, for a failure's message.
type extensions struct {
	mu  sync.Mutex
	all []string
}

func extensionLog(c *dlock.Client) *extensions {
	x := &extensions{}
	c.Observe(dlock.Observer{End: func(ctx context.Context, e *dlock.Event) {
		if e.Op == dlock.OpExtend {
			x.mu.Lock()
			defer x.mu.Unlock()
			x.all = append(x.all, fmt.Sprintf("%s %s: extension answered at %s, took %v: %v",
				e.Name, map[bool]string{true: "watchdog", false: "Extend"}[e.Auto], time.Now().Format("15:04:05.000"), e.Took, e.Err))
		}
	}})
	return x
}

// of returns the extensions of the lock name, one a line.
func (x *extensions) of(name string) string {
	x.mu.Lock()
	defer x.mu.Unlock()
	var b strings.Builder
	for _, s := range x.all {
		if strings.HasPrefix(s, name+" ") {
			b.WriteString(s + "\n")
		}
	}
	return b.String()
}

// downgradeUnknownThenReleased: a write hold released with its Downgrade's
// outcome still unknown goes, read or write, and the Downgrade request held
// on the way and landing after it does nothing.
func downgradeUnknownThenReleased(ctx context.Context, t *testing.T, p *redistest.Proxy, c *dlock.Client, direct *redis.Client) {
	t.Helper()
	rw := newRW(t, c, "dg-unknown-release")
	w, err := rw.Writer().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p.Delay(400*time.Millisecond, 0)
	dctx, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
	err = rw.Downgrade(dctx, w)
	cancel()
	p.Delay(0, 0)
	if err == nil {
		t.Fatal("Downgrade succeeded through the delay")
	}
	if err := w.Release(ctx); err != nil {
		t.Fatalf("Release after the unknown Downgrade: %v", err)
	}
	time.Sleep(600 * time.Millisecond)
	if n := direct.ZCard(ctx, "dlock:{dg-unknown-release}").Val(); n != 0 {
		t.Fatalf("%d holds left after the Release", n)
	}
}

// A downgraded hold keeps its key's expiry (the write was the set's only
// member: the downgrade makes the set anew), so a holder that dies after
// a Downgrade leaves nothing behind past its lease.
func TestRWMutexDowngradeKeepsExpiry(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	const name = "dg-expiry"
	c := newClient(t, rdb, dlock.LeaseTTL(1500*time.Millisecond))
	rw := newRW(t, c, name)
	w, err := rw.Writer().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := rw.Downgrade(ctx, w); err != nil {
		t.Fatal(err)
	}
	key := "dlock:{" + name + "}"
	if ttl := rdb.PTTL(ctx, key).Val(); ttl <= 0 {
		t.Fatalf("PTTL after the Downgrade = %v, want the lease's", ttl)
	}
	time.Sleep(2 * time.Second) // past the 1.5s TTL: the watchdog extends
	if ttl := rdb.PTTL(ctx, key).Val(); ttl <= 0 {
		t.Fatalf("PTTL after an extension = %v, want the lease's", ttl)
	}
	c.Close(ctx) // the holder dies: no release, no more extensions
	if !waitFor(5*time.Second, func() bool { return rdb.Exists(ctx, key).Val() == 0 }) {
		t.Fatalf("the key outlived its lease: PTTL %v, %v", rdb.PTTL(ctx, key).Val(), rdb.ZRangeWithScores(ctx, key, 0, -1).Val())
	}
}

// A Downgrade whose reply comes after the hold reached its max hold: the
// max hold's release, meanwhile, ends the read that the downgrade made,
// and Downgrade reports ErrMaxHold.
func TestRWMutexDowngradeAcrossMaxHoldReleasesTheRead(t *testing.T) {
	t.Parallel()
	p, rdb, direct := proxied(t, 0, 0)
	ctx := t.Context()
	const name = "dg-maxhold"
	c := newClient(t, rdb, dlock.LeaseTTL(5*time.Second))
	rw := newRW(t, c, name)
	w, err := rw.Writer().Acquire(ctx, dlock.MaxHold(600*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	w.Done() // arm the expiry timer
	time.Sleep(400 * time.Millisecond)
	p.Delay(0, 500*time.Millisecond) // the downgrade lands at once, its reply after the cap
	err = rw.Downgrade(ctx, w)
	p.Delay(0, 0)
	if !errors.Is(err, dlock.ErrMaxHold) {
		t.Errorf("Downgrade across the max hold = %v, want ErrMaxHold", err)
	}
	key := "dlock:{" + name + "}"
	if !waitFor(2*time.Second, func() bool { return direct.ZCard(ctx, key).Val() == 0 }) {
		t.Fatalf("the downgraded read outlived the max hold's release: %v", direct.ZRangeWithScores(ctx, key, 0, -1).Val())
	}
}

// Downgrades of unknown outcome, many: a holder behind a proxy that delays
// requests and replies at random, its Downgrade contexts about as long,
// its connections sometimes cut; then a second Downgrade, the watchdog, a
// fence, and the Release. Three goroutines of a second Client take reads
// and writes alongside. No write is ever beside another hold; a token
// whose Release returned nil never shows in the lock again; no hold is
// reported lost while Redis has it.
func TestRWMutexDowngradeUnknownOutcomeUnderFaults(t *testing.T) {
	t.Parallel()
	p, rdb, direct := proxied(t, 0, 0)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	const name = "dg-faults"
	a := newClient(t, rdb, dlock.LeaseTTL(2*time.Second))
	b := newClient(t, direct, dlock.LeaseTTL(2*time.Second))
	rwa, rwb := newRW(t, a, name), newRW(t, b, name)
	f := &dgFaults{t: t, ctx: ctx, direct: direct, key: semKey(name), released: map[string]time.Time{}}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 3 { // B's writers and readers
		wg.Go(func() { f.bHolds(rwb, i == 0, stop) })
	}
	wg.Go(func() { f.watchLeftovers(stop) })
	var n dgCounts
	for iter := 0; iter < 60 && f.fails.Load() == 0; iter++ {
		f.aDowngrade(p, rwa, &n)
	}
	close(stop)
	wg.Wait()
	p.Delay(0, 0)
	t.Logf("unknown %d, settled %d, lost %d", n.unknown, n.settled, n.lost)
	if n.unknown == 0 {
		t.Error("no Downgrade had an unknown outcome: the faults did not bite")
	}
}

// dgFaults is the shared state of TestRWMutexDowngradeUnknownOutcomeUnderFaults.
type dgFaults struct {
	t        *testing.T
	ctx      context.Context
	direct   *redis.Client
	key      string
	mu       sync.Mutex
	released map[string]time.Time // A's tokens released (Release returned nil)
	writers  atomic.Int32
	readers  atomic.Int32
	aWrite   atomic.Int32 // A holds what it believes may be a write
	fails    atomic.Int32
}

// dgCounts counts how A's Downgrades ended.
type dgCounts struct{ unknown, settled, lost int }

func (f *dgFaults) fail(format string, args ...any) {
	if f.fails.Add(1) <= 10 {
		f.t.Errorf(format, args...)
	}
}

// bHolds takes B's reads and writes (writes only if writer) until stop,
// checking each against the others and against what A believes it holds.
func (f *dgFaults) bHolds(rwb *dlock.RWMutex, writer bool, stop <-chan struct{}) {
	ctx := f.ctx
	for {
		select {
		case <-stop:
			return
		default:
		}
		actx, acancel := context.WithTimeout(ctx, 300*time.Millisecond)
		write := writer || rand.IntN(2) == 0
		l := rwb.Reader()
		if write {
			l = rwb.Writer()
		}
		h, err := l.Acquire(actx)
		acancel()
		if err != nil {
			continue
		}
		if write {
			if f.writers.Add(1) != 1 || f.readers.Load() != 0 {
				f.fail("B's writer beside another B hold")
			}
			if f.aWrite.Load() != 0 {
				f.fail("B's writer got in while A believes it holds a write")
			}
			if m := f.direct.ZRange(ctx, f.key, 0, -1).Val(); len(m) != 1 || m[0] != "w:"+h.Token() {
				f.fail("B's writer in: members %v", m)
			}
		} else {
			f.readers.Add(1)
			if f.writers.Load() != 0 {
				f.fail("B's reader beside a B writer")
			}
		}
		time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond)
		if write {
			f.writers.Add(-1)
		} else {
			f.readers.Add(-1)
		}
		h.Release(ctx)
	}
}

// watchLeftovers fails if a hold of A's shows in the lock in a read that
// began more than 50ms after its Release returned nil.
func (f *dgFaults) watchLeftovers(stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case <-time.After(5 * time.Millisecond):
		}
		readAt := time.Now()
		m := f.direct.ZRange(f.ctx, f.key, 0, -1).Val()
		f.mu.Lock()
		for _, mem := range m {
			if at, ok := f.released[mem[2:]]; ok && readAt.Sub(at) > 50*time.Millisecond {
				f.fail("A's hold %s still in the lock %v after its Release returned nil", mem, time.Since(at))
				delete(f.released, mem[2:])
			}
		}
		f.mu.Unlock()
	}
}

// aDowngrade takes A's write, downgrades it through random delays and a
// short context, then settles it, lets the watchdog extend it, or reads
// its fence, and releases it.
func (f *dgFaults) aDowngrade(p *redistest.Proxy, rwa *dlock.RWMutex, n *dgCounts) {
	ctx := f.ctx
	actx, acancel := context.WithTimeout(ctx, 2*time.Second)
	w, err := rwa.Writer().Acquire(actx)
	acancel()
	if err != nil {
		return
	}
	f.aWrite.Store(1)
	if f.writers.Load() != 0 || f.readers.Load() != 0 {
		f.fail("A's writer in beside a B hold")
	}
	d := time.Duration(rand.IntN(60)) * time.Millisecond
	p.Delay(d, time.Duration(rand.IntN(60))*time.Millisecond)
	dctx, dcancel := context.WithTimeout(ctx, time.Duration(20+rand.IntN(60))*time.Millisecond)
	err = rwa.Downgrade(dctx, w)
	dcancel()
	cut := rand.IntN(2) == 0
	if cut {
		p.Cut()
	} else {
		p.Delay(0, 0)
	}
	if err != nil {
		n.unknown++
	}
	switch rand.IntN(4) {
	case 0: // settle it
		if err := rwa.Downgrade(ctx, w); err != nil {
			if errors.Is(err, dlock.ErrNotHeld) {
				n.lost++
				if m := f.direct.ZRange(ctx, f.key, 0, -1).Val(); strings.Contains(fmt.Sprint(m), w.Token()) {
					f.fail("second Downgrade says lost (%v) while the lock has %v", err, m)
				}
			}
		} else {
			n.settled++
			f.aWrite.Store(0)
		}
	case 1: // let the watchdog extend it a while
		time.Sleep(time.Duration(rand.IntN(1600)) * time.Millisecond)
		if err := w.Err(); err != nil {
			n.lost++
			if m := f.direct.ZRange(ctx, f.key, 0, -1).Val(); strings.Contains(fmt.Sprint(m), w.Token()) {
				f.fail("the Lock says lost (%v) while the lock has %v", err, m)
			}
		}
	case 2:
		if err := f.fence(w, cut); err != nil {
			f.fail("Fence after the Downgrade: %v", err)
		}
	}
	time.Sleep(time.Duration(rand.IntN(30)) * time.Millisecond)
	f.aWrite.Store(0)
	if err := w.Release(ctx); err == nil {
		f.mu.Lock()
		f.released[w.Token()] = time.Now()
		f.mu.Unlock()
	} else {
		f.t.Logf("Release: %v", err)
	}
}

// fence reads w's fence. After a cut it asks again (twice at most) when the
// connection broke under it: go-redis can give a call made after the cut a
// connection the cut closed (one put back, or dialled before the cut, goes
// to a caller waiting for a connection unchecked), and a script is sent
// once, never again after a failure.
func (f *dgFaults) fence(w *dlock.Lock, cut bool) error {
	_, err := w.Fence(f.ctx)
	for try := 0; cut && try < 2 && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)); try++ {
		_, err = w.Fence(f.ctx)
	}
	return err
}

// A Lock's Token, Key and TTL, read while a Downgrade of it is in flight,
// do not race with it (run under -race), and a Fence waiting behind a
// stalled Downgrade ends with its own context.
func TestRWMutexDowngradeConcurrentReads(t *testing.T) {
	t.Parallel()
	p, rdb, _ := proxied(t, 0, 0)
	ctx := t.Context()
	c := newClient(t, rdb)
	rw := newRW(t, c, "dg-reads")
	w, err := rw.Writer().TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var readers sync.WaitGroup
	readers.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			_, _ = w.Token(), w.Key()
			w.TTL(ctx)
		}
	})
	if err := rw.Downgrade(ctx, w); err != nil {
		t.Fatal(err)
	}
	close(stop)
	readers.Wait()

	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
	w2, err := rw.Writer().TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p.Stall()
	dctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	down := make(chan error, 1)
	go func() { down <- rw.Downgrade(dctx, w2) }()
	time.Sleep(200 * time.Millisecond)
	fctx, fcancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer fcancel()
	start := time.Now()
	_, err = w2.Fence(fctx)
	if took := time.Since(start); took > time.Second || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Fence with a 300ms context behind a stalled Downgrade = %v after %v", err, took)
	}
	p.Cut()
	<-down
}
