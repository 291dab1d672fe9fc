package dlock

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/dlockio/dlock/internal/backend"
)

// Info describes the state of one lock, as read by Client.Inspect.
type Info struct {
	Name  string
	Key   string        // the Redis key of the lock
	Held  bool          // whether the key exists
	Type  string        // the key's Redis type: "string" for a plain lock, "hash" for a reentrant lock, "zset" for a semaphore or a read-write lock, "none" when free
	Token string        // the holder's lease token (plain locks; see Lock.Token)
	TTL   time.Duration // the holder's remaining lease; -1 if the key has no expiry
	Fence int64         // the last fencing token issued for the name, 0 if none

	// Meta is the holder's metadata (WithHolderMeta, HolderMeta), read from
	// its token; "" if it has none. For a reentrant lock it is that of its
	// owner's live holds, their distinct values joined with ", " if they
	// differ (Owners has each); for a semaphore, that of its live permits,
	// joined likewise (Permits has each).
	Meta string

	// Owners are a reentrant lock's owners (one, unless the hash was
	// written by hand) and their hold counts.
	Owners []Owner
	// Permits are a semaphore's live permits (Type "zset"), the soonest to
	// end first; TTL is then the latest permit's.
	Permits []Permit
	// RWHolds are a read-write lock's live holds (Type "zset" too), the
	// soonest to end first; TTL is then the latest hold's.
	RWHolds []RWHold

	// Queued is the length of the name's wait queue: the waiters of a fair
	// lock (WithFair), of a semaphore or of a read-write lock, and an
	// election's candidates, in line for it. A waiter that died
	// is counted until a release skips it or its entry expires (max(TTL,
	// 1s) after it last renewed it). Waiters that do not queue — those of
	// a lock that is not fair, a reentrant lock or a quorum — are not
	// counted.
	Queued int
}

// Owner is one owner of a reentrant lock.
type Owner struct {
	ID    string   // the Client's instance ID and the owner, "<client>/<owner>"
	Holds int64    // the owner's live holds (each a lease of its own)
	Meta  []string // the distinct holder metadata of those holds that have one, sorted
}

// infoOf is the Info of the lock name in the state st.
func infoOf(name string, st backend.State) Info {
	info := Info{Name: name, Key: st.Key, Held: st.Held, Type: st.Type, Token: st.Token, TTL: st.TTL, Fence: st.Fence,
		Meta: metaOf(st.Token), Queued: int(st.Queued)}
	for _, o := range st.Owners {
		var metas []string
		for _, h := range o.Holds {
			if m := metaOf(h.Token); m != "" {
				metas = append(metas, m)
			}
		}
		slices.Sort(metas)
		metas = slices.Compact(metas)
		info.Owners = append(info.Owners, Owner{ID: o.ID, Holds: int64(len(o.Holds)), Meta: metas})
		if len(info.Owners) == 1 {
			info.Meta = strings.Join(metas, ", ")
		}
	}
	var metas []string
	for _, p := range st.Permits {
		m := metaOf(p.Token)
		if st.RW {
			info.RWHolds = append(info.RWHolds, RWHold{Token: p.Token, TTL: p.Left, Write: p.Write, Meta: m})
		} else {
			info.Permits = append(info.Permits, Permit{Token: p.Token, TTL: p.Left, Meta: m})
		}
		if m != "" {
			metas = append(metas, m)
		}
	}
	if len(metas) > 0 {
		slices.Sort(metas)
		info.Meta = strings.Join(slices.Compact(metas), ", ")
	}
	return info
}

// Inspect reads the state of the lock name without changing it. It is for
// operators and tools: the answer may be stale by the time it arrives.
func (c *Client) Inspect(ctx context.Context, name string) (Info, error) {
	k, err := c.check(name)
	if err != nil {
		return Info{}, err
	}
	st, err := c.b.Inspect(ctx, &k)
	if err != nil {
		return Info{}, opError("inspect", name, err)
	}
	return infoOf(name, st), nil
}

// ForceRelease deletes the lock name whoever holds it, and wakes its
// waiters. It is for operators clearing a lock whose holder is known to be
// gone: if the holder is alive, it keeps running until its next extension
// finds the token missing, and overlaps with the next holder until then.
// It deletes only the holding it read (a re-sent request cannot delete the
// next holder's lock) and only a dlock lock: a key of another kind gets
// ErrWrongType. It reports whether a lock was deleted. On a semaphore it
// ends every permit held, as long as they are still the permits it read,
// and its waiters take them in queue order.
func (c *Client) ForceRelease(ctx context.Context, name string) (bool, error) {
	k, err := c.check(name)
	if err != nil {
		return false, err
	}
	ok, err := c.b.Force(ctx, &k)
	if err != nil {
		return false, opError("force release", name, err)
	}
	return ok, nil
}

// List returns the state of the held locks whose names match the glob
// pattern (Redis MATCH syntax; "" or "*" for all), sorted by name. It walks
// the keyspace with SCAN, never KEYS: on every master of a Cluster, and on
// every node of a quorum (a lock held on a majority is listed if any node
// that answered has it). Like Inspect it is for operators: locks come and
// go while it runs.
func (c *Client) List(ctx context.Context, pattern string) ([]Info, error) {
	if pattern == "" {
		pattern = "*"
	}
	match := c.opts.prefix + "{" + pattern + "}"
	keys, err := c.b.Scan(ctx, match)
	if err != nil {
		return nil, fmt.Errorf("dlock: list: %w", public(err))
	}
	names := make([]string, 0, len(keys))
	for _, key := range keys {
		names = append(names, strings.TrimSuffix(strings.TrimPrefix(key, c.opts.prefix+"{"), "}"))
	}
	slices.Sort(names)
	names = slices.Compact(names) // SCAN may return a key twice
	infos := make([]Info, 0, len(names))
	for _, name := range names {
		info, err := c.Inspect(ctx, name)
		if err != nil {
			return nil, err
		}
		if info.Held {
			infos = append(infos, info)
		}
	}
	return infos, nil
}
