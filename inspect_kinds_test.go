package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dlockio/dlock"
	"github.com/redis/go-redis/v9"
)

// inspectCase puts one kind of holding at the lock name (its key: key).
type inspectCase struct {
	name string
	info string // what Inspect reads: Held Type Meta, and the numbers of Owners, Permits and RWHolds
	set  func(t *testing.T, ctx context.Context, c *dlock.Client, rdb *redis.Client, name, key string)
}

func inspectCases() []inspectCase {
	meta := dlock.HolderMeta("m1")
	rw := func(write bool) func(t *testing.T, ctx context.Context, c *dlock.Client, _ *redis.Client, name, _ string) {
		return func(t *testing.T, ctx context.Context, c *dlock.Client, _ *redis.Client, name, _ string) {
			side := newRW(t, c, name).Reader()
			if write {
				side = newRW(t, c, name).Writer()
			}
			taken(t)(side.TryAcquire(ctx, meta))
			if !write {
				taken(t)(side.TryAcquire(ctx, dlock.HolderMeta("m2")))
			}
		}
	}
	foreign := func(f func(ctx context.Context, rdb *redis.Client, key string) error) func(t *testing.T, ctx context.Context, _ *dlock.Client, rdb *redis.Client, _, key string) {
		return func(t *testing.T, ctx context.Context, _ *dlock.Client, rdb *redis.Client, _, key string) {
			if err := f(ctx, rdb, key); err != nil {
				t.Fatal(err)
			}
		}
	}
	return []inspectCase{
		{"free", "false none  0 0 0", func(*testing.T, context.Context, *dlock.Client, *redis.Client, string, string) {}},
		{"plain", "true string m1 0 0 0", func(t *testing.T, ctx context.Context, c *dlock.Client, _ *redis.Client, name, _ string) {
			taken(t)(c.TryAcquire(ctx, name, meta))
		}},
		{"reentrant", "true hash m1 1 0 0", func(t *testing.T, ctx context.Context, _ *dlock.Client, rdb *redis.Client, name, _ string) {
			r := newClient(t, rdb, dlock.WithReentrant(true), dlock.LeaseTTL(time.Minute))
			taken(t)(asOwner(t, r, "alice").TryAcquire(ctx, name, meta))
		}},
		{"leader", "true string v2 0 0 0", func(t *testing.T, ctx context.Context, c *dlock.Client, _ *redis.Client, name, _ string) {
			ld, err := newElection(t, c, name).Campaign(ctx, "v1")
			if err != nil {
				t.Fatal(err)
			}
			if err := ld.Proclaim(ctx, "v2"); err != nil {
				t.Fatal(err)
			}
		}},
		{"semaphore", "true zset m1, m2 0 2 0", func(t *testing.T, ctx context.Context, c *dlock.Client, _ *redis.Client, name, _ string) {
			s := newSemaphore(t, c, name, 3)
			taken(t)(s.AcquireN(ctx, 2, meta))
			taken(t)(s.TryAcquire(ctx, dlock.HolderMeta("m2")))
		}},
		{"readers", "true zset m1, m2 0 0 2", rw(false)},
		{"writer", "true zset m1 0 0 1", rw(true)},
		{"lapsed", "true zset  0 0 0", foreign(func(ctx context.Context, rdb *redis.Client, key string) error {
			return rdb.ZAdd(ctx, key, redis.Z{Score: 1, Member: "r:gone"}).Err() // (a hold whose deadline passed long ago)
		})},
		{"string", "true string  0 0 0", foreign(func(ctx context.Context, rdb *redis.Client, key string) error { return rdb.Set(ctx, key, "x", 0).Err() })},
		{"list", "true list  0 0 0", foreign(func(ctx context.Context, rdb *redis.Client, key string) error { return rdb.LPush(ctx, key, "x").Err() })},
		{"set", "true set  0 0 0", foreign(func(ctx context.Context, rdb *redis.Client, key string) error { return rdb.SAdd(ctx, key, "x").Err() })},
		{"hash", "true hash  0 0 0", foreign(func(ctx context.Context, rdb *redis.Client, key string) error {
			return rdb.HSet(ctx, key, "f", "v").Err()
		})},
		{"owner's holds lapsed", "true hash  1 0 0", foreign(func(ctx context.Context, rdb *redis.Client, key string) error {
			return rdb.HSet(ctx, key, "owner", "c/alice", "fence", "1", "h:gone", "1").Err() // (a hold whose deadline passed long ago)
		})},
		{"mixed zset", "true zset  0 2 0", foreign(func(ctx context.Context, rdb *redis.Client, key string) error {
			return rdb.ZAdd(ctx, key, redis.Z{Score: 1e15, Member: "r:a"}, redis.Z{Score: 1e15, Member: "x"}).Err()
		})},
		{"zset", "true zset  0 1 0", foreign(func(ctx context.Context, rdb *redis.Client, key string) error {
			return rdb.ZAdd(ctx, key, redis.Z{Score: 1e15, Member: "x"}).Err()
		})},
	}
}

