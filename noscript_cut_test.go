package dlock_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
)

// halfReplyDialer's connections, once armed, pass on the first reply to
// a request holding all of words and then break (reads end in io.EOF):
// a connection cut between two pipelined replies.
type halfReplyDialer struct {
	words [][]byte
	armed atomic.Bool
	cuts  atomic.Int32
}

func (d *halfReplyDialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &halfReplyConn{Conn: c, d: d, rd: bufio.NewReader(c)}, nil
}

type halfReplyConn struct {
	net.Conn
	d      *halfReplyDialer
	rd     *bufio.Reader
	cut    atomic.Bool // the next reply is the last
	broken atomic.Bool
}

func (c *halfReplyConn) Write(b []byte) (int, error) {
	lb := bytes.ToLower(b)
	match := true
	for _, w := range c.d.words {
		match = match && bytes.Contains(lb, w)
	}
	if match && c.d.armed.CompareAndSwap(true, false) {
		c.cut.Store(true)
	}
	return c.Conn.Write(b)
}

func (c *halfReplyConn) Read(b []byte) (int, error) {
	if c.broken.Load() {
		return 0, io.EOF
	}
	if !c.cut.Load() {
		return c.rd.Read(b)
	}
	// One whole reply (a simple one, or a bulk string), then the cut.
	line, err := c.rd.ReadBytes('\n')
	if err != nil {
		return 0, err
	}
	reply := line
	if line[0] == '$' {
		if n, _ := strconv.Atoi(string(bytes.TrimSpace(line[1:]))); n >= 0 {
			body := make([]byte, n+2)
			if _, err := io.ReadFull(c.rd, body); err != nil {
				return 0, err
			}
			reply = append(reply, body...)
		}
	}
	c.broken.Store(true)
	c.d.cuts.Add(1)
	c.Conn.Close()
	return copy(b, reply), nil // (b is go-redis's 32 KiB buffer)
}

// A connection cut between the two replies of a script-free numbered
// extension's reads (the lock's GET answered, the marker's lost) ends it
// as the lease's state says: a lease that holds the lock is extended by
// the reads and writes run again, one whose lock is gone or another's is
// not held; neither is an error.
func TestWithoutScriptsNumberedExtendCutBetweenItsReads(t *testing.T) {
	t.Parallel()
	s, rdb := setup(t)
	ctx := t.Context()
	for _, tc := range []struct {
		lock string
		do   func(key string)
		want error
	}{
		{"held", func(string) {}, nil},
		{"gone", func(key string) { rdb.Del(ctx, key) }, dlock.ErrNotHeld},
		{"another's", func(key string) { rdb.Set(ctx, key, "another-lease", time.Minute) }, dlock.ErrNotHeld},
	} {
		d := &halfReplyDialer{words: [][]byte{[]byte("get"), []byte(":r:")}}
		opts := s.Options()
		opts.Dialer = d.dial
		cut := redis.NewClient(opts)
		t.Cleanup(func() { cut.Close() })
		c := newClient(t, cut, dlock.WithAutoExtend(false), dlock.WithoutScripts())
		l, err := c.TryAcquire(ctx, "cut-reads-"+tc.lock, dlock.LeaseTTL(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		tc.do(l.Key())
		d.armed.Store(true)
		err = l.Extend(ctx, 2*time.Second) // (shorter than the lease: numbered)
		if d.cuts.Load() != 1 {
			t.Fatalf("lock %s: %d cuts between the reads' replies, want 1", tc.lock, d.cuts.Load())
		}
		if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
			t.Errorf("lock %s: Extend with its reads cut = %v, want %v", tc.lock, err, tc.want)
		}
		if left := rdb.PTTL(ctx, l.Key()).Val(); tc.want == nil && (left <= 0 || left > 2*time.Second) {
			t.Errorf("lock %s: PTTL after the Extend = %v, want the extension's 2s at most", tc.lock, left)
		}
	}
}
