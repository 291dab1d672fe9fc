package pubsub

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/driver"
	"github.com/dlockio/dlock/internal/goredisdriver"
	"github.com/dlockio/dlock/internal/leakcheck"
	"github.com/dlockio/dlock/internal/redistest"
)

// A watcher (WatchToken) is woken by every message on its channel: a
// release, and a handover to another waiter, which still reaches only
// that waiter among the others. Two watchers on one channel are both woken.
func TestWatchersSeeEveryMessage(t *testing.T) {
	rdb := start(t)
	h := New(goredisdriver.Conn(rdb), false)
	w1, watch1 := subscribe(t, h, "ch", WatchToken())
	w2, watch2 := subscribe(t, h, "ch", WatchToken())
	wa, a := subscribe(t, h, "ch", "tok-a")
	wb, b := subscribe(t, h, "ch", "tok-b")
	ctx := t.Context()

	rdb.Publish(ctx, "ch", "tok-a 42")
	expect(t, "waiter a", a, 42)
	expectNone(t, "waiter b", b)
	expect(t, "watcher 1", watch1, Released)
	expect(t, "watcher 2", watch2, Released)

	rdb.Publish(ctx, "ch", WakeAll)
	expect(t, "waiter b", b, Released)
	expect(t, "watcher 1", watch1, Released)

	w1.Close()
	rdb.Publish(ctx, "ch", "tok-b 43")
	expect(t, "waiter b", b, 43)
	expect(t, "watcher 2", watch2, Released)
	expectNone(t, "closed watcher 1", watch1)
	for _, w := range []*Waiter{w2, wa, wb} {
		w.Close()
	}
	time.Sleep(2 * linger) // the channel is dropped and the connection closed: no reader left
}

// watchCalls returns a Watch's function and the channel it signals.
func watchCalls() (func(), chan struct{}) {
	calls := make(chan struct{}, 100)
	return func() { calls <- struct{}{} }, calls
}

func expectCall(t *testing.T, who string, calls chan struct{}) {
	t.Helper()
	select {
	case <-calls:
	case <-time.After(5 * time.Second):
		t.Errorf("%s: not called", who)
	}
}

func expectNoCall(t *testing.T, who string, calls chan struct{}) {
	t.Helper()
	select {
	case <-calls:
		t.Errorf("%s: called, want no call", who)
	case <-time.After(100 * time.Millisecond):
	}
}

// A Watch calls its function on every message of its channel and on the
// keyspace events that end or replace its key, not on those a holder's
// own writes make (an expiry pushed out, a set's member added), nor on
// another key's.
func TestWatchCallsOnMessagesAndOnTheKeyEnding(t *testing.T) {
	t.Parallel()
	rdb := startKeyspace(t)
	ctx := t.Context()
	h := New(goredisdriver.Conn(rdb), false)
	defer h.Close()
	f, calls := watchCalls()
	w := h.Watch("k:ch", "k", f, nil)
	for _, ch := range []string{"k:ch", "__keyspace@0__:k"} {
		if !waitSubscribed(rdb, ch) {
			t.Fatalf("%s not subscribed after 5s", ch)
		}
	}
	rdb.Publish(ctx, "k:ch", "sometoken 5")
	expectCall(t, "a handover to another", calls)
	rdb.Set(ctx, "k", "v", time.Minute)
	expectCall(t, "SET", calls)
	rdb.PExpire(ctx, "k", 2*time.Minute)
	rdb.Set(ctx, "other", "v", time.Minute)
	rdb.Del(ctx, "other")
	expectNoCall(t, "PEXPIRE of the key, SET and DEL of another", calls)
	rdb.Del(ctx, "k")
	expectCall(t, "DEL", calls)
	rdb.ZAdd(ctx, "k", redis.Z{Member: "m", Score: 1})
	rdb.ZAdd(ctx, "k", redis.Z{Member: "n", Score: 1})
	rdb.ZRem(ctx, "k", "n")
	expectNoCall(t, "ZADD, ZREM", calls)
	rdb.ZRem(ctx, "k", "m") // the set emptied: deleted
	expectCall(t, "the last ZREM", calls)
	w.Close()
	rdb.Publish(ctx, "k:ch", WakeAll)
	expectNoCall(t, "a closed Watch", calls)
	waitUnsubscribed(t, rdb, "__keyspace@0__:k", false)
}

// startKeyspace starts a server with keyspace notifications on, and
// returns a client of it; the leak check runs as in start.
func startKeyspace(t *testing.T) *redis.Client {
	s := redistest.Start(t, redistest.Args("--notify-keyspace-events", "KA"))
	var rdb *redis.Client
	t.Cleanup(func() { rdb.Close() })
	leakcheck.Check(t)
	rdb = s.Client(t)
	return rdb
}

