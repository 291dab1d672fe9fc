package dlock

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/dlockio/dlock/internal/backend"
)

// Info is the state of one lock, as [Client.Inspect] reads it.
type Info struct {
	Name    string
	Key     string        // the lock's Redis key
	Held    bool          // whether the key exists
	Type    string        // the key's type: "string", "hash" (reentrant), "zset" (semaphore, read-write lock) or "none"
	Token   string        // the holder's lease token (plain locks)
	TTL     time.Duration // the holder's remaining lease; -1 if the key has no expiry
	Fence   int64         // the last fence issued for the name; 0 if none
	Meta    string        // the holders' metadata, distinct values joined with ", "; an election leader's value as Leader reads it
	Owners  []Owner       // a reentrant lock's owners
	Permits []Permit      // a semaphore's live permits, the soonest to end first
	RWHolds []RWHold      // a read-write lock's live holds, the soonest to end first
	Queued  int           // live waiters in the fair queue (unfair ones are not counted)
	InDelay bool          // every lease has at most this Client's LockDelay left: its validity ended
}

// parts fill each the part of an Info that one kind's holds show (Owners,
// Permits, RWHolds) from the lock's state: each kind adds its own where it
// is declared (part).
var parts []func(*Info, backend.State)

// part adds fill to parts.
func part(fill func(*Info, backend.State)) bool { parts = append(parts, fill); return true }

// metasOf returns the distinct values that the holds hs show, each as
// told says (a leader its proclaimed value, if extra holds one: a lock's
// one holder; any other its metadata), but "", sorted.
func metasOf(hs []backend.Hold, extra backend.Extra) []string {
	var ms []string
	for _, h := range hs {
		if _, m := told(h.Token, extra); m != "" {
			ms = append(ms, m)
		}
	}
	slices.Sort(ms)
	return slices.Compact(ms)
}

// Inspect reads the state of the lock name; it may be stale on arrival.
func (c *Client) Inspect(ctx context.Context, name string) (Info, error) {
	k, err := c.check(name)
	if err != nil {
		return Info{}, err
	}
	st, err := c.b.Inspect(ctx, &k)
	if err != nil {
		return Info{}, opError("inspect", name, err)
	}
	info := Info{Name: name, Key: st.Key, Held: st.Held, Type: st.Type, Token: st.Token, TTL: st.TTL, Fence: st.Fence,
		Meta: strings.Join(metasOf(st.Leases, st.Extra), ", "), Queued: int(st.Queued)}
	for _, fill := range parts {
		fill(&info, st)
	}
	// InDelay: the longest lease left is at most this Client's LockDelay (a
	// holder's own extensions keep its lease above it).
	left, delay := time.Duration(-1), c.opts.lease.delay
	for _, h := range st.Leases {
		left = max(left, h.Left)
	}
	info.InDelay = delay > 0 && st.Held && left >= 0 && left <= delay
	return info, nil
}

// ForceRelease deletes the lock name and its holds ([ErrWrongType] if foreign),
// reporting if any; a live holder overlaps the next until it extends.
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

// List returns the state of the held locks whose names match the glob pattern
// ("" for all), sorted by name. It uses SCAN: locks come and go while it runs.
func (c *Client) List(ctx context.Context, pattern string) ([]Info, error) {
	prefix := strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`, `[`, `\[`).Replace(c.opts.prefix) // (as written, not a glob)
	keys, err := c.b.Scan(ctx, prefix+"{"+cmp.Or(pattern, "*")+"}")
	if err != nil {
		return nil, fmt.Errorf("dlock: list: %w", unprefixed(err))
	}
	for i, key := range keys {
		keys[i] = strings.TrimSuffix(strings.TrimPrefix(key, c.opts.prefix+"{"), "}")
	}
	slices.Sort(keys)
	names := slices.Compact(keys) // (SCAN may return a key twice)
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

// told is what extra, read beside the holder with token, says of it (see
// backend.Extra): the owner it names, and what it shows of itself; a nil
// extra names no owner, and the holder shows its metadata.
func told(token string, extra backend.Extra) (owner, shows string) {
	if extra == nil {
		return "", metaOf(token)
	}
	return extra.Holder(metaOf(token))
}
