package dlock

import (
	"context"
	"fmt"

	"github.com/dlockio/dlock/internal/backend"
)

// FenceCurrent reports whether fence is the lock name's newest and token's
// lease holds it; it only reads, and may be stale. [ErrInvalid]: bad input,
// NewRedlock, WithoutScripts; [ErrWrongType]: another kind, foreign keys.
func (c *Client) FenceCurrent(ctx context.Context, name string, fence int64, token string) (bool, error) {
	k, err := c.check(name)
	switch {
	case err != nil:
		return false, err
	case fence <= 0:
		return false, fmt.Errorf("%w: FenceCurrent(%q): the fence %d is not positive", ErrInvalid, name, fence)
	case token == "":
		return false, fmt.Errorf("%w: FenceCurrent(%q): empty token", ErrInvalid, name)
	}
	current, err := backend.OpValue[bool](ctx, c.b, func(ctx context.Context, n backend.Node) (any, error) {
		return n.FenceCurrent(ctx, &k, c.own.lease, token, fence)
	})
	switch refused := unserved(fmt.Sprintf("FenceCurrent(%q)", name), words{plural: "fence checks", verb: "make"}, err); {
	case refused != nil:
		return false, refused
	case err != nil:
		return false, opError("fence check", name, err)
	}
	return current, nil
}
