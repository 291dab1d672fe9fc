package torture

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"syscall"
	"time"
)

// Server is a lock node the injector can freeze and crash
// (redisserver.Server satisfies it).
type Server interface {
	Pause() error
	Resume() error
	Restart() error // kill, then start empty on the same address
}

// Proxy is a TCP proxy in front of a lock node (redistest.Proxy satisfies it).
type Proxy interface {
	Delay(req, rep time.Duration)
	Stall()
	StallReplies()
	Cut()
	Addr() string
}

// Targets are what a round's faults can hit.
type Targets struct {
	Servers []Server  // the lock nodes in use
	Proxies [][]Proxy // per node, the proxies clients reach it through
	Procs   []*os.Process
	ProcIDs []string
	Workers []*Worker // goroutine workers whose go-redis clients can be closed
}

// Fault kinds. Restarts empty a node: the docs say a lock is then forgotten
// (one node) or may be (a quorum node back before a TTL passed), so check
// (a) exempts the window after one; every other fault must be survived.
const (
	FaultServerPause   = "server-pause"   // SIGSTOP a lock node, then SIGCONT
	FaultServerRestart = "server-restart" // SIGKILL a lock node, start it empty
	FaultDelayReq      = "delay-requests" // requests held past the read timeout
	FaultDelayRep      = "delay-replies"  // replies held past the read timeout
	FaultStallReplies  = "stall-replies"  // commands run, replies held, then cut: go-redis re-sends
	FaultStall         = "stall"          // everything held, then cut
	FaultCut           = "cut"            // connections closed
	FaultWorkerPause   = "worker-pause"   // SIGSTOP a worker process past the TTL, then SIGCONT
	FaultWorkerKill    = "worker-kill"    // SIGKILL a worker process (its leases must expire)
	FaultClientClose   = "client-close"   // close a worker's go-redis clients under its Client (closed.go)
	faultInjectorError = "injector-error" // the injector itself failed (a broken round)
)

// Injector runs a seeded sequence of faults, one at a time, until its stop
// time, recording each as a window [Inv, Ret] in the history. Every fault
// heals itself before the next starts, so when Run returns the system is
// healthy (bar what a restart emptied).
type Injector struct {
	T       Targets
	TTL     time.Duration
	Rng     *rand.Rand
	Rec     *Recorder
	Restart bool // whether node restarts are allowed this round
	Counts  map[string]int
	// Restarted lists the nodes restarted empty; read it after Run returns.
	Restarted map[int]bool
}

// Run injects faults until stop (unix ns); the last one may end a little later.
func (j *Injector) Run(stop int64) {
	j.Counts, j.Restarted = map[string]int{}, map[int]bool{}
	time.Sleep(j.dur(j.TTL/4, j.TTL/2)) // let workers start
	for i := 0; i < 200 && now() < stop; i++ {
		kind := j.pick()
		e := Event{Op: OpFault, Note: kind, Inv: now()}
		detail, err := j.inject(kind, &e)
		e.Ret = now()
		if err != nil {
			e.Note, e.Err = faultInjectorError, fmt.Sprintf("%s: %v", kind, err)
		}
		e.Name = detail
		j.Rec.Add(e)
		j.Counts[kind]++
		time.Sleep(j.dur(j.TTL/10, j.TTL/2))
	}
}

// dur returns a random duration in [lo, hi).
func (j *Injector) dur(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(j.Rng.Int64N(int64(hi-lo)))
}

// pick chooses the next fault among those the round's targets allow.
func (j *Injector) pick() string {
	kinds := []string{FaultServerPause, FaultDelayReq, FaultDelayReq, FaultDelayRep, FaultStallReplies,
		FaultStallReplies, FaultStall, FaultCut}
	if j.Restart {
		kinds = append(kinds, FaultServerRestart)
	}
	if len(j.T.Procs) > 0 {
		kinds = append(kinds, FaultWorkerPause, FaultWorkerPause)
	}
	if len(j.T.Workers) > 0 {
		kinds = append(kinds, FaultClientClose)
	}
	return kinds[j.Rng.IntN(len(kinds))]
}

