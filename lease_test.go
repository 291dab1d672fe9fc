package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
)

// The per-call options (LockOption) and the holder metadata, in every mode
// (plain, fair, reentrant, quorum) and with pipelining on and off: the
// batched path must behave as the direct one.

// A LeaseTTL is the lease's own: Redis's expiry follows it, not the
// Client's TTL, and so does the watchdog, which keeps a lease far shorter
// than the Client's TTL alive by extending it on the lease's period. The
// marker of an ended lease lives for the lease's revocation window: here a
// resumed lease's (a clean lease leaves none).
func TestLeaseTTLIsTheLeasesOwn(t *testing.T) {
	t.Parallel()
	long(t)
	_, rdb := setup(t)
	const ttl = time.Second // a tenth of the Client's
	for _, m := range modes(t, rdb, true) {
		for _, pipelining := range []bool{true, false} {
			if testing.Short() && !pipelining { // the direct path: without -short
				continue
			}
			t.Run(fmt.Sprintf("%s/pipelining=%v", m.name, pipelining), func(t *testing.T) {
				ctx := m.ctx(t.Context())
				c := m.new(t, dlock.LeaseTTL(10*time.Second), pipelined(pipelining))
				name := fmt.Sprintf("lease-ttl-%s-%v", m.name, pipelining)
				// A Client's first attempt loads its scripts before the
				// lease's clock starts: warm it, so that the calls below
				// measure the lease alone.
				if warm, err := c.TryAcquire(ctx, name+"-warm"); err == nil {
					warm.Release(ctx)
				}
				start := time.Now()
				calls := map[string]func() (*dlock.Lock, error){
					"TryAcquire": func() (*dlock.Lock, error) { return c.TryAcquire(ctx, name+"-try", dlock.LeaseTTL(ttl)) },
					"Acquire":    func() (*dlock.Lock, error) { return c.Acquire(ctx, name+"-acquire", dlock.LeaseTTL(ttl)) },
				}
				locks := map[string]*dlock.Lock{}
				for op, call := range calls {
					start := time.Now()
					l, err := call()
					if err != nil {
						t.Fatalf("%s(LeaseTTL(%v)) = %v", op, ttl, err)
					}
					locks[op] = l
					if got := l.ValidUntil().Sub(start); got > ttl {
						t.Errorf("%s: ValidUntil is %v after the call began, want at most the lease's %v", op, got, ttl)
					}
					if left, err := l.TTL(ctx); err != nil || left <= 0 || left > ttl {
						t.Errorf("%s: TTL() = %v, %v; want Redis's expiry within the lease's %v", op, left, err, ttl)
					}
				}
				// Do: the same lease inside fn.
				err := c.Do(ctx, name+"-do", func(ctx context.Context, l *dlock.Lock) error {
					if left, err := l.TTL(ctx); err != nil || left <= 0 || left > ttl {
						t.Errorf("Do: TTL() = %v, %v; want within %v", left, err, ttl)
					}
					time.Sleep(4 * ttl) // longer than the lease: the watchdog must extend it
					return ctx.Err()
				}, dlock.LeaseTTL(ttl))
				if err != nil {
					t.Errorf("Do(LeaseTTL(%v)) holding for %v = %v, want nil", ttl, 4*ttl, err)
				}
				for op, l := range locks {
					leaseKeptThenMarked(t, ctx, c, rdb, m.name, op, l, ttl, start)
				}
			})
		}
	}
}