// shape is info with its lease times reduced to their sign: what two
// reads a moment apart agree on.
func shape(info dlock.Info) dlock.Info {
	sign := func(d time.Duration) time.Duration { return time.Duration(min(max(d, -1), 1)) }
	info.TTL = sign(info.TTL)
	for i := range info.Permits {
		info.Permits[i].TTL = sign(info.Permits[i].TTL)
	}
	for i := range info.RWHolds {
		info.RWHolds[i].TTL = sign(info.RWHolds[i].TTL)
	}
	return info
}

// A Client made WithoutScripts reads every kind of lock, and every value
// of another program, as a scripted one does: Inspect's Info, List's, and
// ForceRelease's refusal of a value it may not delete.
func TestInspectWithoutScriptsReadsEveryKindAsScriptsDo(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.LeaseTTL(time.Minute))
	ns := newClient(t, rdb, dlock.WithoutScripts())
	for _, tc := range inspectCases() {
		name := "ik-" + tc.name
		tc.set(t, ctx, c, rdb, name, "dlock:{"+name+"}")
		want, err := c.Inspect(ctx, name)
		if err != nil {
			t.Fatalf("%s: Inspect: %v", tc.name, err)
		}
		if got := fmt.Sprintf("%v %s %s %d %d %d", want.Held, want.Type, want.Meta, len(want.Owners), len(want.Permits), len(want.RWHolds)); got != tc.info {
			t.Errorf("%s: Inspect = %s; want %s", tc.name, got, tc.info)
		}
		got, err := ns.Inspect(ctx, name)
		if err != nil || fmt.Sprintf("%+v", shape(got)) != fmt.Sprintf("%+v", shape(want)) {
			t.Errorf("%s: Inspect WithoutScripts = %+v, %v; want %+v", tc.name, shape(got), err, shape(want))
		}
		// ForceRelease alike, each on a copy of its own.
		var force [2]string
		for i, fc := range []*dlock.Client{c, ns} {
			copyName := fmt.Sprintf("ikf%d-%s", i, tc.name)
			tc.set(t, ctx, c, rdb, copyName, "dlock:{"+copyName+"}")
			ok, err := fc.ForceRelease(ctx, copyName)
			force[i] = fmt.Sprintf("%v %v %v", ok, strings.ReplaceAll(fmt.Sprint(err), copyName, "NAME"), errors.Is(err, dlock.ErrWrongType))
		}
		if force[1] != force[0] {
			t.Errorf("%s: ForceRelease WithoutScripts = %s; want %s", tc.name, force[1], force[0])
		}
	}
	want, err := c.List(ctx, "ik-*")
	if err != nil {
		t.Fatal(err)
	}
	got, err := ns.List(ctx, "ik-*")
	if err != nil || len(got) != len(want) {
		t.Fatalf("List WithoutScripts = %d locks, %v; want %d", len(got), err, len(want))
	}
	for i := range want {
		if g, w := fmt.Sprintf("%+v", shape(got[i])), fmt.Sprintf("%+v", shape(want[i])); g != w {
			t.Errorf("List WithoutScripts [%d] = %s; want %s", i, g, w)
		}
	}
}

