package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/internal/script"
)

// W0 is the server's ceiling: no lock library, only the commands of one
// lock+unlock pair, pipelined deep over a few connections, so that
// redis-server's thread stays busy and its CPU per pair is what the
// commands themselves cost. The commands go as raw RESP over net.Conn, not
// through go-redis pipelines: on a 2-core machine, where the client and
// Redis share the CPU, go-redis pipelines took 1.3-2µs of client CPU per
// pair, as much as Redis or more, and reached 60-90% of this client's
// pairs/s for (a) and (b) at the same Redis CPU per pair; this client
// takes 0.4-0.6µs.
const (
	w0Conns = 16
	w0Pairs = 64 // pairs per round trip on one connection: 128 commands in flight
)

type w0Case struct {
	id, name string
	scripts  []string // the scripts' texts, loaded before the run, as a library does on first use
	// pair appends the lock and the unlock of name n, with a fresh token, in RESP.
	pair func(b []byte, n *w0Name, token string) []byte
	// lockOK and unlockOK tell whether a reply is the one of a pair that
	// took a free lock and released it: anything else fails the run.
	lockOK, unlockOK func(reply) bool
}

// w0Name holds the keys of one lock name, laid out as dlock lays them out
// (backend.KeysFor in the library).
type w0Name struct{ lock, fence, queue, waiters, channel, wake string }

func newW0Name(conn, i int) w0Name {
	base := fmt.Sprintf("dlock:{w0:%d:%d}", conn, i)
	return w0Name{lock: base, fence: base + ":fence", queue: base + ":q", waiters: base + ":qw", channel: base + ":ch", wake: base + ":w"}
}

// compareAndDelete is the usual release of a SET NX PX lock: delete the key
// only if it still holds our token.
const compareAndDeleteSrc = `if redis.call('GET',KEYS[1])==ARGV[1] then return redis.call('DEL',KEYS[1]) end return 0`

var compareAndDelete = redis.NewScript(compareAndDeleteSrc)

var (
	ttlMS    = strconv.FormatInt(ttl.Milliseconds(), 10)
	windowMS = strconv.FormatInt(min(ttl, time.Minute).Milliseconds(), 10) // dlock's revocation window, for a marked lease
	cleanMS  = "0"                                                         // a clean lease's marker window: no marker (and no window sent)
	queueMS  = strconv.FormatInt(max(ttl, time.Second).Milliseconds(), 10) // a fair queue entry's life
	fenceMS  = strconv.FormatInt(time.Minute.Milliseconds(), 10)           // dlock's fence window
)

var w0Cases = []w0Case{
	{id: "a", name: "(a) SET NX PX + DEL",
		pair: func(b []byte, n *w0Name, tok string) []byte {
			b = appendCmd(b, "SET", n.lock, tok, "NX", "PX", ttlMS)
			return appendCmd(b, "DEL", n.lock)
		},
		lockOK: isOK, unlockOK: isInt(1)},
	{id: "b", name: "(b) SET NX PX + Lua compare-and-delete", scripts: []string{compareAndDeleteSrc},
		pair: func(b []byte, n *w0Name, tok string) []byte {
			b = appendCmd(b, "SET", n.lock, tok, "NX", "PX", ttlMS)
			return appendCmd(b, "EVALSHA", compareAndDelete.Hash(), "1", n.lock, tok)
		},
		lockOK: isOK, unlockOK: isInt(1)},
	// KEYS and ARGV as the headers of acquire.lua and release.lua document
	// them; a first try (no queueing), as an uncontended Acquire sends, and
	// the release of a clean lease (every request answered: no marker).
	{id: "c unfair", name: "(c) dlock's scripts, unfair", scripts: []string{script.Named("acquire").Source(), script.Named("release").Source()},
		pair: unfairPair(cleanMS), lockOK: isInt(0), unlockOK: isInt(1)},
	{id: "c unfair marked", name: "(c) dlock's scripts, unfair, the lease marked", scripts: []string{script.Named("acquire").Source(), script.Named("release").Source()},
		pair: unfairPair(windowMS), lockOK: isInt(0), unlockOK: isInt(1)},
	{id: "c fair", name: "(c) dlock's scripts, fair", scripts: []string{script.Named("acquire_fair").Source(), script.Named("release_fair").Source()},
		pair: func(b []byte, n *w0Name, tok string) []byte {
			rev := n.lock + ":r:" + tok
			b = appendCmd(b, "EVALSHA", script.Named("acquire_fair").Hash(), "6", n.lock, n.fence, n.queue, n.waiters, rev, n.wake,
				tok, ttlMS, queueMS+" PUBLISH "+fenceMS)
			return appendCmd(b, "EVALSHA", script.Named("release_fair").Hash(), "5", n.lock, n.fence, n.queue, n.waiters, rev,
				tok, "PUBLISH "+fenceMS)
		},
		lockOK: isInt(0), unlockOK: isInt(1)},
	{id: "c permit", name: "(c) dlock's scripts, a semaphore's permit", scripts: []string{script.Named("hold_acquire").Source(), script.Named("hold_release").Source()},
		pair: func(b []byte, n *w0Name, tok string) []byte {
			rev := n.lock + ":r:" + tok
			b = appendCmd(b, "EVALSHA", script.Named("hold_acquire").Hash(), "5", n.lock, n.fence, n.queue, n.waiters, rev,
				tok, ttlMS, "0", queueMS, n.channel, "PUBLISH", fenceMS, "3")
			return appendCmd(b, "EVALSHA", script.Named("hold_release").Hash(), "5", n.lock, n.fence, n.queue, n.waiters, rev,
				tok, n.channel, "PUBLISH", fenceMS)
		},
		lockOK: isInt(0), unlockOK: isInt(1)},
}