// leaseKeptThenMarked: l (taken by op with lease ttl through c, in mode)
// is still held at least 4 leases after start, Redis keeping it within
// ttl; then, resumed and released, it leaves its marker for the lease's
// window (a quorum's and a reentrant hold's are only released).
func leaseKeptThenMarked(t *testing.T, ctx context.Context, c *dlock.Client, rdb *redis.Client, mode, op string, l *dlock.Lock, ttl time.Duration, start time.Time) {
	t.Helper()
	// Four lease times later, extended on the lease's period
	// (a third of it), and each time for the lease, not 10s.
	if err := l.Err(); err != nil {
		t.Errorf("%s: Err() = %v after %v, want held (the watchdog extends on the lease's period)", op, err, time.Since(start))
	}
	if left, err := l.TTL(ctx); err != nil || left <= 0 || left > ttl {
		t.Errorf("%s: TTL() after extensions = %v, %v; want within %v", op, left, err, ttl)
	}
	marker := l.Key() + ":r:" + l.Token()
	if mode == "quorum" || mode == "reentrant" { // (a reentrant Token is the owner's id, not the hold's)
		if err := l.Release(ctx); err != nil {
			t.Errorf("%s: Release = %v", op, err)
		}
		return
	}
	// The lease resumed, whose first holder's requests may be in flight: it ends marked.
	r, err := c.TryAcquire(ctx, l.Name(), dlock.Resume(l.Token()), dlock.LeaseTTL(ttl))
	if err != nil {
		t.Fatalf("%s: Resume = %v", op, err)
	}
	if err := r.Release(ctx); err != nil {
		t.Errorf("%s: Release = %v", op, err)
	}
	if d := rdb.PTTL(t.Context(), marker).Val(); d <= 0 || d > ttl {
		t.Errorf("%s: the released lease's marker lives %v, want the lease's window, at most %v", op, d, ttl)
	}
}

// MaxWait(0) tries once, as TryAcquire does (in fair mode it does not
// queue); MaxWait(d) waits at most d, and makes one attempt however short
// d is. Both fail with an error that matches
// ErrNotAcquired and carries the holder, and — the context being alive —
// matches no context error; a context that ends first is what the error
// names. A bounded wait that sees the lock released takes it.
func TestMaxWait(t *testing.T) {
	t.Parallel()
	long(t)
	_, rdb := setup(t)
	for _, m := range modes(t, rdb, true) {
		for _, pipelining := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/pipelining=%v", m.name, pipelining), func(t *testing.T) {
				ctx := m.ctx(t.Context())
				name := fmt.Sprintf("maxwait-%s-%v", m.name, pipelining)
				holder := m.new(t, dlock.HolderMeta("holder-a"))
				c := asOwner(t, m.new(t, pipelined(pipelining)), "owner-b")
				l, err := holder.TryAcquire(ctx, name)
				if err != nil {
					t.Fatal(err)
				}
				checkRefused := func(what string, err error, wantCtx error) {
					t.Helper()
					if !errors.Is(err, dlock.ErrNotAcquired) {
						t.Errorf("%s = %v, want ErrNotAcquired", what, err)
					}
					for _, ce := range []error{context.Canceled, context.DeadlineExceeded} {
						if want := ce == wantCtx; errors.Is(err, ce) != want {
							t.Errorf("%s = %v: errors.Is(%v) = %v, want %v", what, err, ce, !want, want)
						}
					}
					if na, ok := errors.AsType[*dlock.NotAcquiredError](err); !ok || na.Meta != "holder-a" {
						t.Errorf("%s = %v: NotAcquiredError %+v, want one naming the holder's metadata", what, err, na)
					}
				}
				_, err = c.Acquire(ctx, name, dlock.MaxWait(0))
				checkRefused("Acquire(MaxWait(0))", err, nil)
				if n := rdb.Exists(t.Context(), "dlock:{"+name+"}:q", "dlock:{"+name+"}:qw").Val(); m.name != "quorum" && n != 0 {
					t.Errorf("Acquire(MaxWait(0)) left %d queue keys, want none (it tries once)", n)
				}
				called := false
				err = c.Do(ctx, name, func(context.Context, *dlock.Lock) error { called = true; return nil }, dlock.MaxWait(0))
				checkRefused("Do(MaxWait(0))", err, nil)
				if called {
					t.Error("Do(MaxWait(0)) ran fn without the lock")
				}

				// However short, a MaxWait makes one attempt: refused while
				// the lock is held, and taking a free one.
				_, err = c.Acquire(ctx, name, dlock.MaxWait(time.Nanosecond))
				checkRefused("Acquire(MaxWait(1ns))", err, nil)
				if free, err := c.Acquire(ctx, name+"-free", dlock.MaxWait(time.Nanosecond)); err != nil {
					t.Errorf("Acquire(MaxWait(1ns)) of a free lock = %v, want it taken", err)
				} else {
					free.Release(ctx)
				}

				start := time.Now()
				_, err = c.Acquire(ctx, name, dlock.MaxWait(300*time.Millisecond))
				checkRefused("Acquire(MaxWait(300ms))", err, nil)
				if waited := time.Since(start); waited < 300*time.Millisecond || waited > 10*time.Second {
					t.Errorf("Acquire(MaxWait(300ms)) returned after %v, want after the wait, promptly", waited)
				}
				short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
				_, err = c.Acquire(short, name, dlock.MaxWait(time.Minute))
				cancel()
				checkRefused("Acquire(MaxWait(1m)) with a 100ms context", err, context.DeadlineExceeded)

				go func() {
					time.Sleep(100 * time.Millisecond)
					l.Release(context.WithoutCancel(ctx))
				}()
				got, err := c.Acquire(ctx, name, dlock.MaxWait(10*time.Second))
				if err != nil {
					t.Fatalf("Acquire(MaxWait(10s)) while the holder releases after 100ms = %v, want the lock", err)
				}
				got.Release(ctx)
				if m.name != "quorum" {
					if n := rdb.Exists(t.Context(), "dlock:{"+name+"}", "dlock:{"+name+"}:q", "dlock:{"+name+"}:qw").Val(); n != 0 {
						t.Errorf("after the waits: %d lock or queue keys left, want none", n)
					}
				}
			})
		}
	}
}

