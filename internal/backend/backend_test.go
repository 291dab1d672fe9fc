package backend

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/internal/redistest"
	"github.com/dlockio/dlock/internal/script"
)

// A retry after a lost reply runs the acquire script again with the same
// token: it must find the lock ours and return the fence it issued.
func TestAcquireRetryReturnsSameFence(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	rdb := s.Client(t)
	b := NewNode(rdb, Config{})
	k := KeysFor("dlock:", "retry")
	mine, theirs := &Claim{Keys: k, Kind: PlainLock}, &Claim{Keys: k, Kind: PlainLock}
	mine.SetToken("tok")
	theirs.SetToken("other")
	ctx := t.Context()
	first, err := b.Acquire(ctx, mine, time.Second, false)
	if err != nil || !first.Held {
		t.Fatalf("acquire = %+v, %v, want held", first, err)
	}
	again, err := b.Acquire(ctx, mine, 5*time.Second, false)
	if err != nil || !again.Held {
		t.Fatalf("retried acquire = %+v, %v, want held", again, err)
	}
	if again.Fence != first.Fence {
		t.Errorf("retried acquire fence = %d, want the first one, %d", again.Fence, first.Fence)
	}
	// The retry pushes the expiry out to its own TTL (its caller counts
	// validity from when it sent it), but a shorter one never cuts it.
	if pttl := s.Client(t).PTTL(ctx, k.Lock).Val(); pttl < 4*time.Second {
		t.Errorf("PTTL after the retry with a 5s TTL = %v, want ~5s", pttl)
	}
	if _, err := b.Acquire(ctx, mine, time.Second, false); err != nil {
		t.Fatal(err)
	}
	if pttl := s.Client(t).PTTL(ctx, k.Lock).Val(); pttl < 4*time.Second {
		t.Errorf("PTTL after a retry with a 1s TTL = %v, want still ~5s (never shortened)", pttl)
	}
	other, err := b.Acquire(ctx, theirs, time.Second, false)
	if err != nil || other.Held || other.PTTL <= 0 {
		t.Errorf("acquire by another token = %+v, %v, want not held with a pttl", other, err)
	}
	// A holder's key without expiry is reported as pttl -1 (unknown), not
	// as held: the reply packs "not held" and the pttl into one integer.
	s.Client(t).Persist(ctx, k.Lock)
	other, err = b.Acquire(ctx, theirs, time.Second, false)
	if err != nil || other.Held || other.PTTL != -1 {
		t.Errorf("acquire by another token, key without expiry = %+v, %v, want not held, pttl -1", other, err)
	}
}

// The six names share one string; each must come out whole.
func TestKeysFor(t *testing.T) {
	for _, tc := range []struct{ prefix, name string }{
		{"dlock:", "jobs"}, {"", "x"}, {"app:{tenant}:", "a b:c"},
	} {
		k := KeysFor(tc.prefix, tc.name)
		base := tc.prefix + "{" + tc.name + "}"
		want := Keys{Lock: base, Fence: base + ":fence", Queue: base + ":q", Waiters: base + ":qw", Channel: base + ":ch", Wake: base + ":w"}
		if k != want {
			t.Errorf("KeysFor(%q, %q) = %+v, want %+v", tc.prefix, tc.name, k, want)
		}
	}
}

