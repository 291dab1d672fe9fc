package dlockrueidis

import (
	"context"
	"errors"
	"io"
	"net"
	"reflect"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/dlockio/dlock/driver"
	"github.com/dlockio/dlock/internal/leakcheck"
	"github.com/dlockio/dlock/internal/redistest"
)

func client(t testing.TB, addrs ...string) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// Script replies of every shape become the driver's values, and error
// replies driver.Errors with their codes.
func TestScriptRepliesBecomeDriverValues(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t, redistest.TCP())
	conn := Conn(client(t, s.Addr()))
	ctx := ctxT(t, 10*time.Second)
	if info := conn.Info(); info != (driver.Info{}) {
		t.Fatalf("Info = %+v", info)
	}
	eval := func(script string, args ...any) (any, error) {
		return conn.Do(ctx, append([]any{"EVAL", script, 1, "k"}, args...)...)
	}
	for _, tc := range []struct {
		script string
		want   any
	}{
		{"return 42", int64(42)},
		{"return -7", int64(-7)},
		{"return 3.7", int64(3)},
		{"return 'hi'", "hi"},
		{"return ''", ""},
		{"return ARGV[1]", "\x00bin\xff"},
		{"return false", nil},
		{"return nil", nil},
		{"return true", int64(1)},
		{"return redis.status_reply('PONG')", "PONG"},
		{"return {}", []any{}},
		{"return {1, 'a', {2, false, 'b', {}}}", []any{int64(1), "a", []any{int64(2), nil, "b", []any{}}}},
		{"return {1, redis.error_reply('E1 inner')}", []any{int64(1), driver.Error("E1 inner")}},
		{"return redis.call('GET', KEYS[1])", nil},
	} {
		got, err := eval(tc.script, []byte("\x00bin\xff"))
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: got %#v, %v; want %#v", tc.script, got, err, tc.want)
		}
	}
	for _, tc := range []struct {
		script string
		prefix string
	}{
		{"return redis.error_reply('MYERR boom')", "MYERR boom"},
		{"return redis.error_reply('DLOCK_RANGE 5')", "DLOCK_RANGE 5"},
		{"error('boom')", "ERR user_script:1: boom"},
		{"return redis.call('NOSUCHCOMMAND')", "ERR "},
		{"return redis.call('ZRANGE', KEYS[1], 0, -1)", "WRONGTYPE "},
	} {
		if _, err := conn.Do(ctx, "SET", "k", "v"); err != nil {
			t.Fatal(err)
		}
		_, err := eval(tc.script)
		var de driver.Error
		if !errors.As(err, &de) || !strings.HasPrefix(string(de), tc.prefix) {
			t.Errorf("%s: err %#v, want a driver.Error starting with %q", tc.script, err, tc.prefix)
		}
	}
}

