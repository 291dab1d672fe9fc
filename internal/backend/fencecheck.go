package backend

import (
	"context"
	"strconv"

	"github.com/dlockio/dlock/internal/script"
)

// fenceCurrent reads whether a fence is current; not loaded (see
// loadable): FenceCurrent is not timed.
var fenceCurrent = script.Named("fence_current")

// FenceCurrent reports whether fence is still current for the lock k of
// kind kind (a string or hash at the lock key): the lease of holder (its
// token, or a reentrant lock's owner id) holds it and no newer fence was
// issued for the name (see fence_current.lua). It writes nothing. A key of
// another type at the lock or fence key is ErrWrongType.
func (n Node) FenceCurrent(ctx context.Context, k *Keys, kind Kind, holder string, fence int64) (bool, error) {
	v, err := as[int64](n.run(ctx, fenceCurrent, []any{k.Lock, k.Fence}, holder, strconv.FormatInt(fence, 10), kind.shape().typ))
	if err != nil {
		return false, n.wrongKind(ctx, k.Lock, kind, RedisErr(err))
	}
	return v == 1, nil
}
