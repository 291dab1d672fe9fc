package dlock

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/dlockio/dlock/internal/pubsub"
)

// RequestRelease asks the holders of the lock name to release it, for reason
// (valid UTF-8, at most [MaxMetaLen] bytes): each holder that watches its lease
// ([WatchLoss]) hears it on [Lock.ReleaseRequests] and decides. It is a pub/sub
// message: a holder that is not listening at that moment never hears it, and
// nil means it was sent, not heard. It releases nothing itself.
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

// ReleaseRequests returns a channel of the reasons of the requests to
// release the lease ([Client.RequestRelease]) heard while it is held; a slow
// reader gets the latest. It is nil unless the lease is watched ([WatchLoss]).
// A request sent once the acquisition returned is heard, unless the pub/sub
// connection was down then (see [WatchLoss]).
func (l *Lock) ReleaseRequests() <-chan string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.requests
}

// heardRequests is how many request ids a Lock remembers (requested).
const heardRequests = 8

// requested tells ReleaseRequests' reader of the request msg ("<id>
// <reason>"), replacing one it has not read. Each node of a quorum
// publishes its copy: a request whose id was already told is dropped.
func (l *Lock) requested(msg string) {
	id, reason, _ := strings.Cut(msg, " ")
	l.mu.Lock()
	seen := slices.Contains(l.heard, id)
	if !seen {
		l.heard = append(l.heard[max(len(l.heard)-heardRequests+1, 0):], id)
	}
	l.mu.Unlock()
	if seen {
		return
	}
	for {
		select {
		case l.requests <- reason:
			return
		default:
			select {
			case <-l.requests:
			default:
			}
		}
	}
}
