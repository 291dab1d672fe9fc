package backend

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"
)

// Records are plain keys with a short life, one key per command, routed as
// any command is (on a Cluster a record and the lock it names may be in
// different slots): what a waiter says of its wait (see the root package's
// deadlock.go). A Node serves them, with or without scripts; a quorum does
// not.
type Records interface {
	// SetRecord sets key to value for ttl (SET PX).
	SetRecord(ctx context.Context, key, value string, ttl int64) error
	// GetRecord returns key's value, and false if it has none (GET).
	GetRecord(ctx context.Context, key string) (string, bool, error)
	// DelRecord deletes key (DEL).
	DelRecord(ctx context.Context, key string) error
}

// SetRecord sets key to value for ttl milliseconds.
func (n Node) SetRecord(ctx context.Context, key, value string, ttl int64) error {
	_, err := n.do(ctx, "set", key, value, "px", ttl)
	return RedisErr(err)
}

// GetRecord reads key.
func (n Node) GetRecord(ctx context.Context, key string) (string, bool, error) {
	v, err := as[string](n.do(ctx, "get", key))
	if errors.Is(err, redis.Nil) {
		return "", false, nil
	}
	return v, err == nil, RedisErr(err)
}

// DelRecord deletes key.
func (n Node) DelRecord(ctx context.Context, key string) error {
	_, err := n.do(ctx, "del", key)
	return RedisErr(err)
}