// The holder metadata goes round: the default is hostname:pid; the
// Client's and the call's show in Lock.Meta, Inspect and the error of a
// refused attempt, escaped in the token (no space, no brace) and whole
// again when read back.
func TestHolderMetaRoundTrip(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	host, _ := os.Hostname()
	def := host + ":" + strconv.Itoa(os.Getpid())
	for _, m := range modesAt(t, rdb, true, time.Second) { // (leases of the default 10s)
		for _, pipelining := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/pipelining=%v", m.name, pipelining), func(t *testing.T) {
				ctx := m.ctx(t.Context())
				name := fmt.Sprintf("meta-%s-%v", m.name, pipelining)
				other := asOwner(t, m.new(t, pipelined(pipelining)), "other-owner")
				for _, tc := range []struct {
					what string
					opts []dlock.Option
					call []dlock.LockOption
					want string
				}{
					{"default", nil, nil, def},
					{"Client's", []dlock.Option{dlock.HolderMeta("web-1 job{42} 100% ünï")}, nil, "web-1 job{42} 100% ünï"},
					{"call's", []dlock.Option{dlock.HolderMeta("client")}, []dlock.LockOption{dlock.HolderMeta("call \"x\"")}, "call \"x\""},
					{"none", []dlock.Option{dlock.HolderMeta("")}, nil, ""},
					{"none for the call", nil, []dlock.LockOption{dlock.HolderMeta("")}, ""},
				} {
					c := m.new(t, append(tc.opts, pipelined(pipelining))...)
					l, err := c.TryAcquire(ctx, name, tc.call...)
					if err != nil {
						t.Fatalf("%s: TryAcquire = %v", tc.what, err)
					}
					if l.Meta() != tc.want {
						t.Errorf("%s: Meta() = %q, want %q", tc.what, l.Meta(), tc.want)
					}
					info, err := c.Inspect(t.Context(), name)
					if err != nil || info.Meta != tc.want {
						t.Errorf("%s: Inspect = %+v, %v; want Meta %q", tc.what, info, err, tc.want)
					}
					_, err = other.TryAcquire(ctx, name)
					na, ok := errors.AsType[*dlock.NotAcquiredError](err)
					if !errors.Is(err, dlock.ErrNotAcquired) || !ok || na.Meta != tc.want || na.Holder != l.Token() {
						t.Errorf("%s: another's TryAcquire = %v (%+v), want ErrNotAcquired naming holder %q, meta %q", tc.what, err, na, l.Token(), tc.want)
					}
					if tc.want != "" && tc.want != def && !strings.Contains(err.Error(), strconv.Quote(tc.want)) {
						t.Errorf("%s: error text %q does not name the holder's metadata", tc.what, err)
					}
					if m.name != "reentrant" {
						token := l.Token()
						if strings.ContainsAny(token, " {}\n") || (tc.want == "") != (len(token) == 22) {
							t.Errorf("%s: Token() = %q: want 22 random characters, then '.' and the escaped metadata if any", tc.what, token)
						}
						if v := rdb.Get(t.Context(), l.Key()).Val(); m.name != "quorum" && v != token {
							t.Errorf("%s: the lock key holds %q, want the token %q", tc.what, v, token)
						}
					}
					if err := l.Release(ctx); err != nil {
						t.Errorf("%s: Release = %v", tc.what, err)
					}
				}
			})
		}
	}
}