// A Watch is called when its subscription is back after a break: a
// message may have been missed.
func TestWatchCalledWhenTheServerIsBack(t *testing.T) {
	t.Parallel()
	h, _, s, _ := startHub(t, false)
	f, calls := watchCalls()
	w := h.Watch("ch", "k", f, nil)
	defer w.Close()
	if !waitSubscribed(s.Client(t), "ch") {
		t.Fatal("ch not subscribed after 5s")
	}
	s.Restart()
	expectCall(t, "after a restart", calls)
	h.Close()
}

// waitSubscribed waits until the server counts a subscriber of channel.
func waitSubscribed(rdb *redis.Client, channel string) bool {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if rdb.PubSubNumSub(context.Background(), channel).Val()[channel] > 0 {
			return true
		}
	}
	return false
}

// failFirstClientInfo is a go-redis hook under which the first CLIENT INFO
// fails as a broken connection does, without a reply.
type failFirstClientInfo struct{ failed atomic.Bool }

func (h *failFirstClientInfo) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *failFirstClientInfo) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *failFirstClientInfo) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if isClientInfo(cmd) && h.failed.CompareAndSwap(false, true) {
			cmd.SetErr(errors.New("read tcp: i/o timeout"))
			return cmd.Err()
		}
		return next(ctx, cmd)
	}
}

func isClientInfo(cmd redis.Cmder) bool {
	return strings.EqualFold(cmd.Name(), "client") && strings.EqualFold(fmt.Sprint(cmd.Args()[1:2]...), "info")
}

// holdClientInfo is a go-redis hook under which CLIENT INFO waits until
// release is closed (or its ctx ends).
type holdClientInfo struct {
	failFirstClientInfo // (its other hooks)
	release             chan struct{}
}

func (h *holdClientInfo) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if isClientInfo(cmd) {
			select {
			case <-h.release:
			case <-ctx.Done():
			}
		}
		return next(ctx, cmd)
	}
}

// A Watch closed (twice) while its Hub is learning the database never
// subscribes its key's keyspace channel, and leaves another Watch on its
// channel as it was; a Watch made once the database is known subscribes
// its key's at once.
func TestWatchClosedWhileTheDatabaseIsLearntSubscribesNoKey(t *testing.T) {
	t.Parallel()
	rdb := startKeyspace(t)
	hold := &holdClientInfo{release: make(chan struct{})}
	rdb.AddHook(hold)
	h := New(goredisdriver.Conn(rdb), false)
	defer h.Close()
	otherF, otherCalls := watchCalls()
	other := h.Watch("k:ch", "", otherF, nil)
	defer other.Close()
	f, calls := watchCalls()
	w := h.Watch("k:ch", "k", f, nil)
	select {
	case <-w.Ready():
	case <-time.After(5 * time.Second):
		t.Fatal("Ready not closed 5s after the Watch")
	}
	w.Close()
	w.Close()
	close(hold.release)
	learning := func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.learning
	}
	for deadline := time.Now().Add(5 * time.Second); learning(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the database not learnt 5s after CLIENT INFO was let through")
		}
	}
	h.mu.Lock()
	keyspace := h.topics["__keyspace@0__:k"]
	h.mu.Unlock()
	if keyspace != nil {
		t.Error("the keyspace channel of a closed Watch was subscribed")
	}
	rdb.Publish(t.Context(), "k:ch", WakeAll)
	expectCall(t, "the other Watch", otherCalls)
	if len(calls) > 0 {
		t.Error("a closed Watch was called")
	}
	again := h.Watch("k:ch", "k", f, nil)
	defer again.Close()
	expectKeyWatched(t, rdb, calls)
}

// A Watch whose Hub could not reach the server to learn its database
// still subscribes its key's keyspace channel once the server answers: the
// Hub asks again, and a DEL of the key is then told.
func TestWatchSubscribesTheKeyAfterAFailureToLearnTheDatabase(t *testing.T) {
	t.Parallel()
	rdb := startKeyspace(t)
	rdb.AddHook(new(failFirstClientInfo))
	h := New(goredisdriver.Conn(rdb), false)
	defer h.Close()
	f, calls := watchCalls()
	w := h.Watch("k:ch", "k", f, nil)
	defer w.Close()
	expectKeyWatched(t, rdb, calls)
}