// Plain commands take every argument type the library sends, refuse a
// float, and scripts run by digest: NOSCRIPT, then SCRIPT LOAD and EVALSHA.
func TestCommandsTakeArgumentsAndScriptsByDigest(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t, redistest.TCP())
	conn := Conn(client(t, s.Addr()))
	ctx := ctxT(t, 10*time.Second)
	if _, err := conn.Do(ctx, "SET", "k", "v"); err != nil {
		t.Fatal(err)
	}
	name := "k2"
	if v, err := conn.Do(ctx, "SET", &name, int64(5)); err != nil || v != "OK" {
		t.Fatalf("SET: %#v, %v", v, err)
	}
	if v, err := conn.Do(ctx, "GET", name); err != nil || v != "5" {
		t.Fatalf("GET: %#v, %v", v, err)
	}
	if v, err := conn.Do(ctx, "TYPE", "k2"); err != nil || v != "string" {
		t.Fatalf("TYPE: %#v, %v", v, err)
	}
	if v, err := conn.Do(ctx, "SCAN", 0, "MATCH", "k*", "COUNT", 100); err != nil || len(v.([]any)) != 2 {
		t.Fatalf("SCAN: %#v, %v", v, err)
	}
	if v, err := conn.Do(ctx, "ZRANGE", "nokey", 0, -1); err != nil || !reflect.DeepEqual(v, []any{}) {
		t.Fatalf("ZRANGE: %#v, %v", v, err)
	}
	if _, err := conn.Do(ctx, "GET", 1.5); err == nil {
		t.Fatal("a float argument was accepted")
	}
	if _, err := conn.Do(ctx, "SUBSCRIBE", "x"); err == nil {
		t.Fatal("SUBSCRIBE through Do was accepted")
	}
	_, err := conn.Do(ctx, "EVALSHA", "ffffffffffffffffffffffffffffffffffffffff", 0)
	var de driver.Error
	if !errors.As(err, &de) || !strings.HasPrefix(string(de), "NOSCRIPT") {
		t.Fatalf("EVALSHA of an unknown script: %#v", err)
	}
	sha, err := conn.Do(ctx, "SCRIPT", "LOAD", "return redis.call('INCR', KEYS[1])")
	if err != nil {
		t.Fatal(err)
	}
	if v, err := conn.Do(ctx, "EVALSHA", sha, 1, "n"); err != nil || v != int64(1) {
		t.Fatalf("EVALSHA: %#v, %v", v, err)
	}
}

func TestRestoreCodeAddsERRToUncodedErrors(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"NOSCRIPT No matching script. Please use EVAL.": "NOSCRIPT No matching script. Please use EVAL.",
		"Error running script":                          "ERR Error running script",
		"user_script:1: boom":                           "ERR user_script:1: boom",
		"WRONGTYPE Operation against a key":             "WRONGTYPE Operation against a key",
		"x":                                             "ERR x",
	} {
		if got := restoreCode(in); got != want {
			t.Errorf("restoreCode(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestDoMultiAnswersEachCommand(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t, redistest.TCP())
	conn := Conn(client(t, s.Addr()))
	ctx := ctxT(t, 10*time.Second)
	rs := conn.DoMulti(ctx,
		[]any{"SET", "a", "1"},
		[]any{"EVAL", "return redis.call('INCR', KEYS[1])", 1, "a"},
		[]any{"GET", 3.5},
		[]any{"EVAL", "return redis.error_reply('BAD x')", 0},
		[]any{"GET", "a"},
		[]any{"GET", "missing"},
	)
	if len(rs) != 6 {
		t.Fatalf("%d results", len(rs))
	}
	want := []any{"OK", int64(2), nil, nil, "2", nil}
	for i, r := range rs {
		if i == 2 || i == 3 {
			continue
		}
		if r.Err != nil || !reflect.DeepEqual(r.Val, want[i]) {
			t.Errorf("result %d: %#v, %v; want %#v", i, r.Val, r.Err, want[i])
		}
	}
	if rs[2].Err == nil {
		t.Error("a float argument was accepted")
	}
	if rs[3].Err != driver.Error("BAD x") {
		t.Errorf("result 3: %#v", rs[3].Err)
	}
	if rs := conn.DoMulti(ctx); len(rs) != 0 {
		t.Fatalf("no commands: %v", rs)
	}
}

func TestClosedClientFailsWithErrClosed(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t, redistest.TCP())
	c := client(t, s.Addr())
	conn := Conn(c)
	c.Close()
	ctx := ctxT(t, 10*time.Second)
	if _, err := conn.Do(ctx, "PING"); !errors.Is(err, driver.ErrClosed) {
		t.Fatalf("Do on a closed client: %v", err)
	}
	if rs := conn.DoMulti(ctx, []any{"PING"}); !errors.Is(rs[0].Err, driver.ErrClosed) {
		t.Fatalf("DoMulti on a closed client: %v", rs[0].Err)
	}
}

// TestDeadServerFailsWithDialError: once the server is gone, a command fails to connect with a
// dial *net.OpError (a command that never left).
func TestDeadServerFailsWithDialError(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t, redistest.TCP())
	conn := Conn(client(t, s.Addr()))
	ctx := ctxT(t, 10*time.Second)
	if _, err := conn.Do(ctx, "PING"); err != nil {
		t.Fatal(err)
	}
	s.Kill()
	var errs []error
	for range 20 {
		_, err := conn.Do(ctx, "PING")
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" {
			return
		}
		var nerr net.Error
		if !errors.Is(err, io.EOF) && !errors.As(err, &nerr) && !errors.Is(err, driver.ErrClosed) {
			t.Fatalf("not a network error: %#v", err)
		}
		errs = append(errs, err)
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no dial error among %v", errs)
}

