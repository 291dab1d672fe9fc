package dlock

import (
	"context"
	"fmt"
	"time"
)

// Info describes the state of one lock, as read by Client.Inspect.
type Info struct {
	Name  string
	Key   string        // the Redis key of the lock
	Held  bool          // whether the key exists
	Type  string        // the key's Redis type: "string" for a plain lock, "none" when free
	Token string        // the holder's owner token (plain locks)
	TTL   time.Duration // the holder's remaining lease; -1 if the key has no expiry
	Fence int64         // the last fencing token issued for the name, 0 if none
}

// Inspect reads the state of the lock name without changing it. It is for
// operators and tools: the answer may be stale by the time it arrives.
func (c *Client) Inspect(ctx context.Context, name string) (Info, error) {
	k, err := c.check(name)
	if err != nil {
		return Info{}, err
	}
	info, err := c.b.inspect(ctx, k)
	if err != nil {
		return Info{}, fmt.Errorf("dlock: inspect %q: %w", name, err)
	}
	info.Name = name
	return info, nil
}
