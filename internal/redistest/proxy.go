package redistest

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockio/dlock/internal/redisserver"
)

// Proxy forwards loopback TCP connections to a server and can delay,
// stall or cut them: the network faults that SIGSTOP cannot make, because a
// stopped process's kernel still receives what is sent to it.
//
//   - Delay holds what crosses in one direction for a while, then delivers
//     it: a request can reach the server after its client gave up, closed
//     the connection and undid the call (go-redis re-sends a command whose
//     reply timed out, so one call can also land twice).
//   - Stall holds every byte until Cut; StallReplies only the replies, so
//     commands run and their answers never arrive.
//   - Cut closes every connection and drops what is held.
type Proxy struct {
	ln     net.Listener
	target string

	mu       sync.Mutex
	stalled  bool // both directions
	replies  bool // server to client only
	reqDelay time.Duration
	repDelay time.Duration
	cond     *sync.Cond
	conns    map[net.Conn]struct{}
	wg       sync.WaitGroup
	held     atomic.Int64 // requests read from clients, neither delivered nor dropped yet
	stallIn  atomic.Int64 // requests read from clients since the latest Stall
}

// NewProxy starts a proxy to target (host:port), stopped in tb's cleanup.
func NewProxy(tb testing.TB, target string) *Proxy {
	tb.Helper()
	ln, err := redisserver.Listen() // (a port no server of this process had)
	if err != nil {
		tb.Fatal(err)
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.cond = sync.NewCond(&p.mu)
	p.wg.Go(p.accept)
	tb.Cleanup(p.Close)
	return p
}

// Addr returns the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Port returns the proxy's port.
func (p *Proxy) Port() int { return p.ln.Addr().(*net.TCPAddr).Port }

func (p *Proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.DialTimeout("tcp", p.target, time.Second)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[s] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Go(func() { p.pipe(s, c, false) })
		p.wg.Go(func() { p.pipe(c, s, true) })
	}
}

// chunk is data read from one side, due on the other at a time.
type chunk struct {
	data []byte
	due  time.Time
}

// pipe copies from src to dst. A reader takes data off src as it comes and
// stamps it with the direction's delay; a writer delivers each chunk when
// it is due and the proxy is not stalled. When src closes, what is still
// held is delivered first (a delayed request outlives its client's
// connection, as it would in a real network), then dst is half-closed.
func (p *Proxy) pipe(dst, src net.Conn, reply bool) {
	var (
		mu      sync.Mutex
		cond    = sync.NewCond(&mu)
		queue   []chunk
		closed  bool // src has closed
		dropped bool // the writer has ended: what is read now is dropped
	)
	p.wg.Go(func() {
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				p.mu.Lock()
				d := p.reqDelay
				if reply {
					d = p.repDelay
				} else if p.stalled {
					p.stallIn.Add(1)
				}
				p.mu.Unlock()
				mu.Lock()
				if !dropped {
					if !reply {
						p.held.Add(1)
					}
					queue = append(queue, chunk{data: append([]byte(nil), buf[:n]...), due: time.Now().Add(d)})
					cond.Signal()
				}
				mu.Unlock()
			}
			if err != nil {
				mu.Lock()
				closed = true
				cond.Signal()
				mu.Unlock()
				return
			}
		}
	})
	defer src.Close()
	defer func() { // what is still queued is dropped
		mu.Lock()
		if !reply {
			p.held.Add(-int64(len(queue)))
		}
		queue, dropped = nil, true
		mu.Unlock()
	}()
	for {
		mu.Lock()
		for len(queue) == 0 && !closed {
			cond.Wait()
		}
		if len(queue) == 0 {
			mu.Unlock()
			if tc, ok := dst.(*net.TCPConn); ok {
				tc.CloseWrite()
			}
			p.lingerClose(dst)
			return
		}
		c := queue[0]
		queue = queue[1:]
		mu.Unlock()
		time.Sleep(time.Until(c.due))
		p.mu.Lock()
		for p.stalled || (reply && p.replies) {
			p.cond.Wait()
		}
		_, alive := p.conns[dst]
		p.mu.Unlock()
		var err error
		if alive { // (else cut while held: the data is dropped)
			_, err = dst.Write(c.data)
		}
		if !reply {
			p.held.Add(-1) // delivered, or dropped
		}
		if !alive || err != nil {
			dst.Close()
			return
		}
	}
}

// lingerClose closes a connection whose other direction may still carry
// replies to requests just delivered: it waits (boundedly) for them first.
func (p *Proxy) lingerClose(c net.Conn) {
	time.AfterFunc(2*time.Second, func() { c.Close() })
}

// Delay holds what is sent from now on for req (client to server) and rep
// (server to client) before delivering it; 0 delivers at once.
func (p *Proxy) Delay(req, rep time.Duration) {
	p.mu.Lock()
	p.reqDelay, p.repDelay = req, rep
	p.mu.Unlock()
}

// HeldRequests reports how many reads from clients the proxy holds
// (delayed or stalled), neither delivered to the server nor dropped yet:
// 0 once every delayed request has landed.
func (p *Proxy) HeldRequests() int { return int(p.held.Load()) }

// Stall holds every byte that crosses the proxy from now on.
func (p *Proxy) Stall() {
	p.mu.Lock()
	p.stalled = true
	p.stallIn.Store(0)
	p.mu.Unlock()
}

// RequestsSinceStall reports how many reads from clients the proxy took
// in since the latest Stall (while still stalled): unlike HeldRequests,
// it does not count a request read before the stall whose write has not
// returned yet.
func (p *Proxy) RequestsSinceStall() int { return int(p.stallIn.Load()) }

// StallReplies holds what the server sends from now on, while requests
// still reach it: commands run, their replies do not arrive.
func (p *Proxy) StallReplies() {
	p.mu.Lock()
	p.replies = true
	p.mu.Unlock()
}

// Cut closes every connection, dropping what is held, and ends a stall and
// any delay; new connections are forwarded again.
func (p *Proxy) Cut() {
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
	p.stalled, p.replies = false, false
	p.reqDelay, p.repDelay = 0, 0
	p.cond.Broadcast()
	p.mu.Unlock()
}

// Close stops the proxy.
func (p *Proxy) Close() {
	p.ln.Close()
	p.Cut()
	p.wg.Wait()
}