// TestLostReplyScriptRunsOnce: a script whose reply is lost runs once: the client does not
// send it again, neither after a cut connection nor after a timeout. (A
// command sometimes stays in the client while replies are held: such a
// round only checks that it does not run twice.)
func TestLostReplyScriptRunsOnce(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t, redistest.TCP())
	p := redistest.NewProxy(t, s.Addr())
	conn := Conn(client(t, p.Addr()))
	ctx := ctxT(t, 60*time.Second)
	const incr = "return redis.call('INCR', KEYS[1])"
	count := func() int {
		v, err := s.Do(ctx, "GET", "n")
		if err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.Atoi(v.(string))
		return n
	}
	if _, err := conn.Do(ctx, "EVAL", incr, 1, "n"); err != nil {
		t.Fatal(err)
	}
	evals := 1
	for _, timeout := range []bool{false, true} {
		reached := 0
		for round := 0; round < 4 || reached == 0 && round < 12; round++ {
			warm(t, conn, "n")
			before := count()
			p.StallReplies()
			dctx, cancel := context.WithCancel(ctx)
			if timeout {
				dctx, cancel = context.WithTimeout(ctx, 300*time.Millisecond)
			}
			done := make(chan error, 1)
			go func() {
				_, err := conn.Do(dctx, "EVAL", incr, 1, "n")
				done <- err
			}()
			evals++
			ran := false
			for deadline := time.Now().Add(time.Second); !ran && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
				ran = count() == before+1
			}
			if timeout { // the context ended first: its error waits in a new done
				err := <-done
				done = make(chan error, 1)
				done <- err
			}
			p.Cut()
			select {
			case err := <-done:
				var nerr net.Error
				if err == nil || !errors.Is(err, io.EOF) && !errors.As(err, &nerr) && !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("a lost reply: %#v, want io.EOF, a net.Error or the context's end", err)
				}
			case <-time.After(10 * time.Second):
				buf := make([]byte, 1<<20)
				t.Fatalf("Do did not return after the cut (ran %v)\n%s", ran, buf[:runtime.Stack(buf, true)])
			}
			cancel()
			warm(t, conn, "n")
			time.Sleep(200 * time.Millisecond)
			switch after := count(); {
			case ran && after != before+1, !ran && after > before+1:
				t.Fatalf("timeout %v, round %d: n went from %d to %d (ran before the cut: %v)", timeout, round, before, after, ran)
			case ran:
				reached++
			}
		}
		if reached == 0 {
			t.Fatalf("timeout %v: no command reached the server while replies were held", timeout)
		}
	}
	v, err := s.Do(ctx, "INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	calls := regexp.MustCompile(`cmdstat_eval:calls=(\d+),`).FindStringSubmatch(v.(string))
	if calls == nil || calls[1] != strconv.Itoa(count()) {
		t.Fatalf("n = %d after %d EVALs, but the server counted %v", count(), evals, calls)
	}
}