// A force release names the holding it read: a re-sent copy that lands
// after the next holder took the lock deletes nothing.
func TestForceReleaseScriptNamesTheHolding(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	rdb := s.Client(t)
	ctx := t.Context()
	k := KeysFor("dlock:", "forced")
	rdb.Set(ctx, k.Lock, "first", time.Minute)
	force := func() int64 {
		n, err := script.ForceRelease.Run(ctx, rdb, []string{k.Lock}, "first", k.Channel, "PUBLISH", 60000).Int64()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := force(); n != 1 {
		t.Fatalf("force release of the holding it names = %d, want 1", n)
	}
	rdb.Set(ctx, k.Lock, "next", time.Minute) // the next holder
	if n := force(); n != 0 {
		t.Errorf("re-sent force release = %d, want 0", n)
	}
	if v := rdb.Get(ctx, k.Lock).Val(); v != "next" {
		t.Errorf("lock after a re-sent force release = %q, want the next holder's", v)
	}
}

// A refused acquire names the holder's token (which carries its metadata),
// in every kind of lock: plain, fair (also when the refusal is a handover
// to the queue's head) and reentrant (the owner and one of its holds).
func TestRefusedAcquireNamesTheHolder(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	rdb := s.Client(t)
	ctx := t.Context()
	node := NewNode(rdb, Config{})
	for _, n := range []struct {
		name string
		kind Kind
	}{
		{"plain", PlainLock}, {"fair", FairLock}, {"reentrant", ReentrantLock},
	} {
		k := KeysFor("dlock:", "refused-"+n.name)
		mine, theirs := &Claim{Keys: k, Kind: n.kind}, &Claim{Keys: k, Kind: n.kind}
		if n.kind == ReentrantLock {
			mine.Holder, theirs.Holder = "client/a", "client/b"
		}
		mine.SetToken("tok-mine.host%3A1")
		theirs.SetToken("tok-theirs")
		if g, err := node.Acquire(ctx, mine, time.Second, false); err != nil || !g.Held {
			t.Fatalf("%s: acquire = %+v, %v", n.name, g, err)
		}
		g, err := node.Acquire(ctx, theirs, time.Second, false)
		if owner, _ := g.Extra.(Owner); err != nil || g.Held || g.Holder != mine.Token || g.PTTL <= 0 || string(owner) != mine.Holder {
			t.Errorf("%s: refused acquire = %+v, %v; want the holder %q, owner %q and its PTTL", n.name, g, err, mine.Token, mine.Holder)
		}
	}
	// Fair: a free lock with a live waiter queued is handed to the waiter,
	// and the refusal names it.
	fair := node
	k := KeysFor("dlock:", "handed")
	holder, waiter, late := &Claim{Keys: k, Kind: FairLock}, &Claim{Keys: k, Kind: FairLock}, &Claim{Keys: k, Kind: FairLock}
	holder.SetToken("holder")
	waiter.SetToken("waiter.w")
	late.SetToken("late")
	fair.Acquire(ctx, holder, time.Second, false)
	if g, _ := fair.Acquire(ctx, waiter, time.Second, true); g.Held {
		t.Fatal("the waiter took a held lock")
	}
	rdb.Del(ctx, k.Lock) // the holder's lease ran out without a release
	if g, err := fair.Acquire(ctx, late, time.Second, false); err != nil || g.Held || g.Holder != waiter.Token {
		t.Errorf("acquire of a free lock with a queued waiter = %+v, %v; want refused, naming the waiter it was handed to", g, err)
	}
}

// An unfair waiter refused by a lease without expiry sets the wake key for
// WakeWindow, which acquire.lua writes as a literal: the two agree.
func TestUnfairWaitersWakeKeyLivesTheWakeWindow(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	ctx := t.Context()
	k := KeysFor("dlock:", "wake-window")
	waiter := &Claim{Keys: k, Kind: PlainLock}
	waiter.SetToken("waiter")
	rdb.Set(ctx, k.Lock, "holder", 0)
	if g, err := NewNode(rdb, Config{}).Acquire(ctx, waiter, time.Second, true); err != nil || g.Held {
		t.Fatalf("acquire behind a held lock = %+v, %v, want refused", g, err)
	}
	if d := rdb.PTTL(ctx, k.Wake).Val(); d <= WakeWindow-5*time.Second || d > WakeWindow {
		t.Errorf("the wake key lives %v, want WakeWindow (%v)", d, WakeWindow)
	}
}

// A Lua error in a script is told as a script that failed, a defect of
// dlock's, with Redis's reply kept in the chain; Redis's own errors, such as
// NOSCRIPT, pass as they are.
func TestLuaErrorIsToldAsAScriptFailure(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	rdb := s.Client(t)
	ctx := t.Context()
	lua := RedisErr(rdb.Eval(ctx, "local t = {} for i = 1, 9000 do t[i] = i end return redis.call(unpack(t))", nil).Err())
	var reply redis.Error
	if lua == nil || !strings.HasPrefix(lua.Error(), "script failed in Redis, a defect of dlock: ") || !errors.As(lua, &reply) {
		t.Errorf("RedisErr(a Lua error) = %v, want a script failure that keeps the reply", lua)
	}
	if strings.Contains(lua.Error(), " script: ") {
		t.Errorf("RedisErr(a Lua error) = %q, want it without the script's digest", lua)
	}
	noScript := rdb.EvalSha(ctx, strings.Repeat("0", 40), nil).Err()
	if err := RedisErr(noScript); err != noScript {
		t.Errorf("RedisErr(%v) = %v, want it unchanged", noScript, err)
	}
}

// A kind's own operation runs on a Node, whose result OpValue returns as
// its type; a quorum and a script-free backend refuse every one alike,
// without running it (OpValue: the zero value).
func TestKindOpsRunOnANodeAndAreRefusedElsewhere(t *testing.T) {
	t.Parallel()
	n := NewNode(nil, Config{TTL: time.Second})
	ran := 0
	op := func(context.Context, Node) (any, error) { ran++; return ran, nil }
	if v, err := OpValue[int](t.Context(), n, op); err != nil || ran != 1 || v != 1 {
		t.Errorf("OpValue(Node) = %v, %v after %d runs, want 1, nil after 1", v, err, ran)
	}
	for _, tc := range []struct {
		name string
		b    Backend
		want error
	}{
		{"quorum", NewQuorum([]Node{n, n, n}, time.Second, new(Tracker)), ErrOverQuorum},
		{"no scripts", NoScripts{n}, ErrNeedsScripts},
	} {
		ran = 0
		if v, err := OpValue[int](t.Context(), tc.b, op); !errors.Is(err, tc.want) || ran != 0 || v != 0 {
			t.Errorf("%s: OpValue = %v, %v after %d runs, want 0, %v unrun", tc.name, v, err, ran, tc.want)
		}
	}
}

// OpValue allocates nothing of its own: a bool result comes back without a
// heap box, so a kind's own operation that reports a bool costs its
// closure only.
//
// Serial: it counts the process's allocations.
func TestOpValueAllocatesNothingOfItsOwn(t *testing.T) {
	var b Backend = NewNode(nil, Config{TTL: time.Second})
	op := func(context.Context, Node) (any, error) { return true, nil }
	ctx := t.Context()
	if n := testing.AllocsPerRun(100, func() { OpValue[bool](ctx, b, op) }); n != 0 {
		t.Errorf("OpValue[bool] makes %v allocations, want 0", n)
	}
}

// Prepare loads hold_downgrade.lua for a read-write lock's holds, which
// may Downgrade, and not for a semaphore's permits; every kind loads the
// script its acquisition runs, and each script a Node loads has its bit.
func TestOnlyReadWriteHoldsLoadTheDowngradeScript(t *testing.T) {
	t.Parallel()
	down := setOf(holdDowngrade)
	if down == 0 || len(loadable) > 64 { // (a scriptSet's bits)
		t.Fatalf("hold_downgrade.lua has no bit (%d scripts loadable)", len(loadable))
	}
	for _, k := range []Kind{PlainLock, FairLock, ReentrantLock, Campaign, Permits(3, 1), Permits(3, 2), Read, Write, Downgrading} {
		first, need := k.scripts()
		if setOf(first)&need == 0 {
			t.Errorf("%s: Prepare does not load the acquisition's script %s", k.what(), first.Name())
		}
		if _, rw := k.(rwHold); (need&down != 0) != rw {
			t.Errorf("%s: Prepare loads hold_downgrade.lua: %v, want %v", k.what(), need&down != 0, rw)
		}
	}
}

// The scripts every kind shares look the lock key's type up in the Lua
// types table by the name a kind's shape sends (fence.lua, raise_fence.lua,
// fence_current.lua): each kind's shape has its type file, so that each
// answers a free name with 0, never a Lua error, and no type file is of a
// type no kind keeps (inspect.lua and force_release.lua would read a key
// of it as a dlock lock).
func TestSharedScriptsKnowExactlyTheTypesTheKindsKeep(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	ctx := t.Context()
	k := KeysFor("dlock:", "types")
	kept := map[string]bool{}
	for _, kind := range []Kind{PlainLock, FairLock, ReentrantLock, Campaign, Permits(3, 1), Permits(3, 2), Read, Write, Downgrading} {
		typ := kind.shape().typ
		kept[typ] = true
		for _, run := range []struct {
			s    *script.Script
			keys []string
			args []any
		}{
			{script.Fence, []string{k.Lock, k.Fence, k.Lock + ":r:t"}, []any{"t", 1000, typ, ""}},
			{script.RaiseFence, []string{k.Lock, k.Fence, k.Lock + ":r:t"}, []any{5, "t", 1000, typ, ""}},
			{fenceCurrent, []string{k.Lock, k.Fence}, []any{"t", 5, typ}},
		} {
			if got, err := run.s.Run(ctx, rdb, run.keys, run.args...).Int64(); got != 0 || err != nil {
				t.Errorf("%s, for %s (a %s) at a free name = %d, %v, want 0", run.s.Name(), kind.what(), typ, got, err)
			}
		}
	}
	registered := regexp.MustCompile(`\ntypes\.(\w+) = {}\n`)
	for _, s := range []*script.Script{script.Inspect, script.ForceRelease, script.Fence, script.RaiseFence, fenceCurrent} {
		ms := registered.FindAllStringSubmatch(s.Source(), -1)
		if len(ms) == 0 {
			t.Errorf("%s has no type's table", s.Name())
		}
		for _, m := range ms {
			if !kept[m[1]] {
				t.Errorf("%s has the functions of the type %s, which no kind keeps", s.Name(), m[1])
			}
		}
	}
}