// unfairPair is an unfair lock's uncontended pair whose release writes a
// marker for window ms (cleanMS: none, and no window is sent).
func unfairPair(window string) func(b []byte, n *w0Name, tok string) []byte {
	return func(b []byte, n *w0Name, tok string) []byte {
		rev := n.lock + ":r:" + tok
		b = appendCmd(b, "EVALSHA", script.Named("acquire").Hash(), "2", n.lock, rev, tok, ttlMS)
		if window == cleanMS {
			return appendCmd(b, "EVALSHA", script.Named("release").Hash(), "3", n.lock, n.wake, rev, tok)
		}
		return appendCmd(b, "EVALSHA", script.Named("release").Hash(), "3", n.lock, n.wake, rev, tok, "PUBLISH", window)
	}
}

type w0Result struct {
	id, name string
	depth    int // pairs per round trip on one connection
	rate     float64
	// serverCPU is redis-server's CPU time per pair (INFO cpu), clientCPU
	// this process's (getrusage): if the client's is near the server's on a
	// machine with few cores, the client is part of what limits the rate.
	serverCPU, clientCPU time.Duration
}

// ceiling runs one W0 case for -duration on w0Conns connections, pairs
// pairs in each round trip.
func ceiling(c w0Case, addr string, admin *redis.Client, pairs int) (w0Result, error) {
	reset(admin)
	for _, s := range c.scripts {
		if err := admin.ScriptLoad(context.Background(), s).Err(); err != nil {
			return w0Result{}, err
		}
	}
	counts := make([]int, w0Conns)
	errs := make([]error, w0Conns)
	cpu0, self0 := serverCPU(admin), processCPU()
	start := time.Now()
	stop := start.Add(*duration)
	var wg sync.WaitGroup
	for i := range w0Conns {
		wg.Go(func() { counts[i], errs[i] = ceilingConn(c, addr, i, pairs, stop) })
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu1, self1 := serverCPU(admin), processCPU()
	if err := errors.Join(errs...); err != nil {
		return w0Result{}, err
	}
	done := 0
	for _, n := range counts {
		done += n
	}
	r := w0Result{id: c.id, name: c.name, depth: pairs, rate: float64(done) / elapsed.Seconds()}
	if done > 0 {
		r.serverCPU = (cpu1 - cpu0) / time.Duration(done)
		r.clientCPU = (self1 - self0) / time.Duration(done)
	}
	return r, nil
}

// ceilingConn sends rounds of pairs pairs on one connection until stop,
// each pair on its own name (the same names every round, as W1 keeps one
// name per goroutine) with a fresh token (dlock refuses a token whose lease
// ended), and returns how many pairs it completed.
func ceilingConn(c w0Case, addr string, conn, pairs int, stop time.Time) (int, error) {
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	names := make([]w0Name, pairs)
	for i := range names {
		names[i] = newW0Name(conn, i)
	}
	r := bufio.NewReaderSize(nc, 64<<10)
	var buf []byte
	var seq uint64
	done := 0
	for time.Now().Before(stop) {
		buf = buf[:0]
		for i := range names {
			seq++
			buf = c.pair(buf, &names[i], w0Token(conn, seq))
		}
		if _, err := nc.Write(buf); err != nil {
			return done, err
		}
		for range names {
			if err := expect(r, c.lockOK, "lock"); err != nil {
				return done, err
			}
			if err := expect(r, c.unlockOK, "unlock"); err != nil {
				return done, err
			}
		}
		done += len(names)
	}
	return done, nil
}

// w0Token is a 22-character token (the length of dlock's), unique across
// connections.
func w0Token(conn int, seq uint64) string {
	var b [22]byte
	v := seq*w0Conns + uint64(conn)
	for i := len(b) - 1; i >= 0; i-- {
		b[i] = byte('0' + v%10)
		v /= 10
	}
	return string(b[:])
}

func appendCmd(b []byte, args ...string) []byte {
	b = append(b, '*')
	b = strconv.AppendInt(b, int64(len(args)), 10)
	b = append(b, "\r\n"...)
	for _, a := range args {
		b = append(b, '$')
		b = strconv.AppendInt(b, int64(len(a)), 10)
		b = append(b, "\r\n"...)
		b = append(b, a...)
		b = append(b, "\r\n"...)
	}
	return b
}

// reply is one RESP reply of the kinds W0's commands return: a status
// ('+'), an integer (':', n), or a bulk string ('$', n = its length, -1 for nil).
type reply struct {
	kind byte
	n    int64
}

func isOK(r reply) bool { return r.kind == '+' }

func isInt(v int64) func(reply) bool { return func(r reply) bool { return r.kind == ':' && r.n == v } }

func expect(r *bufio.Reader, ok func(reply) bool, what string) error {
	rep, err := readReply(r)
	if err != nil {
		return err
	}
	if !ok(rep) {
		return fmt.Errorf("W0 %s: unexpected reply %c%d", what, rep.kind, rep.n)
	}
	return nil
}

func readReply(r *bufio.Reader) (reply, error) {
	line, err := r.ReadSlice('\n')
	if err != nil {
		return reply{}, err
	}
	if len(line) < 3 {
		return reply{}, fmt.Errorf("W0: short reply %q", line)
	}
	kind, body := line[0], string(line[1:len(line)-2])
	switch kind {
	case '+':
		return reply{kind: kind}, nil
	case '-':
		return reply{}, errors.New("W0: " + body)
	case ':', '$':
		n, err := strconv.ParseInt(body, 10, 64)
		if err != nil {
			return reply{}, err
		}
		if kind == '$' && n >= 0 {
			_, err = r.Discard(int(n) + 2)
		}
		return reply{kind: kind, n: n}, err
	}
	return reply{}, fmt.Errorf("W0: unexpected reply %q", line)
}

// processCPU returns the CPU time this process has used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// depthSweep runs dlock's cases of W0 (c) at each depth of -w0depths: the
// server's CPU per pair against the commands each write carries (twice the
// depth), which is what a deeper batch can still save.
func depthSweep(addr string, admin *redis.Client, depths []int) ([]w0Result, error) {
	var out []w0Result
	for _, d := range depths {
		for _, c := range w0Cases {
			if !strings.HasPrefix(c.id, "c") {
				continue
			}
			r, err := ceiling(c, addr, admin, d)
			if err != nil {
				return out, fmt.Errorf("%s at depth %d: %w", c.name, d, err)
			}
			out = append(out, r)
		}
	}
	return out, nil
}

func (r *report) w0DepthMarkdown(b *strings.Builder) {
	if len(r.w0depth) == 0 {
		return
	}
	fmt.Fprintf(b, "**W0 by depth** (W0's (c) cases with D pairs, 2D commands, in each write on each of %d connections: "+
		"Redis CPU per pair against the commands a write carries)\n\n", w0Conns)
	b.WriteString("| commands per pair | commands per write | pairs/s | Redis CPU/pair | client CPU/pair |\n")
	b.WriteString("|---|---:|---:|---:|---:|\n")
	for _, x := range r.w0depth {
		fmt.Fprintf(b, "| %s | %d | %.0f | %s | %s |\n", x.name, 2*x.depth, x.rate, µs(x.serverCPU), µs(x.clientCPU))
	}
	b.WriteString("\n")
}
