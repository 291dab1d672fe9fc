package dlock_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"strconv"
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

// replyLoser is a go-redis Dialer whose connections, once armed, deliver
// the first request that holds word, wait until Redis has run it (done
// says so), then break, and from then on refuse new connections until
// allow (unless reachable): a reply lost to a broken connection, and
// Redis unreachable from the client for a while after.
type replyLoser struct {
	word      []byte
	done      func() bool
	reachable bool // new connections are made at once after the loss
	armed     atomic.Bool
	refuse    atomic.Bool
	mu        sync.Mutex
	conns     []net.Conn
}

func (d *replyLoser) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if d.refuse.Load() {
		return nil, &net.OpError{Op: "dial", Net: network, Err: syscall.ECONNREFUSED}
	}
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	d.conns = append(d.conns, c)
	d.mu.Unlock()
	return &replyLosingConn{Conn: c, d: d}, nil
}

func (d *replyLoser) allow() { d.refuse.Store(false) }

type replyLosingConn struct {
	net.Conn
	d *replyLoser
}

func (c *replyLosingConn) Write(b []byte) (int, error) {
	if !bytes.Contains(b, c.d.word) || !c.d.armed.CompareAndSwap(true, false) {
		return c.Conn.Write(b)
	}
	n, err := c.Conn.Write(b)
	waitFor(10*time.Second, c.d.done)
	c.d.refuse.Store(!c.d.reachable)
	c.d.mu.Lock()
	for _, c := range c.d.conns {
		c.Close()
	}
	c.d.conns = nil
	c.d.mu.Unlock()
	return n, err
}

// A Release whose reply was lost, and whose copies sent again found no
// connection (Redis unreachable for a while), fails; repeated once Redis
// is reachable, it reports what the first copy did (it released the lock),
// not a lease lost before Release.
func TestReleaseRepeatedAfterALostReplyAndRefusedDialsReportsTheFirstCopysRelease(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	direct := s.Client(t)
	ctx := t.Context()
	// (A clean lease found gone counts as released by a lost copy on a
	// server up longer than the lease: INFO counts whole seconds.)
	up := func() int {
		info, _ := direct.Info(ctx, "server").Result()
		for line := range strings.Lines(info) {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "uptime_in_seconds:"); ok {
				n, _ := strconv.Atoi(v)
				return n
			}
		}
		return 0
	}
	if !waitFor(20*time.Second, func() bool { return up() >= 3 }) {
		t.Fatal("the server's uptime did not reach 3s")
	}
	d := &replyLoser{}
	opts := s.Options()
	opts.Dialer, opts.PoolSize, opts.MaxRetries = d.dial, 1, 3
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { rdb.Close() })
	c := newClient(t, rdb, dlock.WithAutoExtend(false))
	l, err := c.TryAcquire(ctx, "release-lost-reply-then-unreachable")
	if err != nil {
		t.Fatal(err)
	}
	key := l.Key()
	d.word = []byte(l.Token())
	d.done = func() bool { return direct.Exists(ctx, key).Val() == 0 }
	d.armed.Store(true)
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err = l.Release(rctx)
	cancel()
	if err == nil {
		t.Fatal("Release whose reply was lost and whose copies found no connection = nil, want its error")
	}
	if n := direct.Exists(ctx, key).Val(); n != 0 {
		t.Fatalf("the lock key is still there after the first copy (%v)", err)
	}
	d.allow()
	deadline := time.Now().Add(10 * time.Second)
	for {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err = l.Release(rctx)
		cancel()
		var op *net.OpError
		if err == nil || !errors.As(err, &op) || op.Op != "dial" || time.Now().After(deadline) {
			break // (go-redis's pool dials again within a second)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Errorf("repeated Release = %v, want nil: the first copy released the lock", err)
	}
}