// A lock handed to a fair waiter shows the waiter's metadata, carried by
// its token through the queue and the handover message; a waiter that gave
// up on a held lock learns who held it.
func TestHolderMetaOverFairHandover(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	for _, pipelining := range []bool{true, false} {
		ctx := t.Context()
		name := fmt.Sprintf("meta-handover-%v", pipelining)
		holder := newClient(t, rdb, dlock.HolderMeta("first"), pipelined(pipelining))
		waiter := newClient(t, rdb, pipelined(pipelining))
		l, err := holder.TryAcquire(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		_, err = waiter.Acquire(short, name)
		cancel()
		if na, ok := errors.AsType[*dlock.NotAcquiredError](err); !ok || na.Meta != "first" || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("pipelining %v: Acquire that gave up = %v, want the holder named and the context's error", pipelining, err)
		}
		got := make(chan *dlock.Lock, 1)
		go func() {
			w, err := waiter.Acquire(ctx, name, dlock.HolderMeta("second"))
			if err != nil {
				t.Error(err)
			}
			got <- w
		}()
		if !waitFor(5*time.Second, func() bool { return rdb.LLen(ctx, "dlock:{"+name+"}:q").Val() == 1 }) {
			t.Fatal("the waiter did not queue")
		}
		l.Release(ctx)
		w := <-got
		if w == nil {
			continue
		}
		if info, _ := holder.Inspect(ctx, name); info.Meta != "second" || info.Token != w.Token() {
			t.Errorf("pipelining %v: after the handover Inspect = %+v, want the waiter's token and metadata \"second\"", pipelining, info)
		}
		if _, err := holder.TryAcquire(ctx, name); !errors.Is(err, dlock.ErrNotAcquired) || !strings.Contains(err.Error(), `"second"`) {
			t.Errorf("pipelining %v: TryAcquire after the handover = %v, want the waiter named", pipelining, err)
		}
		w.Release(ctx)
	}
}