// inject performs one fault and waits until it is healed. It returns what
// it hit, for the history.
func (j *Injector) inject(kind string, e *Event) (string, error) {
	node := j.Rng.IntN(len(j.T.Servers))
	e.Arg = int64(node)
	ps := j.T.Proxies[node]
	p := ps[j.Rng.IntN(len(ps))]
	target := fmt.Sprintf("node%d", node)
	switch kind {
	case FaultDelayReq, FaultDelayRep, FaultStallReplies, FaultStall, FaultCut:
		e.Via = p.Addr() // only the clients that go through it are cut off
	}
	switch kind {
	case FaultServerPause:
		s := j.T.Servers[node]
		if err := s.Pause(); err != nil {
			return target, err
		}
		time.Sleep(j.dur(j.TTL/5, j.TTL))
		return target, s.Resume()
	case FaultServerRestart:
		j.Restarted[node] = true
		return target, j.T.Servers[node].Restart()
	case FaultDelayReq, FaultDelayRep:
		d := j.dur(400*time.Millisecond, 1200*time.Millisecond) // beyond the 200-300ms read timeouts
		if kind == FaultDelayReq {
			p.Delay(d, 0)
		} else {
			p.Delay(0, d)
		}
		time.Sleep(j.dur(j.TTL/4, j.TTL))
		p.Delay(0, 0) // what is held is still delivered, late
		return fmt.Sprintf("%s delay=%v", target, d.Round(time.Millisecond)), nil
	case FaultStallReplies, FaultStall:
		if kind == FaultStall {
			p.Stall()
		} else {
			p.StallReplies()
		}
		time.Sleep(j.dur(50*time.Millisecond, 600*time.Millisecond))
		p.Cut()
		return target, nil
	case FaultCut:
		p.Cut()
		return target, nil
	case FaultWorkerPause:
		return j.pauseWorker()
	case FaultClientClose:
		return j.closeClient()
	}
	return target, fmt.Errorf("unknown fault %q", kind)
}

// pauseWorker stops a worker process for longer than the TTL: whatever it
// held expires meanwhile, and after SIGCONT it must notice before acting.
func (j *Injector) pauseWorker() (string, error) {
	i := j.Rng.IntN(len(j.T.Procs))
	p := j.T.Procs[i]
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		if errors.Is(err, os.ErrProcessDone) {
			return j.T.ProcIDs[i] + " (already exited)", nil
		}
		return j.T.ProcIDs[i], err
	}
	time.Sleep(j.dur(j.TTL*6/5, j.TTL*5/2))
	if err := p.Signal(syscall.SIGCONT); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return j.T.ProcIDs[i], err
	}
	return j.T.ProcIDs[i], nil
}

// renewMax bounds how long the injector waits for a worker whose Redis
// clients it closed to make a fresh Client: the end of the operation it
// was in (a wait of up to 3×TTL on a quorum with a minority closed, a
// critical section) and the Close of its old Client.
func (j *Injector) renewMax() time.Duration { return 10*j.TTL + closeMax }

// closeClient closes a goroutine worker's go-redis client under its Client
// while it holds and waits — the only node's, or of a quorum one node's or
// a majority's — and waits until the worker has made a fresh one.
func (j *Injector) closeClient() (string, error) {
	w := j.T.Workers[j.Rng.IntN(len(j.T.Workers))]
	n, k := len(j.T.Servers), 1
	if n > 1 && j.Rng.IntN(2) == 0 {
		k = n/2 + 1
	}
	nodes := j.Rng.Perm(n)[:k]
	what := fmt.Sprintf("%s nodes %v", w.cfg.ID, nodes)
	c := w.cutClient(nodes)
	if c == nil {
		return w.cfg.ID + " (already finished)", nil
	}
	time.Sleep(j.dur(j.TTL/4, j.TTL))
	close(c.over)
	select {
	case <-c.renewed:
		return what, nil
	case <-time.After(j.renewMax()):
		return what, fmt.Errorf("no fresh Client within %v", j.renewMax())
	}
}
