package main

import (
	"context"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

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
