package dlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
)

// refusedAs fails the test unless err wraps ErrInvalid with the text want.
func refusedAs(t *testing.T, what string, err error, want string) {
	t.Helper()
	if !errors.Is(err, dlock.ErrInvalid) || err.Error() != want {
		t.Errorf("%s = %v, want ErrInvalid: %q", what, err, want)
	}
}

// A call's invalid LeaseOption fails it with a text that names the option
// as the caller wrote it; of several, the first in the call's list, before
// the checks of the options taken together (a Try's wait, the TTL against
// the drift margin and the node timeout, WatchLoss without the watchdog,
// Resume's metadata), which go in that order.
func TestLockOptionRefusalNamesTheFirstBadOption(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.HolderMeta("ok"))
	const token = "AAAAAAAAAAAAAAAAAAAAAA.m" // a well-formed token with the metadata "m"
	for _, tc := range []struct {
		opts []dlock.LockOption
		want string
	}{
		{[]dlock.LockOption{dlock.LeaseTTL(10 * time.Millisecond)}, "LeaseTTL(10ms): the TTL must be at least 30ms"},
		{[]dlock.LockOption{dlock.LeaseTTL(0)}, "LeaseTTL(0s): the TTL must be at least 30ms"},
		{[]dlock.LockOption{dlock.MaxWait(-time.Millisecond)}, "MaxWait(-1ms): the wait must not be negative"},
		{[]dlock.LockOption{dlock.HolderMeta(strings.Repeat("x", dlock.MaxMetaLen+1))},
			`HolderMeta("` + strings.Repeat("x", dlock.MaxMetaLen+1) + `"): is 129 bytes, longer than 128`},
		{[]dlock.LockOption{dlock.HolderMeta("a\nb")}, `HolderMeta("a\nb"): holds the control character U+000A`},
		{[]dlock.LockOption{dlock.HolderMeta("é\u0085x\x01")}, `HolderMeta("é\u0085x\x01"): holds the control character U+0085`},
		{[]dlock.LockOption{dlock.HolderMeta("\xff\n")}, `HolderMeta("\xff\n"): is not valid UTF-8`},
		{[]dlock.LockOption{dlock.Resume("abc")}, `Resume("abc"): not a lease token: a kind's mark if any ("e:"), 22 base64url characters, then '.' and the metadata if any`},
		{[]dlock.LockOption{dlock.Resume("x:AAAAAAAAAAAAAAAAAAAAAC")}, `Resume("x:AAAAAAAAAAAAAAAAAAAAAC"): not a lease token: a kind's mark if any ("e:"), 22 base64url characters, then '.' and the metadata if any`},
		{[]dlock.LockOption{dlock.Resume("AAAAAAAAAAAAAAAAAAAAAA.")}, `Resume("AAAAAAAAAAAAAAAAAAAAAA."): not a lease token: a kind's mark if any ("e:"), 22 base64url characters, then '.' and the metadata if any`},
		{[]dlock.LockOption{dlock.Resume("AAAAAAAAAAAAAAAAAAAAAA.a b")}, `Resume("AAAAAAAAAAAAAAAAAAAAAA.a b"): not a lease token: its metadata part holds a character a token never does`},
		// Metadata no token carries, as HolderMeta refuses it, once unescaped.
		{[]dlock.LockOption{dlock.Resume("AAAAAAAAAAAAAAAAAAAAAA.%01")}, `Resume("AAAAAAAAAAAAAAAAAAAAAA.%01"): not a lease token: its metadata holds the control character U+0001`},
		{[]dlock.LockOption{dlock.Resume("AAAAAAAAAAAAAAAAAAAAAA.%FF")}, `Resume("AAAAAAAAAAAAAAAAAAAAAA.%FF"): not a lease token: its metadata is not valid UTF-8`},
		{[]dlock.LockOption{dlock.Resume("AAAAAAAAAAAAAAAAAAAAAA." + strings.Repeat("x", dlock.MaxMetaLen+1))},
			`Resume("AAAAAAAAAAAAAAAAAAAAAA.` + strings.Repeat("x", dlock.MaxMetaLen+1) + `"): not a lease token: its metadata is 129 bytes, longer than 128`},
		{[]dlock.LockOption{dlock.MaxHold(-time.Second)}, "MaxHold(-1s): the max hold must be 0 (none) or at least 30ms"},
		{[]dlock.LockOption{dlock.MaxHold(time.Millisecond)}, "MaxHold(1ms): the max hold must be 0 (none) or at least 30ms"},
		{[]dlock.LockOption{dlock.LockDelay(-time.Second)}, "LockDelay(-1s): the delay must not be negative"},
		{[]dlock.LockOption{dlock.LeaseTTL(time.Second), nil}, "option 2 is nil"},
		// The first bad option wins, whatever follows.
		{[]dlock.LockOption{dlock.LockDelay(-time.Second), dlock.LeaseTTL(time.Millisecond)}, "LockDelay(-1s): the delay must not be negative"},
		{[]dlock.LockOption{dlock.LeaseTTL(time.Millisecond), dlock.LockDelay(-time.Second)}, "LeaseTTL(1ms): the TTL must be at least 30ms"},
		{[]dlock.LockOption{nil, dlock.MaxHold(time.Millisecond)}, "option 1 is nil"},
		{[]dlock.LockOption{dlock.HolderMeta("\x00"), nil}, `HolderMeta("\x00"): holds the control character U+0000`},
		{[]dlock.LockOption{dlock.Resume("abc"), dlock.HolderMeta("\x00")}, `Resume("abc"): not a lease token: a kind's mark if any ("e:"), 22 base64url characters, then '.' and the metadata if any`},
		// A valid option after a bad one does not clear it.
		{[]dlock.LockOption{dlock.LeaseTTL(time.Millisecond), dlock.LeaseTTL(time.Second)}, "LeaseTTL(1ms): the TTL must be at least 30ms"},
		// An option's own refusal comes before the checks of the whole.
		{[]dlock.LockOption{dlock.MaxWait(time.Second), dlock.LeaseTTL(time.Millisecond)}, "LeaseTTL(1ms): the TTL must be at least 30ms"},
		{[]dlock.LockOption{dlock.Resume(token), dlock.HolderMeta("not-m")}, `Resume: the metadata is the token's ("m"), not "not-m"`},
		{[]dlock.LockOption{dlock.MaxWait(time.Second), dlock.Resume(token), dlock.HolderMeta("not-m")},
			"MaxWait(1s): TryAcquire and TryDo make one attempt and never wait; use Acquire or Do"},
	} {
		_, err := c.TryAcquire(ctx, "n", tc.opts...)
		refusedAs(t, "TryAcquire", err, `dlock: invalid argument: acquire "n": `+tc.want)
		if strings.HasPrefix(tc.want, "MaxWait(1s)") {
			continue // (Acquire may wait)
		}
		_, err = c.Acquire(ctx, "n", tc.opts...)
		refusedAs(t, "Acquire", err, `dlock: invalid argument: acquire "n": `+tc.want)
	}

	// The checks of the whole, against the Client's drift margin, node
	// timeout and watchdog, in their order; a TTL the Client was made with
	// is not refused again.
	drift := newClient(t, rdb, dlock.WithDrift(50*time.Millisecond), dlock.LeaseTTL(time.Second), dlock.WithAutoExtend(false))
	_, err := drift.TryAcquire(ctx, "d", dlock.LeaseTTL(40*time.Millisecond))
	refusedAs(t, "WithDrift(50ms): TryAcquire(LeaseTTL(40ms))", err, `dlock: invalid argument: acquire "d": LeaseTTL(40ms): the TTL must be above the drift margin (50ms)`)
	_, err = drift.TryAcquire(ctx, "d", dlock.LeaseTTL(40*time.Millisecond), dlock.MaxWait(time.Second))
	refusedAs(t, "WithDrift(50ms): TryAcquire(LeaseTTL(40ms), MaxWait(1s))", err,
		`dlock: invalid argument: acquire "d": MaxWait(1s): TryAcquire and TryDo make one attempt and never wait; use Acquire or Do`)
	_, err = drift.TryAcquire(ctx, "d", dlock.WatchLoss(true), dlock.LeaseTTL(40*time.Millisecond))
	refusedAs(t, "WithDrift(50ms): TryAcquire(WatchLoss(true), LeaseTTL(40ms))", err, `dlock: invalid argument: acquire "d": LeaseTTL(40ms): the TTL must be above the drift margin (50ms)`)
	_, err = drift.TryAcquire(ctx, "d", dlock.Resume(token), dlock.HolderMeta("not-m"), dlock.WatchLoss(true))
	refusedAs(t, "WithAutoExtend(false): TryAcquire(WatchLoss(true), Resume with other metadata)", err,
		`dlock: invalid argument: acquire "d": WatchLoss(true): the watchdog makes the checks, and WithAutoExtend(false) turned it off`)
	if l, err := drift.TryAcquire(ctx, "d"); err != nil {
		t.Errorf("TryAcquire under the Client's own TTL = %v, want the lock", err)
	} else {
		l.Release(ctx)
	}

	nodes := []redis.UniversalClient{rdb, rdb, rdb} // (never dialled: refused before)
	q := newRedlock(t, nodes, 200*time.Millisecond, dlock.WithDrift(50*time.Millisecond))
	for _, ttl := range []time.Duration{100 * time.Millisecond, 200 * time.Millisecond} {
		_, err := q.TryAcquire(ctx, "q", dlock.LeaseTTL(ttl))
		refusedAs(t, "quorum: TryAcquire(LeaseTTL(100ms))", err,
			`dlock: invalid argument: acquire "q": LeaseTTL(`+ttl.String()+`): over a quorum the TTL must be above the per-node timeout (200ms)`)
	}
	_, err = q.TryAcquire(ctx, "q", dlock.LeaseTTL(40*time.Millisecond))
	refusedAs(t, "quorum: TryAcquire(LeaseTTL(40ms))", err, `dlock: invalid argument: acquire "q": LeaseTTL(40ms): the TTL must be above the drift margin (50ms)`)
	if n := rdb.DBSize(ctx).Val(); n != 0 {
		t.Errorf("after refused calls: %d keys in Redis, want none", n)
	}
}

