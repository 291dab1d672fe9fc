package main

import (
	"context"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/redisserver"
)

// redisURLs returns the Redis URLs from the flags, else from $REDIS_URL.
func redisURLs(flagged urlList) []string {
	if len(flagged) > 0 {
		return flagged
	}
	if u := os.Getenv("REDIS_URL"); u != "" {
		return []string{u}
	}
	return nil
}

// connect opens a client for url and checks that Redis answers.
func connect(ctx context.Context, rawURL string) (*redis.Client, error) {
	opts, err := redis.ParseURL(rawURL)
	if err != nil {
		return nil, fail(exitConfig, "bad Redis URL %s: %v", redact(rawURL), strings.ReplaceAll(err.Error(), rawURL, "<url>"))
	}
	if opts.Password == "" {
		opts.Password = os.Getenv("REDIS_PASSWORD")
	}
	rdb := redis.NewClient(opts)
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := rdb.Ping(pctx).Err(); err != nil {
		rdb.Close()
		return nil, fail(exitRedis, "cannot reach Redis at %s: %v", redact(rawURL), err)
	}
	return rdb, nil
}

// connectOne connects to the single Redis the command needs.
func connectOne(ctx context.Context, flagged urlList) (*redis.Client, error) {
	urls := redisURLs(flagged)
	switch len(urls) {
	case 0:
		return nil, fail(exitConfig, "no Redis given: pass --redis URL or set REDIS_URL")
	case 1:
		return connect(ctx, urls[0])
	}
	return nil, fail(exitConfig, "%d Redis URLs given; this command takes one", len(urls))
}

// lockClient connects to the Redis the flags name and returns a dlock
// Client for it: one URL for a single deployment, several for a quorum of
// independent masters (Redlock). closeFn closes the connections.
func lockClient(ctx context.Context, flagged urlList, opts ...dlock.Option) (c *dlock.Client, closeFn func(), err error) {
	urls := redisURLs(flagged)
	if len(urls) == 0 {
		return nil, nil, fail(exitConfig, "no Redis given: pass --redis URL or set REDIS_URL")
	}
	var nodes []redis.UniversalClient
	closeFn = func() {
		for _, n := range nodes {
			n.Close()
		}
	}
	for _, u := range urls {
		rdb, err := connect(ctx, u)
		if err != nil && len(urls) == 1 {
			return nil, nil, err
		}
		if err != nil { // a quorum tolerates a minority of nodes down
			opts, _ := redis.ParseURL(u)
			rdb = redis.NewClient(opts)
		}
		nodes = append(nodes, rdb)
	}
	if len(nodes) == 1 {
		return dlock.New(nodes[0], opts...), closeFn, nil
	}
	return dlock.NewRedlock(nodes, opts...), closeFn, nil
}

// redact hides the password of a URL for messages.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "<unparsable URL>"
	}
	return u.Redacted()
}

// privateRedis starts a redis-server for the demo when no Redis was given.
func privateRedis() (*redisserver.Server, error) {
	if _, err := redisserver.Binary(); err != nil {
		return nil, fail(exitConfig, "no Redis given and %v", err)
	}
	s, err := redisserver.Start()
	if err != nil {
		return nil, fail(exitRedis, "start a private redis-server: %v", err)
	}
	return s, nil
}
