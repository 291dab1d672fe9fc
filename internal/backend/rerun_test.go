package backend

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/internal/redistest"
	"github.com/dlockio/dlock/internal/script"
)

// A call that meets NOSCRIPT sends its script again, with the loads, in one
// pipeline: go-redis, even with retries on, does not send that pipeline
// again when its connection breaks (the script may have run), although it
// may send a load alone again.
func TestRerunAfterNOSCRIPTIsNeverSentTwice(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t, redistest.TCP())
	direct := s.Client(t)
	ctx := t.Context()
	loser := redistest.NewLoser("script", "evalsha")
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr(), Dialer: loser.Dial, MaxRetries: 3})
	t.Cleanup(func() { rdb.Close() })
	n := NewNode(rdb, Config{TTL: time.Second})
	loser.Arm()
	_, err := n.run(ctx, script.Uptime, []any{"rerun"})
	if got := loser.Lost(); got != 1 {
		t.Fatalf("%d pipelines of SCRIPT LOAD and EVALSHA lost, want the rerun's (err %v)", got, err)
	}
	if !ReplyLost(err) {
		t.Errorf("run = %v, want a lost reply", err)
	}
	info, ierr := direct.Info(ctx, "commandstats").Result()
	if ierr != nil {
		t.Fatal(ierr)
	}
	if strings.Contains(info, "cmdstat_script|load:") {
		t.Errorf("the server ran a SCRIPT LOAD: go-redis sent the lost rerun again")
	}
}

// A script sent with the replicas' acknowledgement (EVALSHA and WAIT in one
// pipeline) whose reply is lost is not sent again by go-redis, even with
// retries on: it may have run.
func TestAckedScriptIsNeverSentTwice(t *testing.T) {
	t.Parallel()
	s, direct := withUptime(t)
	ctx := t.Context()
	p := redistest.NewProxy(t, s.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: 3})
	t.Cleanup(func() { rdb.Close() })
	if _, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error { return p.Ping(ctx).Err() }); err != nil {
		t.Fatal(err) // (a pooled connection for pipelines, through the proxy)
	}
	n := NewNode(rdb, Config{TTL: time.Second, Replicas: 1, AckTimeout: 10 * time.Millisecond})
	ran := func() bool {
		info, err := direct.Info(ctx, "commandstats").Result()
		return err == nil && strings.Contains(info, "cmdstat_evalsha:calls=")
	}
	p.StallReplies()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for deadline := time.Now().Add(10 * time.Second); !ran() && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		}
		p.Cut()
	}()
	_, _, err := n.acked(ctx, script.Uptime, ErrNotAcquired, []any{"acked"})
	<-done
	if !ReplyLost(err) {
		t.Errorf("acked = %v, want a lost reply", err)
	}
	info, err := direct.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(info, "cmdstat_evalsha:calls=1,") {
		t.Errorf("the server ran EVALSHA other than once: go-redis sent the lost pipeline again\n%s", info)
	}
}

// closeAfter is a go-redis hook that closes rdb once a command named name
// has run.
type closeAfter struct {
	rdb  *redis.Client
	name string
}

func (h closeAfter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h closeAfter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if cmd.Name() == h.name {
			h.rdb.Close()
		}
		return err
	}
}

func (h closeAfter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A rerun after NOSCRIPT through a go-redis client closed meanwhile fails
// with go-redis's own error, as the call itself would have: the road the
// loads take returns go-redis's errors as they are.
func TestRerunOnAClosedClientIsGoRedisErrClosed(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	rdb := s.Client(t)
	rdb.AddHook(closeAfter{rdb: rdb, name: "evalsha"})
	n := NewNode(rdb, Config{TTL: time.Second})
	_, err := n.run(t.Context(), script.Uptime, []any{"rerun"})
	if !errors.Is(err, redis.ErrClosed) || err.Error() != redis.ErrClosed.Error() {
		t.Errorf("run = %v, want %v as it is", err, redis.ErrClosed)
	}
}

// A clean lease's release whose reply is lost is sent again; the copy finds
// the lease gone, and, the server having been up since before the lease
// began, the release counts as the first copy's: released, no error. The
// release goes twice and the uptime is read once, alone or batched.
func TestReleaseWhoseReplyWasLostCountsTheFirstCopy(t *testing.T) {
	t.Parallel()
	s, direct := withUptime(t)
	ctx := t.Context()
	up := func() bool { // (the server up 2s or more: a lease begun now is younger, counted in whole seconds)
		info := direct.Info(ctx, "server").Val()
		_, v, _ := strings.Cut(info, "uptime_in_seconds:")
		secs, _, _ := strings.Cut(v, "\r\n")
		return secs != "" && secs != "0" && secs != "1"
	}
	if !waitFor(up) {
		t.Fatal("the server's uptime never reached 2s")
	}
	for _, pipelining := range []bool{false, true} {
		p := redistest.NewProxy(t, s.Addr())
		rdb := redis.NewClient(&redis.Options{Addr: p.Addr()})
		t.Cleanup(func() { rdb.Close() })
		n := NewNode(rdb, Config{TTL: 10 * time.Second, Pipelining: pipelining})
		c := &Claim{Keys: KeysFor("dlock:", fmt.Sprint("lost-release-", pipelining)), Kind: PlainLock}
		c.SetToken("tok")
		c.Began = time.Now()
		if err := n.Prepare(ctx, c); err != nil {
			t.Fatal(err)
		}
		if g, err := n.Acquire(ctx, c, 10*time.Second, false); err != nil || !g.Held {
			t.Fatalf("pipelining %v: Acquire = %+v, %v", pipelining, g, err)
		}
		if err := direct.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		p.StallReplies()
		released := make(chan error, 1)
		var ok bool
		go func() {
			var err error
			ok, err = n.Release(ctx, c)
			released <- err
		}()
		if !waitFor(func() bool { return direct.Exists(ctx, c.Lock).Val() == 0 }) {
			t.Fatalf("pipelining %v: the release never ran", pipelining)
		}
		p.Cut()
		if err := <-released; err != nil || !ok {
			t.Errorf("pipelining %v: Release with its reply lost = %v, %v; want true, nil", pipelining, ok, err)
		}
		if got := commandCalls(t, direct, "evalsha"); got != "3" {
			t.Errorf("pipelining %v: EVALSHA ran %s times, want 3: the release, its copy, the uptime", pipelining, got)
		}
	}
}

// withUptime starts a server on TCP that has uptime.lua in its script
// cache, and returns it with a client of its own.
func withUptime(t *testing.T) (*redistest.Server, *redis.Client) {
	t.Helper()
	s := redistest.Start(t, redistest.TCP())
	direct := s.Client(t)
	if err := direct.ScriptLoad(t.Context(), script.Uptime.Source()).Err(); err != nil {
		t.Fatal(err)
	}
	return s, direct
}
