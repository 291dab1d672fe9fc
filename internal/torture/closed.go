package torture

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// This file is the client-close fault (FaultClientClose): the injector
// closes go-redis clients under a goroutine worker's Client while it
// holds and waits — its only node's, or of a quorum one node's or a
// majority's. With the only node's or a majority closed, every call
// through the Client fails with dlock.ErrClosed and its waits end so: after
// one more operation, the worker releases the handles it kept (the
// releases fail too: the leases expire), closes the Client and makes a
// fresh client and Client on the same proxies. With a minority closed the
// quorum goes on, and the worker renews once the injector's window is
// over. Check (o) holds the calls made meanwhile to ErrClosed.

// cut is one closing of a worker's Redis clients.
type cut struct {
	at      int64 // when they were closed
	nodes   []int // of n
	n       int
	all     bool          // every call must fail: the only node's, or a majority's
	stepped bool          // the worker has begun an operation since
	over    chan struct{} // closed by the injector: the worker is to renew
	renewed chan struct{} // closed by the worker once it has a fresh Client (or finished)
}

// cutClient closes the worker's go-redis clients of nodes under its
// Client. It returns nil if the worker has finished.
func (w *Worker) cutClient(nodes []int) *cut {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done || w.cut != nil {
		return nil
	}
	for _, i := range nodes {
		w.rdbs[i].Close()
	}
	w.cut = &cut{at: now(), nodes: nodes, n: len(w.rdbs), all: 2*len(nodes) > len(w.rdbs), over: make(chan struct{}), renewed: make(chan struct{})}
	return w.cut
}

// closeMax bounds the Close of a Client whose Redis clients were closed.
const closeMax = 5 * time.Second

// renewIfCut, between two operations, makes the worker a fresh Client if
// its Redis clients were closed: if its calls fail, after one whole
// operation through them (it sees ErrClosed), else once the injector's
// window is over. It reports whether the worker can go on.
func (w *Worker) renewIfCut() bool {
	w.mu.Lock()
	c := w.cut
	w.mu.Unlock()
	if c == nil {
		return true
	}
	select {
	case <-c.over:
	default:
		if !c.all || !c.stepped {
			c.stepped = true
			return true
		}
	}
	w.finish() // the handles kept: through the closed clients, their releases fail
	ctx, cancel := context.WithTimeout(context.Background(), closeMax)
	err := w.c.Close(ctx)
	cancel()
	w.closeConns()
	if err != nil {
		err = fmt.Errorf("Client.Close: %w", err)
	} else if err = w.connect(); err != nil {
		err = fmt.Errorf("a fresh Client: %w", err)
	}
	w.endCut(c, err)
	return err == nil
}

// endCuts, once the worker has finished, ends a cut it had no time to
// renew after.
func (w *Worker) endCuts() {
	w.mu.Lock()
	c := w.cut
	w.done = true
	w.mu.Unlock()
	if c != nil {
		w.endCut(c, nil)
	}
}

// endCut records the cut c (OpClosed), err being what went wrong after it.
func (w *Worker) endCut(c *cut, err error) {
	w.mu.Lock()
	w.cut = nil
	w.mu.Unlock()
	var nodes []string
	for _, i := range c.nodes {
		nodes = append(nodes, fmt.Sprint("node", i))
	}
	w.rec.Add(Event{Op: OpClosed, Inv: c.at, Ret: now(), Held: c.all, Note: strings.Join(nodes, ","), Arg: int64(c.n), Err: errText(err)})
	close(c.renewed)
}

// closedBound is how long a call through a closed Redis client may take
// to fail: it sends nothing; a second of scheduling slack on top.
const closedBound = 2 * time.Second

// checkClosed is (o): after a worker's go-redis client was closed under
// its Client (its only node's, or a majority's), every call it made until
// it had a fresh Client failed with ErrClosed within closedBound, and its
// acquisitions under way ended within their bound; then the Client closed
// and a fresh one was made. With only a minority of a quorum's clients
// closed, no call failed with ErrClosed: the Client still works. Excused: a Release, Extend, Downgrade,
// Proclaim or Resume of a lease its Lock knew lost (it answers from what
// it knows); a call whose context had ended (it may say so); a call
// the worker's refuser failed before it reached the client (refuse.go); and a
// quorum's Release that returned nil, as one does when a node confirmed
// the release and the others did not answer (backend/quorum.go: their
// leases expire).
func checkClosed(h []Event, r *Report) {
	for _, c := range h {
		if c.Op != OpClosed {
			continue
		}
		r.Checked["o"]++
		if c.Err != "" {
			r.fail("o", "", c.Ret, "%s: after its Redis client was closed (%s): %s", c.W, c.Note, c.Err)
		}
		for _, e := range h {
			always := e.Op == OpAcquire || e.Op == OpTry || e.Op == OpDoRet || e.Op == OpLeader || e.Op == OpInspect || e.Op == OpSize
			held := e.Op == OpRelease || e.Op == OpExtend || e.Op == OpDowngrade || e.Op == OpProclaim || e.Op == OpResume
			if e.W != c.W || e.Grp != "" || !always && !held || e.Ret < c.Inv || e.Inv > c.Ret {
				continue
			}
			r.Checked["o"]++
			switch {
			case !c.Held: // a minority of a quorum: the Client still works
				if e.Inv >= c.Inv && e.Res == "closed" {
					r.fail("o", e.Name, e.Ret, "%s: %s returned ErrClosed with the clients of only %s of its %d nodes closed: %s",
						c.W, e.Op, c.Note, c.Arg, e.Err)
				}
			case e.Inv < c.Inv: // under way at the closing
				if always && e.Tok == "" && e.Ret > c.Inv+max(e.Bound, int64(closedBound)) {
					r.fail("o", e.Name, e.Ret, "%s: %s went on %v after its Redis client was closed (%s): %s %s",
						c.W, e.Op, time.Duration(e.Ret-c.Inv).Round(time.Millisecond), c.Note, e.Res, e.Err)
				}
			case e.Ret-e.Inv > int64(closedBound):
				r.fail("o", e.Name, e.Ret, "%s: %s called after its Redis client was closed (%s) took %v: %s %s",
					c.W, e.Op, c.Note, time.Duration(e.Ret-e.Inv).Round(time.Millisecond), e.Res, e.Err)
			case e.Op == OpRelease && e.Res == "ok" && c.Arg > 1:
			case e.Res != "closed" && (always || e.Held) && !ctxEnded(e) && !refusedHere(e):
				r.fail("o", e.Name, e.Ret, "%s: %s called after its Redis client was closed (%s) returned %s, not ErrClosed: %s",
					c.W, e.Op, c.Note, e.Res, e.Err)
			}
		}
	}
}

// ctxEnded reports whether the call e failed for its context's end, which
// it may report rather than ErrClosed (a Do nested in the fn of a lease
// that was lost).
func ctxEnded(e Event) bool {
	return strings.Contains(e.Err, context.Canceled.Error()) || strings.Contains(e.Err, context.DeadlineExceeded.Error())
}