// New refuses the first invalid option of its list, a LeaseOption's as the
// caller wrote it, as any other, and before the checks of the options
// taken together.
func TestNewRefusesTheFirstBadLeaseOption(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	for _, tc := range []struct {
		opts []dlock.Option
		want string
	}{
		{[]dlock.Option{dlock.HolderMeta("a\nb")}, `HolderMeta("a\nb"): holds the control character U+000A`},
		{[]dlock.Option{dlock.MaxWait(-time.Second)}, "MaxWait(-1s): the wait must not be negative"},
		{[]dlock.Option{dlock.LockDelay(-time.Second), dlock.WithPrefix("{")}, "LockDelay(-1s): the delay must not be negative"},
		{[]dlock.Option{dlock.WithPrefix("{"), dlock.LockDelay(-time.Second)}, `WithPrefix("{"): the prefix must not contain '{' or '}'`},
		{[]dlock.Option{dlock.MaxHold(time.Millisecond), dlock.MaxHold(-time.Second)}, "MaxHold(1ms): the max hold must be 0 (none) or at least 30ms"},
		{[]dlock.Option{dlock.HolderMeta("\xff"), dlock.LeaseTTL(time.Millisecond)}, `HolderMeta("\xff"): is not valid UTF-8`},
		{[]dlock.Option{dlock.LeaseTTL(time.Millisecond), dlock.WithDrift(-time.Millisecond)}, "LeaseTTL(1ms): the TTL must be at least 30ms"},
		{[]dlock.Option{dlock.WithDrift(-time.Millisecond), dlock.LeaseTTL(time.Millisecond)}, "WithDrift(-1ms): the drift must not be negative"},
		{[]dlock.Option{dlock.LeaseTTL(time.Millisecond), nil}, "LeaseTTL(1ms): the TTL must be at least 30ms"},
		{[]dlock.Option{nil, dlock.LeaseTTL(time.Millisecond)}, "option 1 is nil"},
		{[]dlock.Option{dlock.WatchLoss(true), dlock.WithAutoExtend(false), dlock.LockDelay(-time.Second)}, "LockDelay(-1s): the delay must not be negative"},
		{[]dlock.Option{dlock.WatchLoss(true), dlock.WithAutoExtend(false), dlock.LeaseTTL(40 * time.Millisecond), dlock.WithDrift(50 * time.Millisecond)},
			"WatchLoss(true): the watchdog makes the checks, and WithAutoExtend(false) turned it off"},
		{[]dlock.Option{dlock.LeaseTTL(40 * time.Millisecond), dlock.WithDrift(50 * time.Millisecond)}, "WithDrift(50ms): the drift must be below the TTL (40ms)"},
	} {
		c, err := dlock.New(rdb, tc.opts...)
		if c != nil {
			t.Errorf("New made a Client, want %q", tc.want)
			continue
		}
		refusedAs(t, "New", err, "dlock: invalid argument: "+tc.want)
	}
	// NewRedlock's own checks come after the options' and apply's.
	nodes := []redis.UniversalClient{rdb, rdb, rdb} // (never dialled: refused before)
	for _, tc := range []struct {
		nodeTimeout time.Duration
		opts        []dlock.Option
		want        string
	}{
		{time.Minute, []dlock.Option{dlock.HolderMeta("\x00")}, `HolderMeta("\x00"): holds the control character U+0000`},
		{0, []dlock.Option{dlock.WithReplicaAck(1, time.Second), dlock.LockDelay(-time.Second)}, "LockDelay(-1s): the delay must not be negative"},
		{time.Minute, []dlock.Option{dlock.LeaseTTL(40 * time.Millisecond), dlock.WithDrift(50 * time.Millisecond)}, "WithDrift(50ms): the drift must be below the TTL (40ms)"},
	} {
		c, err := dlock.NewRedlock(nodes, tc.nodeTimeout, tc.opts...)
		if c != nil {
			t.Errorf("NewRedlock made a Client, want %q", tc.want)
			continue
		}
		refusedAs(t, "NewRedlock", err, "dlock: invalid argument: "+tc.want)
	}
}

