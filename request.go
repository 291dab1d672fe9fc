package dlock

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/dlockio/dlock/internal/pubsub"
)

// RequestRelease asks the holders of name to let go, for reason (UTF-8, ≤
// [MaxMetaLen] bytes); only those listening hear it ([Lock.ReleaseRequests]).
func (c *Client) RequestRelease(ctx context.Context, name, reason string) error {
	k, err := c.check(name)
	switch {
	case err != nil:
		return err
	case len(reason) > MaxMetaLen || !utf8.ValidString(reason):
		return fmt.Errorf("%w: request release %q: the reason must be valid UTF-8 of at most %d bytes", ErrInvalid, name, MaxMetaLen)
	}
	if err := c.b.Announce(ctx, &k, pubsub.Request+newToken()+" "+reason); err != nil {
		return opError("request release", name, err)
	}
	return nil
}

// ReleaseRequests returns the reasons of requests ([Client.RequestRelease])
// sent after the acquisition returned; nil without [WatchLoss].
func (l *Lock) ReleaseRequests() <-chan string { return l.requests } // (set before the Lock is returned)

// heardRequests is how many request ids a Lock remembers (requested).
const heardRequests = 8

// requested tells ReleaseRequests' reader of the request msg ("<id>
// <reason>"), replacing one it has not read. Each node of a quorum
// publishes its copy: a request whose id was already told is dropped.
func (l *Lock) requested(msg string) {
	id, reason, _ := strings.Cut(msg, " ")
	l.mu.Lock()
	defer l.mu.Unlock()
	if slices.Contains(l.heard, id) {
		return
	}
	l.heard = append(l.heard[max(len(l.heard)-heardRequests+1, 0):], id)
	select {
	case <-l.requests:
	default:
	}
	l.requests <- reason // (only this sends, under l.mu: there is room)
}
