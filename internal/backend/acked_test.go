package backend

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/internal/leakcheck"
	"github.com/dlockio/dlock/internal/redistest"
	"github.com/dlockio/dlock/internal/script"
)

// commandCalls returns the calls=N of cmd ("evalsha", "script|load") in
// the server's commandstats, 0 if it never ran.
func commandCalls(t *testing.T, rdb *redis.Client, cmd string) string {
	t.Helper()
	info, err := rdb.Info(t.Context(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	_, v, ok := strings.Cut(info, "cmdstat_"+cmd+":calls=")
	if !ok {
		return "0"
	}
	v, _, _ = strings.Cut(v, ",")
	return v
}

// A call with both acknowledgements on (WAIT, then WAITAOF) that meets
// NOSCRIPT loads the scripts back in the pipeline of its second try and
// counts the acknowledgements of that try, the append-only file's and the
// replicas' (none here), past the loads sent before them.
func TestAckedAfterScriptFlushCountsBothAcknowledgementsPastTheLoads(t *testing.T) {
	t.Parallel()
	leakcheck.Check(t)
	s := redistest.Start(t, redistest.Valkey(t), redistest.Args("--appendonly", "yes", "--appendfsync", "everysec"))
	rdb := s.Client(t)
	ctx := t.Context()
	n := NewNode(rdb, Config{TTL: time.Second, Replicas: 1, AckTimeout: 10 * time.Millisecond, Durable: 5 * time.Second})
	if err := rdb.ScriptLoad(ctx, script.Inspect.Source()).Err(); err != nil {
		t.Fatal(err)
	}
	n.caches.loaded.Store(uint64(setOf(script.Inspect))) // (as a Prepare would have)
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	_, acks, err := n.acked(ctx, script.Uptime, ErrNotAcquired, []any{"acked"})
	if err != nil {
		t.Fatalf("acked after SCRIPT FLUSH = %v", err)
	}
	if acks != 1 {
		t.Errorf("acks = %d, want 1: the append-only file's, no replica's", acks)
	}
	if got, want := scriptSet(n.caches.loaded.Load()), setOf(script.Inspect, script.Uptime); got != want {
		t.Errorf("scripts known loaded = %b, want %b (those loaded before, and the call's)", got, want)
	}
	if got := commandCalls(t, rdb, "script|load"); got != "3" { // (the first load, then two with the call)
		t.Errorf("SCRIPT LOAD ran %s times, want 3", got)
	}
	for _, name := range []string{"wait", "waitaof"} {
		if got := commandCalls(t, rdb, name); got != "2" {
			t.Errorf("%s ran %s times, want 2 (once with each try)", name, got)
		}
	}
}

// The second try of a call with the replicas' acknowledgement, after a
// NOSCRIPT (SCRIPT LOAD, EVALSHA and WAIT in one pipeline), is not sent
// again by go-redis when its request is lost, even with retries on: the
// script may have run.
func TestAckedRerunAfterNOSCRIPTIsNeverSentTwice(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t, redistest.TCP())
	direct := s.Client(t)
	ctx := t.Context()
	loser := redistest.NewLoser("script", "evalsha", "wait")
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr(), Dialer: loser.Dial, MaxRetries: 3})
	t.Cleanup(func() { rdb.Close() })
	n := NewNode(rdb, Config{TTL: time.Second, Replicas: 1, AckTimeout: 10 * time.Millisecond})
	loser.Arm()
	_, acks, err := n.acked(ctx, script.Uptime, ErrNotAcquired, []any{"acked"})
	if got := loser.Lost(); got != 1 {
		t.Fatalf("%d pipelines of SCRIPT LOAD, EVALSHA and WAIT lost, want the second try's (err %v)", got, err)
	}
	if !ReplyLost(err) || acks != 0 {
		t.Errorf("acked = %v with %d acks, want a lost reply and none", err, acks)
	}
	if got := commandCalls(t, direct, "script|load"); got != "0" {
		t.Errorf("the server ran SCRIPT LOAD %s times: go-redis sent the lost pipeline again", got)
	}
	if got := commandCalls(t, direct, "evalsha"); got != "1" {
		t.Errorf("the server ran EVALSHA %s times, want the first try's alone", got)
	}
}

// A server that refuses SCRIPT LOAD (an ACL) gets, after the NOSCRIPT of a
// call with the replicas' acknowledgement and the refused load, the script
// with EVAL: three tries, the load asked once, and each acknowledged; a
// later NOSCRIPT (the cache flushed again) goes to EVAL at once.
func TestAckedOnAServerRefusingScriptLoadSendsEVAL(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	admin := s.Client(t)
	ctx := t.Context()
	rdb := noLoadClient(t, s)
	n := NewNode(rdb, Config{TTL: time.Second, Replicas: 1, AckTimeout: 10 * time.Millisecond})
	for i := range 2 {
		_, acks, err := n.acked(ctx, script.Uptime, ErrNotAcquired, []any{"acked"})
		if err != nil || acks != 0 {
			t.Fatalf("call %d: acked = %v with %d acks, want a reply and no replica's", i, err, acks)
		}
		if err := admin.ScriptFlush(ctx).Err(); err != nil { // (EVAL cached the script)
			t.Fatal(err)
		}
	}
	if !n.caches.refused.Load() {
		t.Error("the refusal of SCRIPT LOAD was not noted")
	}
	for name, want := range map[string]string{"evalsha": "3", "eval": "2", "wait": "5"} { // (the second call asks for no load)
		if got := commandCalls(t, admin, name); got != want {
			t.Errorf("%s ran %s times, want %s", name, got, want)
		}
	}
	if got := commandCalls(t, admin, "script|load"); got != "0" { // (refused before it runs)
		t.Errorf("SCRIPT LOAD ran %s times, want 0", got)
	}
}