// Semaphore.Holders and RWMutex.Holders list the holds of their own kind
// only: a name held as the other one, as another kind of lock or by
// another program's value is refused with ErrWrongType, saying what holds
// it; a free name, and a sorted set whose holds all lapsed, have none.
func TestHoldersRefuseANameHeldAsAnotherKindSayingWhat(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.LeaseTTL(time.Minute))
	// What each Holders says: "" for no error, else the error's text after
	// the name (the same for both unless semaphore differs).
	type says struct{ semaphore, rw string }
	lock := func(typ string) says {
		return says{"held as a lock (a " + typ + "), not a semaphore", "held as a lock (a " + typ + "), not a read-write lock"}
	}
	want := map[string]says{
		"free":                 {},
		"plain":                lock("string"),
		"reentrant":            lock("hash"),
		"semaphore":            {"", "held as a semaphore, not a read-write lock"},
		"readers":              {"held as a read-write lock, not a semaphore", ""},
		"writer":               {"held as a read-write lock, not a semaphore", ""},
		"lapsed":               {},
		"string":               lock("string"),
		"list":                 lock("list"),
		"set":                  lock("set"),
		"hash":                 lock("hash"),
		"leader":               lock("string"),
		"owner's holds lapsed": lock("hash"),
		"mixed zset":           {"", "held as a semaphore, not a read-write lock"}, // (a member not marked as a hold: permits)
		"zset":                 {"", "held as a semaphore, not a read-write lock"}, // (another program's members read as permits)
	}
	for _, tc := range inspectCases() {
		if _, ok := want[tc.name]; !ok {
			t.Fatalf("%s: no Holders outcome given for this case", tc.name)
		}
		name := "hk-" + tc.name
		tc.set(t, ctx, c, rdb, name, "dlock:{"+name+"}")
		info, err := c.Inspect(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		ps, perr := newSemaphore(t, c, name, 3).Holders(ctx)
		hs, herr := newRW(t, c, name).Holders(ctx)
		check := func(what string, n int, err error, want string, live int) {
			t.Helper()
			switch {
			case want == "" && (err != nil || n != live):
				t.Errorf("%s: %s.Holders = %d, %v; want %d, no error", tc.name, what, n, err, live)
			case want != "" && (!errors.Is(err, dlock.ErrWrongType) || n != 0 ||
				err.Error() != fmt.Sprintf("dlock: inspect %q: lock key holds a value of another type: the name is %s", name, want)):
				t.Errorf("%s: %s.Holders = %d, %v; want ErrWrongType: %s", tc.name, what, n, err, want)
			}
		}
		check("Semaphore", len(ps), perr, want[tc.name].semaphore, len(info.Permits))
		check("RWMutex", len(hs), herr, want[tc.name].rw, len(info.RWHolds))
	}
}

// Election.Leader reads a name held as another kind, or by another
// program's value of a type other than a string, as no leadership: it is
// refused with ErrWrongType, saying what keeps a key of that type.
func TestLeaderRefusesANameHeldAsAnotherKindSayingWhat(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb, dlock.LeaseTTL(time.Minute))
	const zset = "a semaphore or a read-write lock"
	want := map[string]string{ // "" for no error, else what the name is held as
		"free": "", "leader": "", "plain": "a lock", "string": "a lock", // (a leader's token carries its kind's mark)
		"reentrant": "a reentrant lock", "hash": "a reentrant lock", "owner's holds lapsed": "a reentrant lock",
		"semaphore": zset, "readers": zset, "writer": zset, "lapsed": zset, "mixed zset": zset, "zset": zset,
		"list": "a list", "set": "a set",
	}
	for _, tc := range inspectCases() {
		as, ok := want[tc.name]
		if !ok {
			t.Fatalf("%s: no Leader outcome given for this case", tc.name)
		}
		name := "lk-" + tc.name
		tc.set(t, ctx, c, rdb, name, "dlock:{"+name+"}")
		_, err := newElection(t, c, name).Leader(ctx)
		switch {
		case as == "" && err != nil:
			t.Errorf("%s: Leader = %v; want no error", tc.name, err)
		case as != "" && (!errors.Is(err, dlock.ErrWrongType) ||
			err.Error() != fmt.Sprintf("dlock: leader %q: lock key holds a value of another type: the name is held as %s, not by a leader", name, as)):
			t.Errorf("%s: Leader = %v; want ErrWrongType: held as %s", tc.name, err, as)
		}
	}
}