// A reentrant lock's holds carry their own metadata: Inspect shows the
// owner's, and a refused owner learns the owner's ID and its metadata.
func TestHolderMetaOfReentrantHolds(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.WithReentrant(true), dlock.HolderMeta("outer"))
	owner := asOwner(t, c, "request-1")
	outer, err := owner.TryAcquire(ctx, "re-meta")
	if err != nil {
		t.Fatal(err)
	}
	inner, err := owner.TryAcquire(ctx, "re-meta", dlock.HolderMeta("inner"), dlock.LeaseTTL(time.Second))
	if err != nil {
		t.Fatalf("re-entry with HolderMeta and LeaseTTL = %v, want it honoured", err)
	}
	if inner.Meta() != "inner" || outer.Meta() != "outer" {
		t.Errorf("Meta() = %q, %q; want inner, outer", inner.Meta(), outer.Meta())
	}
	info, err := c.Inspect(ctx, "re-meta")
	if err != nil || len(info.Owners) != 1 || info.Owners[0].Holds != 2 ||
		strings.Join(info.Owners[0].Meta, ",") != "inner,outer" || info.Meta != "inner, outer" {
		t.Errorf("Inspect = %+v, %v; want one owner, two holds, metadata inner and outer", info, err)
	}
	_, err = asOwner(t, c, "request-2").TryAcquire(ctx, "re-meta")
	na, ok := errors.AsType[*dlock.NotAcquiredError](err)
	if !ok || na.Holder != outer.Token() || (na.Meta != "inner" && na.Meta != "outer") {
		t.Errorf("another owner's TryAcquire = %v (%+v), want the owner %q and one of its holds' metadata", err, na, outer.Token())
	}
	if left, err := inner.TTL(ctx); err != nil || left > time.Second {
		t.Errorf("the inner hold's TTL() = %v, %v; want its own lease, at most 1s", left, err)
	}
	inner.Release(ctx)
	if info, _ := c.Inspect(ctx, "re-meta"); info.Meta != "outer" {
		t.Errorf("after the inner release Inspect.Meta = %q, want outer", info.Meta)
	}
	outer.Release(ctx)
}

// Bad input — an invalid option, or one that does not apply — fails with
// ErrInvalid before anything reaches Redis, in every call and mode, and
// New refuses bad Client options.
func TestLockOptionsBadInputWritesNothing(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	long := strings.Repeat("x", dlock.MaxMetaLen+1)
	bad := badLockOptions()
	for _, m := range modes(t, rdb, true) {
		for _, pipelining := range []bool{true, false} {
			c := m.new(t, pipelined(pipelining))
			ctx := m.ctx(t.Context())
			for _, tc := range bad {
				name := "bad-" + m.name
				_, err := c.TryAcquire(ctx, name, tc.opts...)
				if !errors.Is(err, dlock.ErrInvalid) {
					t.Errorf("%s, pipelining %v, %s: TryAcquire = %v, want ErrInvalid", m.name, pipelining, tc.what, err)
				}
				if tc.try {
					continue
				}
				if _, err := c.Acquire(ctx, name, tc.opts...); !errors.Is(err, dlock.ErrInvalid) {
					t.Errorf("%s, pipelining %v, %s: Acquire = %v, want ErrInvalid", m.name, pipelining, tc.what, err)
				}
				called := false
				err = c.Do(ctx, name, func(context.Context, *dlock.Lock) error { called = true; return nil }, tc.opts...)
				if !errors.Is(err, dlock.ErrInvalid) || called {
					t.Errorf("%s, pipelining %v, %s: Do = %v (fn called: %v), want ErrInvalid and no call", m.name, pipelining, tc.what, err, called)
				}
			}
		}
	}
	// A quorum refuses a TTL its nodes' timeout leaves no room for.
	_, nodes := startQuorum(t, 3)
	q := newRedlock(t, nodes, 200*time.Millisecond)
	if _, err := q.TryAcquire(t.Context(), "bad-quorum", dlock.LeaseTTL(100*time.Millisecond)); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("quorum with a 200ms node timeout: TryAcquire(LeaseTTL(100ms)) = %v, want ErrInvalid", err)
	}
	// A TTL the drift margin would eat whole.
	d := newClient(t, rdb, dlock.WithDrift(50*time.Millisecond))
	if _, err := d.TryAcquire(t.Context(), "bad-drift", dlock.LeaseTTL(40*time.Millisecond)); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("WithDrift(50ms): TryAcquire(LeaseTTL(40ms)) = %v, want ErrInvalid", err)
	}
	if n := rdb.DBSize(t.Context()).Val(); n != 0 {
		keys := rdb.Keys(t.Context(), "*").Val()
		t.Errorf("after refused calls: %d keys in Redis (%v), want none", n, keys)
	}
	for _, opt := range []dlock.Option{
		dlock.HolderMeta(long), dlock.HolderMeta("tab\there"), dlock.HolderMeta("\xfe"),
		dlock.MaxHold(-time.Second), dlock.MaxHold(time.Millisecond),
	} {
		if _, err := dlock.New(rdb, opt); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("New with a bad option = %v, want ErrInvalid", err)
		}
		if _, err := dlock.NewRedlock(nodes, 0, opt); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("NewRedlock with a bad option = %v, want ErrInvalid", err)
		}
	}
}