// A call with the replicas' acknowledgement through a closed go-redis
// client returns go-redis's own error, as it is, with no acknowledgement.
func TestAckedOnAClosedClientIsGoRedisErrClosed(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	rdb := s.Client(t)
	n := NewNode(rdb, Config{TTL: time.Second, Replicas: 1, AckTimeout: 10 * time.Millisecond})
	rdb.Close()
	_, acks, err := n.acked(t.Context(), script.Uptime, ErrNotAcquired, []any{"acked"})
	if !errors.Is(err, redis.ErrClosed) || err.Error() != redis.ErrClosed.Error() || acks != 0 {
		t.Errorf("acked = %v with %d acks, want %v and none", err, acks, redis.ErrClosed)
	}
}

// Scan sends a SCAN again after its request is lost with its connection,
// as go-redis does a read when its retries are on.
func TestScanIsSentAgainAfterALostRequest(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t, redistest.TCP())
	direct := s.Client(t)
	ctx := t.Context()
	if err := direct.Set(ctx, "dlock:{scan}", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	loser := redistest.NewLoser("scan")
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr(), Dialer: loser.Dial, MaxRetries: 3})
	t.Cleanup(func() { rdb.Close() })
	for _, b := range []interface {
		Scan(context.Context, string) ([]string, error)
	}{NewNode(rdb, Config{}), NoScripts{NewNode(rdb, Config{})}} {
		lost := loser.Lost()
		loser.Arm()
		keys, err := b.Scan(ctx, "dlock:*")
		if lost = loser.Lost() - lost; err != nil || !slices.Equal(keys, []string{"dlock:{scan}"}) || lost != 1 {
			t.Errorf("%T: Scan = %q, %v after %d lost requests, want the key after one, sent again", b, keys, err, lost)
		}
	}
}

// A call with the replicas' acknowledgement whose slot moved to another
// master since the client last looked meets MOVED, reloads the slot map,
// and runs on the new master, which lacks the script: it loads it there
// in the pipeline of its next try.
func TestAckedAfterItsSlotMovedRunsOnTheNewMaster(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds a Redis Cluster")
	}
	nodes := redistest.StartCluster(t, 3, 0)
	ctx := t.Context()
	var addrs []string
	for _, s := range nodes {
		addrs = append(addrs, s.Addr())
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { cc.Close() })
	n := NewNode(cc, Config{TTL: time.Second, Replicas: 1, AckTimeout: 10 * time.Millisecond})
	const key = "dlock:{moved}"
	if _, _, err := n.acked(ctx, script.Uptime, ErrNotAcquired, []any{key}); err != nil {
		t.Fatal(err)
	}
	src, err := cc.MasterForKey(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	var dst *redistest.Server
	for _, s := range nodes {
		if s.Addr() != src.Options().Addr {
			dst = s
		}
	}
	id, err := dst.Do(ctx, "CLUSTER", "MYID")
	if err != nil {
		t.Fatal(err)
	}
	slot := cc.ClusterKeySlot(ctx, key).Val()
	for _, s := range nodes { // (the slot holds no key: it moves at once)
		if _, err := s.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", id); err != nil {
			t.Fatal(err)
		}
	}
	_, acks, err := n.acked(ctx, script.Uptime, ErrNotAcquired, []any{key})
	if err != nil || acks != 0 {
		t.Fatalf("acked after its slot moved = %v with %d acks, want a reply and no replica's", err, acks)
	}
	moved, err := src.Info(ctx, "errorstats").Result()
	if err != nil || !strings.Contains(moved, "errorstat_MOVED:count=") {
		t.Errorf("the old master answered no MOVED (%v):\n%s", err, moved)
	}
	direct := redis.NewClient(&redis.Options{Addr: dst.Addr()})
	t.Cleanup(func() { direct.Close() })
	if got := commandCalls(t, direct, "evalsha"); got != "2" { // (NOSCRIPT, then with the load)
		t.Errorf("the new master ran EVALSHA %s times, want 2", got)
	}
	if got := commandCalls(t, direct, "script|load"); got != "1" {
		t.Errorf("the new master ran SCRIPT LOAD %s times, want 1", got)
	}
}

// A Downgrade through a closed go-redis client sent nothing: the hold
// stays a write, not one whose downgrade has an unknown outcome.
func TestDowngradeOnAClosedClientLeavesTheHoldAWrite(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	rdb := s.Client(t)
	n := NewNode(rdb, Config{TTL: time.Second})
	c := &Claim{Keys: KeysFor("dlock:", "closed-downgrade"), Kind: Write}
	c.SetToken("tok")
	rdb.Close()
	if ok, err := n.Downgrade(t.Context(), c); ok || !errors.Is(err, redis.ErrClosed) {
		t.Errorf("Downgrade through a closed client = %v, %v, want false, %v", ok, err, redis.ErrClosed)
	}
	if c.Kind != Write {
		t.Errorf("the hold after a Downgrade through a closed client is %s (%v), want a write", c.Kind.what(), c.Kind)
	}
}