// warm sends GET key until 3 in a row are answered (10 at most): the
// first commands after a cut may meet the dead connection (rueidis picks
// one of its connections by the key's slot).
func warm(t *testing.T, conn driver.Conn, key string) {
	t.Helper()
	ok := 0
	for range 10 {
		if _, err := conn.Do(context.Background(), "GET", key); err != nil {
			ok = 0
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if ok++; ok == 3 {
			return
		}
	}
	t.Fatal("GET failed after a cut")
}

func recv(t *testing.T, ps driver.PubSub, d time.Duration) (driver.Message, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return ps.Receive(ctx)
}

// expect receives until m arrives, skipping errors (of a broken
// connection), at most a few times.
func expect(t *testing.T, ps driver.PubSub, want ...driver.Message) {
	t.Helper()
	for _, w := range want {
		for i := 0; ; i++ {
			m, err := recv(t, ps, 10*time.Second)
			if err == nil && m == w {
				break
			}
			if i == 5 || err != nil && errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("waiting for %+v: got %+v, %v", w, m, err)
			}
			t.Logf("skipped %+v, %v", m, err)
		}
	}
}

// On a Cluster: Masters lists each master once, keys and scripts route to
// their slots, and sharded pub/sub subscribes on the channel's shard.
func TestClusterRoutesBySlotAndShardsPubSub(t *testing.T) {
	t.Parallel()
	leakcheck.Check(t)
	nodes := redistest.StartCluster(t, 3, 1)
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, n.Addr())
	}
	c := client(t, addrs...)
	conn := Conn(c)
	ctx := ctxT(t, 60*time.Second)
	if info := conn.Info(); !info.Cluster {
		t.Fatalf("Info = %+v", info)
	}
	clusterMasters(t, ctx, conn)
	// Keys route to their slots.
	for _, k := range []string{"a", "b", "c", "{x}1", "{x}2"} {
		if v, err := conn.Do(ctx, "EVAL", "redis.call('SET', KEYS[1], ARGV[1]) return redis.call('GET', KEYS[1])", 1, k, k); err != nil || v != k {
			t.Fatalf("EVAL on %s: %#v, %v", k, v, err)
		}
		if v, err := conn.Do(ctx, "GET", k); err != nil || v != k {
			t.Fatalf("GET %s: %#v, %v", k, v, err)
		}
	}

	// Sharded pub/sub.
	for _, ch := range []string{"{a}ch", "{b}ch", "{c}ch"} {
		shardedPubSub(t, ctx, c, conn, ch)
	}
}

// clusterMasters checks that conn's Masters are the Cluster's three
// masters, each a Conn to that node alone.
func clusterMasters(t *testing.T, ctx context.Context, conn driver.Conn) {
	t.Helper()
	masters, err := conn.Masters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(masters) != 3 {
		t.Fatalf("%d masters", len(masters))
	}
	seen := map[string]bool{}
	for _, m := range masters {
		role, err := m.Do(ctx, "ROLE")
		if err != nil {
			t.Fatal(err)
		}
		if r := role.([]any); r[0] != "master" {
			t.Fatalf("ROLE = %v", r)
		}
		id, err := m.Do(ctx, "CLUSTER", "MYID")
		if err != nil {
			t.Fatal(err)
		}
		seen[id.(string)] = true
		if sub, err := m.Masters(ctx); err != nil || len(sub) != 1 {
			t.Fatalf("a master's Masters: %v, %v", sub, err)
		}
		if rs := m.DoMulti(ctx, []any{"PING"}, []any{"SCAN", 0}); rs[0].Val != "PONG" || rs[1].Err != nil {
			t.Fatalf("DoMulti on a master: %+v", rs)
		}
	}
	if len(seen) != 3 {
		t.Fatalf("masters %v", seen)
	}
}

// shardedPubSub subscribes to ch on a sharded PubSub of its own: messages
// arrive, another slot's channel is refused (rueidis would panic), and an
// unsubscription is confirmed.
func shardedPubSub(t *testing.T, ctx context.Context, c rueidis.Client, conn driver.Conn, ch string) {
	t.Helper()
	ps, err := conn.PubSub(ctx, ch)
	if err != nil {
		t.Fatal(err)
	}
	defer ps.Close()
	if err := ps.Subscribe(ctx, ch); err != nil {
		t.Fatal(err)
	}
	expect(t, ps, driver.Message{Kind: "ssubscribe", Channel: ch})
	n, err := c.Do(ctx, c.B().Spublish().Channel(ch).Message("hi").Build()).AsInt64()
	if err != nil || n != 1 {
		t.Fatalf("SPUBLISH %s: %d, %v", ch, n, err)
	}
	expect(t, ps, driver.Message{Kind: "message", Channel: ch, Payload: "hi"})
	other := "{a}ch"
	if ch == other {
		other = "{b}ch"
	}
	if err := ps.Subscribe(ctx, other); err == nil {
		t.Fatalf("a sharded connection to %s subscribed to %s", ch, other)
	}
	if err := ps.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if err := ps.Unsubscribe(ctx, ch); err != nil {
		t.Fatal(err)
	}
	expect(t, ps, driver.Message{Kind: "sunsubscribe", Channel: ch})
}