// expectKeyWatched waits until the keyspace channel of key k is
// subscribed, and then expects a DEL of k to call its Watch.
func expectKeyWatched(t *testing.T, rdb *redis.Client, calls chan struct{}) {
	t.Helper()
	if !waitSubscribed(rdb, "__keyspace@0__:k") {
		t.Fatal("__keyspace@0__:k not subscribed after 5s: the Watch never learnt the database")
	}
	rdb.Set(t.Context(), "k", "v", time.Minute)
	rdb.Del(t.Context(), "k")
	expectCall(t, "DEL", calls)
}

// A Watch's Ready is closed once Redis has confirmed its channel's
// subscription, so that a message published from then on reaches it; a
// stalled connection keeps it open until the connection fails.
func TestWatchReadyOnceItsChannelIsConfirmed(t *testing.T) {
	t.Parallel()
	h, _, s, p := startHub(t, false)
	defer h.Close()
	direct := s.Client(t)
	f, calls := watchCalls()
	w := h.Watch("ch", "", f, nil)
	select {
	case <-w.Ready():
	case <-time.After(5 * time.Second):
		t.Fatal("Ready not closed 5s after the Watch")
	}
	if n := direct.PubSubNumSub(t.Context(), "ch").Val()["ch"]; n != 1 {
		t.Fatalf("once Ready: PUBSUB NUMSUB ch = %d, want 1", n)
	}
	direct.Publish(t.Context(), "ch", WakeAll)
	expectCall(t, "a message published once Ready", calls)
	w.Close()

	p.Stall()
	stalled := h.Watch("other", "", f, nil)
	defer stalled.Close()
	select {
	case <-stalled.Ready():
		t.Fatal("Ready closed while the connection is stalled")
	case <-time.After(200 * time.Millisecond):
	}
	p.Cut()
	select {
	case <-stalled.Ready():
	case <-time.After(5 * time.Second):
		t.Fatal("Ready not closed 5s after its connection was cut")
	}
}

// A lock's channel under a key prefix that begins as a keyspace channel
// does is no keyspace channel: a release on it wakes its waiters.
func TestChannelNamedLikeAKeyspaceChannelWakesItsWaiters(t *testing.T) {
	t.Parallel()
	rdb := start(t)
	h := New(goredisdriver.Conn(rdb), false)
	defer h.Close()
	channel := "__keyspace@0__:{a}:ch"
	w, wake := subscribe(t, h, channel, "a")
	defer w.Close()
	rdb.Publish(t.Context(), channel, WakeAll)
	expect(t, "a waiter on "+channel, wake, Released)
}

// A Watch of a key beside a lock's waiter on the lock's channel: after a
// break, both are told (Recheck, a call), the key's channel is subscribed
// again and still calls only on the events that end the key, and a
// handover still reaches the waiter and the Watch alone.
func TestWatchOfAKeyBesideAWaiterAfterABreak(t *testing.T) {
	t.Parallel()
	var rdb *redis.Client
	t.Cleanup(func() { rdb.Close() })
	leakcheck.Check(t)
	s := redistest.Start(t, redistest.TCP(), redistest.Args("--notify-keyspace-events", "KA"))
	p := redistest.NewProxy(t, s.Addr())
	rdb = redis.NewClient(&redis.Options{Addr: p.Addr()})
	direct := s.Client(t)
	ctx := t.Context()
	h := New(goredisdriver.Conn(rdb), false)
	defer h.Close()
	a, wake := subscribe(t, h, "k:ch", "tok-a")
	f, calls := watchCalls()
	w := h.Watch("k:ch", "k", f, nil)
	listening := func(ch string) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !h.Listening(ch); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s not listened to after 10s", ch)
			}
		}
	}
	listening("__keyspace@0__:k")
	p.Cut()
	expect(t, "the waiter", wake, Recheck)
	expectCall(t, "the Watch, after the break", calls) // (once per channel)
	expectCall(t, "the Watch, after the break", calls)
	listening("k:ch")
	listening("__keyspace@0__:k")
	direct.Set(ctx, "k", "v", time.Minute)
	expectCall(t, "SET of the key", calls)
	direct.PExpire(ctx, "k", 2*time.Minute)
	expectNoCall(t, "PEXPIRE of the key", calls)
	expectNone(t, "the waiter, on the key's events", wake)
	direct.Publish(ctx, "k:ch", "tok-a 9")
	expect(t, "the waiter", wake, 9)
	expectCall(t, "a handover to the waiter", calls)
	direct.Del(ctx, "k")
	expectCall(t, "DEL of the key", calls)
	w.Close()
	a.Close()
	waitUnsubscribed(t, direct, "__keyspace@0__:k", false)
	waitUnsubscribed(t, direct, "k:ch", false)
}

