package dlock

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/dlockio/dlock/internal/backend"
)

// resumeGap is how far above the last ordered extension that Redis applied
// to a lease its resumed Lock numbers its own: copies of the old holder's
// extensions still in flight carry lower numbers, so none of them can undo
// one of the new holder's, nor be mistaken for it.
const resumeGap = 1 << 20

// resume takes over the live lease whose token the pending Lock l carries
// (see Resume): one ordered extension to the call's lease time, which
// also checks that the lease is still l's kind of hold. Its errors are
// those of a TryAcquire, and ErrNotHeld when the lease has ended.
func (c *Client) resume(ctx context.Context, l *Lock) (*Lock, error) {
	op := l.k.acquireOp
	if err := c.b.Prepare(ctx, l.cl); err != nil {
		return nil, opError(op, l.name, err)
	}
	probe := *l.cl // (a quorum node's call may outlive Seq's, and the claim is changed below)
	seq, _, err := c.b.Seq(ctx, &probe)
	switch {
	case err != nil:
		return nil, opError(op, l.name, err)
	case seq < 0:
		return nil, opError(op, l.name, backend.Because(ErrNotHeld, "the lease of that token was ended"))
	}
	seq += resumeGap
	// Its number outranks the Locks' before it; the rest tells its numbers
	// from another resumer's that read the same seq.
	l.cl.Resumer = strconv.FormatInt(seq, 10) + ":" + newToken()[:8]
	t := l.termsFrom(time.Now())
	ok, err := c.b.Extend(ctx, l.cl, t.ask, seq)
	switch {
	case errors.Is(err, backend.ErrSuperseded):
		// Over a quorum it may have landed on the nodes that the other
		// Lock's resume missed: undone there, as a failed attempt is.
		c.undo(ctx, l.cl)
		return nil, opError(op, l.name, backend.Because(ErrNotHeld, "another Lock resumed the lease first"))
	case errors.Is(err, backend.ErrNotDurable), errors.Is(err, backend.ErrReplicaAck):
		// Extended, so the Lock that held the lease is superseded, but not
		// acknowledged: undone, as a TryAcquire's grant is, rather than left
		// to run out driven by nobody.
		c.undo(ctx, l.cl)
		return nil, opError(op, l.name, backend.Because(ErrNotAcquired, err.Error()+" (undone)", err))
	case err != nil:
		if backend.Transient(err) && !backend.Unsent(err) {
			// The extension may have landed (a reply lost or late, a quorum
			// node's still on its way): undone, for the same reason.
			c.undo(ctx, l.cl)
		}
		if qe, ok := errors.AsType[*QuorumError](err); ok {
			qe.Op = "resume" // (this call's own: a resume's matches ErrNotAcquired)
		}
		return nil, opError(op, l.name, err)
	case !ok:
		return nil, opError(op, l.name, backend.Because(ErrNotHeld, "no live lease of that token here: it ended, it is another kind's hold, or it was resumed again since"))
	case !time.Now().Before(t.until):
		c.undo(ctx, l.cl) // (extended, too late to be used)
		return nil, opError(op, l.name, backend.Because(ErrNotHeld, errTooSlow.Error()))
	}
	l.extSeq = seq // (> 0: every later extension is ordered too)
	l.activate(0, t)
	return l, nil
}