// TestSubscribeNamesAreRefusedWithoutPanic pins that every name rueidis's
// Build refuses with a panic (one that, upper-cased, ends in SUBSCRIBE:
// "ſ" upper-cases to "S", "ı" to "I") is refused by Do and DoMulti with an
// error instead, as an ASCII one is.
func TestSubscribeNamesAreRefusedWithoutPanic(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t, redistest.TCP())
	conn := Conn(client(t, s.Addr()))
	ctx := ctxT(t, 10*time.Second)
	for _, name := range []string{"SUBSCRIBE", "psubscribe", "sUnSubscribe", "ſubscribe", "xſubscribe", "SUBSCRıBE", "punſubſcrıbe"} {
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("Do(%q) panicked: %v", name, r)
				}
			}()
			if _, err := conn.Do(ctx, name, "x"); !errors.Is(err, driver.ErrNotSent) {
				t.Errorf("Do(%q) = %v, want it refused unsent (driver.ErrNotSent)", name, err)
			}
			rs := conn.DoMulti(ctx, []any{name, "x"}, []any{"PING"})
			if len(rs) != 2 || !errors.Is(rs[0].Err, driver.ErrNotSent) || rs[1].Err != nil || rs[1].Val != "PONG" {
				t.Errorf("DoMulti(%q, PING): %#v", name, rs)
			}
		}()
	}
}

// TestClusterCrossSlotScriptIsRefusedByRedisNotPanicked pins that a script
// whose keys live in different slots of a Cluster is routed by its first
// key and refused by Redis (CROSSSLOT), as go-redis has it, by Do and
// DoMulti alike, instead of a panic in rueidis's builder; a script whose
// keys share a slot still runs.
func TestClusterCrossSlotScriptIsRefusedByRedisNotPanicked(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds a Cluster")
	}
	var addrs []string
	for _, n := range redistest.StartCluster(t, 3, 0) {
		addrs = append(addrs, n.Addr())
	}
	conn := Conn(client(t, addrs...))
	ctx := ctxT(t, 60*time.Second)
	const script = "return redis.call('MGET', KEYS[1], KEYS[2])"
	crossSlot := func(what string, err error) {
		t.Helper()
		var de driver.Error
		if !errors.As(err, &de) || !strings.HasPrefix(string(de), "CROSSSLOT") {
			t.Errorf("%s of keys in two slots: %v, want Redis's CROSSSLOT", what, err)
		}
	}
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("panicked: %v", r)
			}
		}()
		_, err := conn.Do(ctx, "EVAL", script, 2, "a", "b")
		crossSlot("EVAL", err)
		_, err = conn.Do(ctx, "eval_ro", script, 2, "a", "b")
		crossSlot("eval_ro", err)
		rs := conn.DoMulti(ctx, []any{"EVAL", script, 2, "a", "b"}, []any{"EVAL", script, 2, "{a}1", "{a}2"})
		if len(rs) != 2 {
			t.Fatalf("DoMulti: %d replies", len(rs))
		}
		crossSlot("DoMulti's EVAL", rs[0].Err)
		if v, ok := rs[1].Val.([]any); rs[1].Err != nil || !ok || len(v) != 2 {
			t.Errorf("DoMulti's EVAL of keys in one slot: %#v, %v", rs[1].Val, rs[1].Err)
		}
	}()
}