// badLockOption is an invalid list of LockOptions: every call that takes
// them refuses it with ErrInvalid, before anything is sent.
type badLockOption struct {
	what string
	opts []dlock.LockOption
	try  bool // refused by TryAcquire only
}

// badLockOptions returns the invalid lists of LockOptions that the tests of
// every call taking them go through.
func badLockOptions() []badLockOption {
	long := strings.Repeat("x", dlock.MaxMetaLen+1)
	return []badLockOption{
		{"negative TTL", []dlock.LockOption{dlock.LeaseTTL(-time.Second)}, false},
		{"zero TTL", []dlock.LockOption{dlock.LeaseTTL(0)}, false},
		{"TTL below MinTTL", []dlock.LockOption{dlock.LeaseTTL(dlock.MinTTL - time.Millisecond)}, false},
		{"negative wait", []dlock.LockOption{dlock.MaxWait(-time.Millisecond)}, false},
		{"negative max hold", []dlock.LockOption{dlock.MaxHold(-time.Second)}, false},
		{"max hold below MinTTL", []dlock.LockOption{dlock.MaxHold(time.Millisecond)}, false},
		{"metadata too long", []dlock.LockOption{dlock.HolderMeta(long)}, false},
		{"newline in metadata", []dlock.LockOption{dlock.HolderMeta("a\nb")}, false},
		{"NUL in metadata", []dlock.LockOption{dlock.HolderMeta("a\x00")}, false},
		{"escape in metadata", []dlock.LockOption{dlock.HolderMeta("\x1b[31m")}, false},
		{"invalid UTF-8", []dlock.LockOption{dlock.HolderMeta("\xff")}, false},
		{"nil option", []dlock.LockOption{nil}, false},
		{"a valid option then a bad one", []dlock.LockOption{dlock.LeaseTTL(time.Second), dlock.MaxWait(-1)}, false},
		{"TryAcquire with a wait", []dlock.LockOption{dlock.MaxWait(time.Second)}, true},
	}
}

// checkBadLockOptions gives every invalid list of options to a call's try
// (its TryAcquire), acquire and do (which sets *called if it runs its fn),
// and checks that each refuses it with ErrInvalid, without running fn.
func checkBadLockOptions(t *testing.T, try, acquire func(...dlock.LockOption) error, do func(called *bool, opts ...dlock.LockOption) error) {
	t.Helper()
	for _, tc := range badLockOptions() {
		if err := try(tc.opts...); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("%s: the try = %v, want ErrInvalid", tc.what, err)
		}
		if tc.try {
			continue
		}
		if err := acquire(tc.opts...); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("%s: the acquire = %v, want ErrInvalid", tc.what, err)
		}
		called := false
		if err := do(&called, tc.opts...); !errors.Is(err, dlock.ErrInvalid) || called {
			t.Errorf("%s: the Do = %v (fn called: %v), want ErrInvalid and no call", tc.what, err, called)
		}
	}
}

// Metadata of MaxMetaLen bytes, all of which must be escaped, still makes
// a token every script, key and message takes, and reads back whole.
func TestHolderMetaAtItsLongest(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	meta := strings.Repeat("é", dlock.MaxMetaLen/2) // 128 bytes, each escaped as %XX
	holder := newClient(t, rdb, dlock.HolderMeta(meta))
	waiter := newClient(t, rdb)
	l, err := holder.TryAcquire(t.Context(), "long-meta")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		w, err := waiter.Acquire(t.Context(), "long-meta", dlock.HolderMeta(meta))
		if err != nil {
			t.Error(err)
			return
		}
		if info, _ := waiter.Inspect(t.Context(), "long-meta"); info.Meta != meta {
			t.Errorf("after the handover Inspect.Meta = %q, want the waiter's", info.Meta)
		}
		if err := w.Release(t.Context()); err != nil {
			t.Error(err)
		}
	})
	if !waitFor(5*time.Second, func() bool { return rdb.LLen(t.Context(), "dlock:{long-meta}:q").Val() == 1 }) {
		t.Fatal("the waiter did not queue")
	}
	if info, _ := holder.Inspect(t.Context(), "long-meta"); info.Meta != meta {
		t.Errorf("Inspect.Meta = %q, want %q", info.Meta, meta)
	}
	if err := l.Release(t.Context()); err != nil {
		t.Errorf("Release = %v", err)
	}
	wg.Wait()
}

