package redistest

import (
	"bytes"
	"context"
	"io"
	"net"
	"sync/atomic"
)

// Loser is a dialer (a go-redis Options.Dialer) whose connections lose,
// once armed, the first request that holds all of its words (in lower
// case): the request is not delivered and its connection breaks (reads
// end with io.EOF), as when a pooled connection dies with a request in it.
type Loser struct {
	words [][]byte
	armed atomic.Bool
	lost  atomic.Int32
}

// NewLoser returns a Loser of the first request holding words, unarmed.
func NewLoser(words ...string) *Loser {
	l := &Loser{}
	for _, w := range words {
		l.words = append(l.words, []byte(w))
	}
	return l
}

// Arm makes the next matching request the lost one.
func (l *Loser) Arm() { l.armed.Store(true) }

// Lost returns how many requests were lost.
func (l *Loser) Lost() int { return int(l.lost.Load()) }

// Dial dials addr.
func (l *Loser) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &losingConn{Conn: c, l: l}, nil
}

type losingConn struct {
	net.Conn
	l      *Loser
	broken atomic.Bool
}

func (c *losingConn) matches(b []byte) bool {
	b = bytes.ToLower(b)
	for _, w := range c.l.words {
		if !bytes.Contains(b, w) {
			return false
		}
	}
	return true
}

func (c *losingConn) Write(b []byte) (int, error) {
	if c.matches(b) && c.l.armed.CompareAndSwap(true, false) {
		c.broken.Store(true)
		c.l.lost.Add(1)
		c.Conn.Close()
		return len(b), nil
	}
	return c.Conn.Write(b)
}

func (c *losingConn) Read(b []byte) (int, error) {
	if c.broken.Load() {
		return 0, io.EOF
	}
	return c.Conn.Read(b)
}