// A zero LeaseOption, given to a call or to New, is refused with ErrInvalid,
// not a panic.
func TestZeroLeaseOptionIsRefused(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	const why = "a zero LeaseOption is not an option: make one with LeaseTTL, MaxWait and the like"
	_, err := dlock.New(rdb, dlock.LeaseOption{})
	refusedAs(t, "New(LeaseOption{})", err, "dlock: invalid argument: "+why)
	c := newClient(t, rdb)
	_, err = c.TryAcquire(t.Context(), "zero-option", dlock.LeaseOption{})
	refusedAs(t, "TryAcquire(LeaseOption{})", err, `dlock: invalid argument: acquire "zero-option": `+why)
}

// A Client's own TTL passed New's checks against the drift margin and the
// node timeout, which every call makes: a call without LeaseTTL is never
// refused by them, even at their edge.
func TestTheClientsOwnTTLAtTheEdgeOfItsChecksIsNotRefused(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	done, cancel := context.WithCancel(t.Context())
	cancel() // (nothing is sent: the checks come first)
	for what, c := range map[string]*dlock.Client{
		"drift 29ms, TTL 30ms": newClient(t, rdb, dlock.WithDrift(29*time.Millisecond), dlock.LeaseTTL(30*time.Millisecond)),
		"quorum: node timeout 200ms, TTL 201ms": newRedlock(t, []redis.UniversalClient{rdb, rdb, rdb}, 200*time.Millisecond,
			dlock.LeaseTTL(201*time.Millisecond)),
	} {
		if _, err := c.TryAcquire(done, "n"); errors.Is(err, dlock.ErrInvalid) || !errors.Is(err, context.Canceled) {
			t.Errorf("%s: TryAcquire(a done ctx) = %v, want context.Canceled, not ErrInvalid", what, err)
		}
	}
}