// A semaphore's permits carry their holders' metadata: Inspect and Holders
// show each permit's, and Info.Meta their distinct values.
func TestHolderMetaOfSemaphorePermits(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	var permits []*dlock.Lock
	for _, meta := range []string{"worker b", "worker a", "worker b", ""} {
		s, err := newClient(t, rdb, dlock.HolderMeta(meta)).Semaphore("sem-meta", 4)
		if err != nil {
			t.Fatal(err)
		}
		l, err := s.TryAcquire(ctx)
		if err != nil {
			t.Fatalf("semaphore TryAcquire with metadata %q = %v", meta, err)
		}
		defer l.Release(ctx)
		permits = append(permits, l)
	}
	info, err := newClient(t, rdb).Inspect(ctx, "sem-meta")
	if err != nil || len(info.Permits) != 4 || info.Meta != "worker a, worker b" {
		t.Fatalf("Inspect = %+v, %v; want 4 permits and Meta %q", info, err, "worker a, worker b")
	}
	for _, p := range info.Permits {
		for _, l := range permits {
			if p.Token == l.Token() && p.Meta != l.Meta() {
				t.Errorf("permit %s: Meta = %q, want %q", p.Token, p.Meta, l.Meta())
			}
		}
	}
}

// A refusal names the holder in the lock's own terms: a plain lock's is
// "another holder" (a lease), a reentrant lock's "another owner".
func TestNotAcquiredWording(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	plain := newClient(t, rdb, dlock.HolderMeta("batch"))
	l, err := plain.TryAcquire(ctx, "wording-plain")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	_, err = plain.TryAcquire(ctx, "wording-plain")
	if want := `held by another holder, "batch"`; !errors.Is(err, dlock.ErrNotAcquired) || !strings.HasSuffix(err.Error(), want) {
		t.Errorf("TryAcquire of a held plain lock = %v, want ErrNotAcquired ending in %s", err, want)
	}

	re := newClient(t, rdb, dlock.WithReentrant(true), dlock.HolderMeta(""))
	outer, err := asOwner(t, re, "flow-1").TryAcquire(ctx, "wording-re")
	if err != nil {
		t.Fatal(err)
	}
	defer outer.Release(ctx)
	_, err = asOwner(t, re, "flow-2").TryAcquire(ctx, "wording-re")
	if want := "held by another owner"; !errors.Is(err, dlock.ErrNotAcquired) || !strings.HasSuffix(err.Error(), want) {
		t.Errorf("TryAcquire of a reentrant lock another owner holds = %v, want ErrNotAcquired ending in %s", err, want)
	}
}