// A Watch closed twice leaves its channel to the channel's other waiters:
// the second Close takes none of theirs, and the channel is let go only
// once they left too.
func TestWatchClosedTwiceLeavesItsChannelToTheOtherWaiters(t *testing.T) {
	t.Parallel()
	rdb := start(t)
	h := New(goredisdriver.Conn(rdb), false)
	defer h.Close()
	f, calls := watchCalls()
	w := h.Watch("ch", "", f, nil)
	a, wake := subscribe(t, h, "ch", "tok-a")
	w.Close()
	w.Close()
	h.mu.Lock()
	waiters := len(h.topics["ch"].waiters)
	h.mu.Unlock()
	if waiters != 1 {
		t.Fatalf("%d waiters on ch after a Watch closed twice, want the other one", waiters)
	}
	rdb.Publish(t.Context(), "ch", WakeAll)
	expect(t, "the other waiter", wake, Released)
	expectNoCall(t, "the closed Watch", calls)
	a.Close()
	waitUnsubscribed(t, rdb, "ch", false)
}

// infoConn is a Conn whose every command is answered with reply (CLIENT
// INFO's line) or err.
type infoConn struct {
	driver.Conn
	reply any
	err   error
}

func (c infoConn) Do(context.Context, ...any) (any, error) { return c.reply, c.err }

// The database is read from CLIENT INFO's db field, also when a unix
// socket's path before it holds " db="; a line without the field, or an
// error reply, names none, and a failure to answer leaves it unknown.
func TestAskDBReadsTheDatabaseField(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		reply any
		err   error
		want  string
	}{
		{"tcp", "id=3 addr=127.0.0.1:50 laddr=127.0.0.1:6379 fd=8 name= age=0 idle=0 flags=N db=2 sub=0 psub=0 cmd=client|info user=default resp=2", nil, "2"},
		{"unix socket path with db=", "id=3 addr=/tmp/a db=7 b/r.sock:0 laddr=/tmp/a db=7 b/r.sock fd=8 name= age=0 idle=0 flags=N db=12 sub=0 psub=0", nil, "12"},
		{"no db field", "id=3 addr=/tmp/r.sock:0 fd=8", nil, noDB},
		{"empty", "", nil, noDB},
		{"error reply", nil, driver.Error("ERR unknown subcommand 'INFO'"), noDB},
		{"no answer", nil, errors.New("read tcp: i/o timeout"), ""},
	} {
		h := New(infoConn{reply: tc.reply, err: tc.err}, false)
		if got := h.askDB(); got != tc.want {
			t.Errorf("%s: askDB() = %q, want %q", tc.name, got, tc.want)
		}
		h.Close()
	}
}

// A Watch on a client of database 3 that reaches its server by a unix
// socket whose path holds " db=7 " (CLIENT INFO's addr and laddr, before
// its db field, then hold it too) listens to database 3's keyspace
// channel of its key, and is called when the key is deleted there.
func TestWatchOfAKeyThroughASocketWhosePathNamesAnotherDatabase(t *testing.T) {
	t.Parallel()
	dir, err := os.MkdirTemp("", "w db=7 ") // (short: a socket's path is at most 107 bytes)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "r.sock")
	redistest.Start(t, redistest.TCP(), redistest.Args("--notify-keyspace-events", "KA", "--unixsocket", sock))
	var rdb *redis.Client
	t.Cleanup(func() { rdb.Close() })
	leakcheck.Check(t)
	rdb = redis.NewClient(&redis.Options{Network: "unix", Addr: sock, DB: 3})
	ctx := t.Context()
	if info := rdb.Do(ctx, "CLIENT", "INFO").String(); !strings.Contains(info, "addr=/tmp/w db=7 ") || !strings.Contains(info, " db=3 ") {
		t.Fatalf("%s; want database 3, an address holding \" db=7 \"", info)
	}
	h := New(goredisdriver.Conn(rdb), false)
	defer h.Close()
	f, calls := watchCalls()
	w := h.Watch("k:ch", "k", f, nil)
	defer w.Close()
	if !waitSubscribed(rdb, "__keyspace@3__:k") {
		t.Fatalf("__keyspace@3__:k not subscribed after 5s; channels: %v", rdb.PubSubChannels(ctx, "*").Val())
	}
	rdb.Set(ctx, "k", "v", time.Minute)
	expectCall(t, "SET", calls)
	rdb.Del(ctx, "k")
	expectCall(t, "DEL", calls)
}
