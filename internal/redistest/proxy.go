package redistest

import (
	"net"
	"sync"
	"testing"
	"time"
)

// Proxy forwards loopback TCP connections to a server and can stall them
// (hold every byte in flight) or cut them (drop what is held and close):
// the network faults that SIGSTOP cannot make, because a stopped process's
// kernel still receives what is sent to it.
type Proxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	stalled bool // both directions
	replies bool // server to client only
	cond    *sync.Cond
	conns   map[net.Conn]struct{}
	wg      sync.WaitGroup
}

// NewProxy starts a proxy to target (host:port), stopped in tb's cleanup.
func NewProxy(tb testing.TB, target string) *Proxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
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
		p.wg.Go(func() { p.pipe(c, s, true) })
		p.wg.Go(func() { p.pipe(s, c, false) })
	}
}

// pipe copies from src to dst, holding data while the proxy is stalled (or,
// for the reply direction, while replies are stalled).
func (p *Proxy) pipe(dst, src net.Conn, reply bool) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			for p.stalled || (reply && p.replies) {
				p.cond.Wait()
			}
			_, alive := p.conns[dst]
			p.mu.Unlock()
			if !alive {
				return // cut while held: the data is dropped
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// Stall holds every byte that crosses the proxy from now on.
func (p *Proxy) Stall() {
	p.mu.Lock()
	p.stalled = true
	p.mu.Unlock()
}

// StallReplies holds what the server sends from now on, while requests
// still reach it: commands run, their replies do not arrive.
func (p *Proxy) StallReplies() {
	p.mu.Lock()
	p.replies = true
	p.mu.Unlock()
}

// Cut closes every connection, dropping what is held, and ends a stall; new
// connections are forwarded again.
func (p *Proxy) Cut() {
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
	p.stalled, p.replies = false, false
	p.cond.Broadcast()
	p.mu.Unlock()
}

// Close stops the proxy.
func (p *Proxy) Close() {
	p.ln.Close()
	p.Cut()
	p.wg.Wait()
}