// Every kind, a multi-lock (on one Client or across Clients), an Owner
// Client and a Resume ask for the Client's own TTL when the call gives
// none: at the edge of the drift check, none of them is refused by it.
func TestTheClientsOwnTTLAtTheEdgeIsNotRefusedByAnyKind(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	edge := []dlock.Option{dlock.WithDrift(29 * time.Millisecond), dlock.LeaseTTL(30 * time.Millisecond)}
	c := newClient(t, rdb, edge...)
	r := asOwner(t, newClient(t, rdb, append(edge, dlock.WithReentrant(true))...), "job")
	other := newClient(t, rdb)
	sem, err := c.Semaphore("sem", 2)
	if err != nil {
		t.Fatal(err)
	}
	rw, err := c.RWMutex("rw")
	if err != nil {
		t.Fatal(err)
	}
	e, err := c.Election("e")
	if err != nil {
		t.Fatal(err)
	}
	l, err := c.TryAcquire(t.Context(), "resumed", dlock.LeaseTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(context.Background())
	done, cancel := context.WithCancel(t.Context())
	cancel() // (nothing is sent: the checks come first)
	for what, call := range map[string]func() error{
		"TryAcquire":           func() error { _, err := c.TryAcquire(done, "n"); return err },
		"Semaphore.TryAcquire": func() error { _, err := sem.TryAcquire(done); return err },
		"Reader().TryAcquire":  func() error { _, err := rw.Reader().TryAcquire(done); return err },
		"Writer().TryAcquire":  func() error { _, err := rw.Writer().TryAcquire(done); return err },
		"Campaign":             func() error { _, err := e.Campaign(done, "v"); return err },
		"TryAcquireAll":        func() error { _, err := c.TryAcquireAll(done, []string{"a", "b"}); return err },
		"AcquireParts across": func() error {
			_, err := dlock.AcquireParts(done, []dlock.Part{{Client: c, Name: "a"}, {Client: other, Name: "b"}})
			return err
		},
		"reentrant Owner TryAcquire": func() error { _, err := r.TryAcquire(done, "n"); return err },
		"Resume":                     func() error { _, err := c.TryAcquire(done, "resumed", dlock.Resume(l.Token())); return err },
	} {
		if err := call(); errors.Is(err, dlock.ErrInvalid) || !errors.Is(err, context.Canceled) {
			t.Errorf("%s: on a done ctx = %v, want context.Canceled, not ErrInvalid", what, err)
		}
	}
}