// The lease options given to New are the Client's defaults, and a call's
// override them. A default MaxWait bounds every wait (Acquire, Do,
// AcquireAll, a semaphore's, a read-write lock's, a campaign's) but not
// TryAcquire and TryAcquireAll, which still make one attempt.
func TestLeaseOptionsAsClientDefaults(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	const wait = 150 * time.Millisecond
	holder := newClient(t, rdb, dlock.HolderMeta("holder"))
	c := newClient(t, rdb, dlock.MaxWait(wait), dlock.LeaseTTL(5*time.Second), dlock.HolderMeta("defaults"))
	bounded := func(what string, f func() error) {
		t.Helper()
		start := time.Now()
		err := f()
		if took := time.Since(start); !errors.Is(err, dlock.ErrNotAcquired) || errors.Is(err, context.DeadlineExceeded) ||
			took < wait || took > wait+2*time.Second {
			t.Errorf("%s = %v after %v, want ErrNotAcquired after the default MaxWait (%v)", what, err, took, wait)
		}
	}
	once := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, dlock.ErrNotAcquired) || errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("%s = %v, want ErrNotAcquired: one attempt, the default MaxWait not applying", what, err)
		}
	}
	if _, err := holder.TryAcquire(ctx, "held"); err != nil {
		t.Fatal(err)
	}
	bounded("Acquire", func() error { _, err := c.Acquire(ctx, "held"); return err })
	bounded("Do", func() error { return c.Do(ctx, "held", func(context.Context, *dlock.Lock) error { return nil }) })
	bounded("AcquireAll", func() error { _, err := c.AcquireAll(ctx, []string{"free", "held"}); return err })
	_, err := c.TryAcquire(ctx, "held")
	once("TryAcquire", err)
	_, err = c.TryAcquireAll(ctx, []string{"free", "held"})
	once("TryAcquireAll", err)
	if _, err := c.TryAcquire(ctx, "held", dlock.MaxWait(time.Second)); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("TryAcquire(MaxWait(1s)) = %v, want ErrInvalid", err)
	}
	start := time.Now()
	if _, err := c.Acquire(ctx, "held", dlock.MaxWait(0)); !errors.Is(err, dlock.ErrNotAcquired) || time.Since(start) > wait {
		t.Errorf("Acquire(MaxWait(0)) = %v after %v, want one attempt: the call's option overrides the default", err, time.Since(start))
	}

	defaultMaxWaitBoundsKinds(t, holder, c, bounded)

	l, err := c.TryAcquire(ctx, "mine")
	if err != nil {
		t.Fatal(err)
	}
	if l.Meta() != "defaults" {
		t.Errorf("Meta() = %q, want the Client's default", l.Meta())
	}
	if ttl, err := l.TTL(ctx); err != nil || ttl <= 4*time.Second || ttl > 5*time.Second {
		t.Errorf("TTL() = %v, %v; want the Client's default lease time (5s)", ttl, err)
	}
	l2, err := c.TryAcquire(ctx, "mine-too", dlock.LeaseTTL(time.Second), dlock.HolderMeta("call"))
	if err != nil {
		t.Fatal(err)
	}
	if ttl, err := l2.TTL(ctx); err != nil || ttl > time.Second || l2.Meta() != "call" {
		t.Errorf("per call: TTL() = %v, %v, Meta() = %q; want the call's options (1s, \"call\")", ttl, err, l2.Meta())
	}
}

// defaultMaxWaitBoundsKinds: with holder holding a semaphore, a write and a
// leadership, c's waits for each are bounded (bounded checks one).
func defaultMaxWaitBoundsKinds(t *testing.T, holder, c *dlock.Client, bounded func(what string, f func() error)) {
	t.Helper()
	ctx := t.Context()
	s1, err := holder.Semaphore("sem-defaults", 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s1.TryAcquire(ctx); err != nil {
		t.Fatal(err)
	}
	s2, err := c.Semaphore("sem-defaults", 1)
	if err != nil {
		t.Fatal(err)
	}
	bounded("Semaphore.Acquire", func() error { _, err := s2.Acquire(ctx); return err })
	rw1, err := holder.RWMutex("rw-defaults")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rw1.Writer().TryAcquire(ctx); err != nil {
		t.Fatal(err)
	}
	rw2, err := c.RWMutex("rw-defaults")
	if err != nil {
		t.Fatal(err)
	}
	bounded("RWLocker.Acquire", func() error { _, err := rw2.Reader().Acquire(ctx); return err })
	e1, err := holder.Election("el-defaults")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e1.Campaign(ctx, "leader"); err != nil {
		t.Fatal(err)
	}
	e2, err := c.Election("el-defaults")
	if err != nil {
		t.Fatal(err)
	}
	bounded("Election.Campaign", func() error { _, err := e2.Campaign(ctx, "follower"); return err })
}
