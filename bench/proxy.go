package main

import (
	"bufio"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
)

// countingProxy forwards loopback TCP connections to a Redis server and
// counts the commands clients send (top-level RESP arrays), so that
// commands per acquisition count what a library sends, not the commands its
// Lua scripts run inside the server (which INFO commandstats includes).
type countingProxy struct {
	ln       net.Listener
	target   string
	commands atomic.Int64
	wg       sync.WaitGroup
	mu       sync.Mutex
	conns    []net.Conn
}

func newCountingProxy(target string) (*countingProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &countingProxy{ln: ln, target: target}
	p.wg.Go(p.accept)
	return p, nil
}

func (p *countingProxy) addr() string { return p.ln.Addr().String() }

func (p *countingProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		p.wg.Go(func() { io.Copy(c, s); c.Close() })
		p.wg.Go(func() { p.count(io.TeeReader(c, s)); s.Close() })
	}
}

// count reads a client's request stream and counts its commands.
func (p *countingProxy) count(r io.Reader) {
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			io.Copy(io.Discard, br)
			return
		}
		if len(line) < 3 || line[0] != '*' {
			continue // inline command or stray bytes: not sent by these clients
		}
		n, _ := strconv.Atoi(string(line[1 : len(line)-2]))
		p.commands.Add(1)
		for range n { // each argument: $len\r\n data\r\n
			hdr, err := br.ReadSlice('\n')
			if err != nil || len(hdr) < 3 {
				io.Copy(io.Discard, br)
				return
			}
			size, _ := strconv.Atoi(string(hdr[1 : len(hdr)-2]))
			if _, err := br.Discard(size + 2); err != nil {
				io.Copy(io.Discard, br)
				return
			}
		}
	}
}

func (p *countingProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
