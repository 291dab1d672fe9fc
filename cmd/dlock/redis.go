package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
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

// target is where a command's locks live: the Redis nodes (--redis,
// repeated for a quorum) and the key prefix (--prefix).
type target struct {
	urls      urlList
	prefix    string
	noScripts bool
}

// targetFlags defines --redis and --prefix on fs.
func targetFlags(fs *flag.FlagSet) *target {
	t := &target{}
	fs.Var(&t.urls, "redis", "Redis `URL` (default $REDIS_URL); repeat it for a quorum of independent masters (Redlock)")
	fs.StringVar(&t.prefix, "prefix", dlock.DefaultPrefix, "the key `prefix` the locks were taken with (WithPrefix)")
	fs.BoolVar(&t.noScripts, "no-scripts", false, "run no Lua scripts, for a Redis user denied EVAL (WithoutScripts): plain locks, unfair waiting")
	return t
}

// client opens the Client of t's nodes and prefix, with opts.
func (t *target) client(ctx context.Context, opts ...dlock.Option) (*dlock.Client, func(), error) {
	if t.noScripts {
		opts = append(opts, dlock.WithoutScripts())
	}
	return lockClient(ctx, t.urls, append([]dlock.Option{dlock.WithPrefix(t.prefix)}, opts...)...)
}

// connect opens a client for url and checks that Redis answers.
func connect(ctx context.Context, rawURL string) (redis.UniversalClient, error) {
	rdb, err := newRedis(rawURL)
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	// go-redis does not give up a blocked read when ctx is cancelled, so
	// wait for the PING apart: Ctrl-C must not wait for Redis.
	pinged := make(chan error, 1)
	go func() { pinged <- rdb.Ping(pctx).Err() }()
	select {
	case err = <-pinged:
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err != nil {
		rdb.Close()           // ends a PING still in flight
		if ctx.Err() != nil { // a signal, not Redis, ended the attempt
			return nil, interrupted(ctx, "while connecting to Redis at %s", redact(rawURL))
		}
		return nil, fail(exitRedis, "cannot reach Redis at %s: %v", redact(rawURL), err)
	}
	return rdb, nil
}

// urlShapes says which Redis URLs dlock takes, for its error messages.
const urlShapes = "want redis://[user:password@]host:port[/db] (rediss:// for TLS), unix:///path/to/socket, " +
	"redis+sentinel://[user:password@]host:port?master_name=NAME[&addr=host:port…] for Sentinel, or " +
	"redis+cluster://[user:password@]host:port[?addr=host:port…] for a Cluster"

// newRedis returns a go-redis client for rawURL: a single server, a
// Sentinel-managed master (redis+sentinel://, or a master_name parameter)
// or a Cluster (redis+cluster://); rediss+ schemes use TLS. A password the
// URL lacks comes from $REDIS_PASSWORD, or the file $REDIS_PASSWORD_FILE
// names: never from argv.
func newRedis(rawURL string) (redis.UniversalClient, error) {
	bad := func(err error) error {
		return fail(exitConfig, "bad Redis URL %s: %s (%s)", redact(rawURL), strings.ReplaceAll(err.Error(), rawURL, "<url>"), urlShapes)
	}
	password, err := envPassword()
	if err != nil {
		return nil, fail(exitConfig, "%v", err)
	}
	scheme, rest, _ := strings.Cut(rawURL, "://")
	base, kind, _ := strings.Cut(scheme, "+")
	if kind == "" && strings.Contains(rawURL, "master_name=") {
		kind = "sentinel"
	}
	switch kind {
	case "":
		opts, err := redis.ParseURL(rawURL)
		if err != nil {
			return nil, bad(err)
		}
		opts.Password = cmp.Or(opts.Password, password)
		return redis.NewClient(opts), nil
	case "sentinel":
		opts, err := redis.ParseFailoverURL(base + "://" + rest)
		if err == nil && opts.MasterName == "" {
			err = errors.New("a Sentinel URL needs master_name=NAME")
		}
		if err != nil {
			return nil, bad(err)
		}
		opts.Password = cmp.Or(opts.Password, opts.SentinelPassword, password) // the master's; the URL's userinfo is the Sentinels'
		return redis.NewFailoverClient(opts), nil
	case "cluster":
		opts, err := redis.ParseClusterURL(base + "://" + rest)
		if err != nil {
			return nil, bad(err)
		}
		opts.Password = cmp.Or(opts.Password, password)
		return redis.NewClusterClient(opts), nil
	}
	return nil, bad(fmt.Errorf("unknown scheme %q", scheme))
}

// envPassword returns the password from $REDIS_PASSWORD or the file
// $REDIS_PASSWORD_FILE names (its first line), or "".
func envPassword() (string, error) {
	if p := os.Getenv("REDIS_PASSWORD"); p != "" {
		return p, nil
	}
	file := os.Getenv("REDIS_PASSWORD_FILE")
	if file == "" {
		return "", nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("REDIS_PASSWORD_FILE: %w", err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return strings.TrimRight(line, "\r"), nil
}

// lockClient connects to the Redis the flags name and returns a dlock
// Client for it: one URL for a single deployment, several for a quorum of
// independent masters (Redlock). closeFn closes the connections. The
// caller checks the flags that opts come from first, and reports a bad one
// in the flag's own name (see checkTTL). A quorum
// tolerates a minority of nodes that do not answer; without a majority it
// fails at once, naming the nodes, rather than wait for them unseen.
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
	// All at once: nodes that do not answer cost one timeout, not one each.
	type conn struct {
		rdb redis.UniversalClient
		err error
	}
	conns := make([]conn, len(urls))
	var wg sync.WaitGroup
	for i, u := range urls {
		wg.Go(func() { conns[i].rdb, conns[i].err = connect(ctx, u) })
	}
	wg.Wait()
	var failed []string
	var cfgErr error
	for i, cn := range conns {
		switch {
		case cn.err == nil:
			nodes = append(nodes, cn.rdb)
		case len(urls) == 1 || !isCode(cn.err, exitRedis):
			cfgErr = cmp.Or(cfgErr, cn.err)
		default: // a quorum tolerates a minority of nodes down
			failed = append(failed, cn.err.Error())
			rdb, _ := newRedis(urls[i]) // connect parsed it
			nodes = append(nodes, rdb)
		}
	}
	if cfgErr != nil {
		closeFn()
		return nil, nil, cfgErr
	}
	if need := len(urls)/2 + 1; len(urls)-len(failed) < need {
		closeFn()
		return nil, nil, fail(exitRedis, "only %d of %d Redis nodes answered, %d needed for a majority: %s",
			len(urls)-len(failed), len(urls), need, strings.Join(failed, "; "))
	}
	if len(nodes) == 1 {
		c, err = dlock.New(nodes[0], opts...)
	} else {
		c, err = dlock.NewRedlock(nodes, opts...)
	}
	if err != nil {
		closeFn()
		return nil, nil, libError(err)
	}
	return c, closeFn, nil
}

// isCode reports whether err carries the exit code code.
func isCode(err error, code int) bool {
	ce, ok := errors.AsType[*cliError](err)
	return ok && ce.code == code
}

// redactAll redacts each URL of urls.
func redactAll(urls []string) []string {
	out := make([]string, len(urls))
	for i, u := range urls {
		out[i] = redact(u)
	}
	return out
}

// redact hides the password of a URL for messages. A URL that does not
// parse as a Redis URL is shown from its last "@" on: a password would
// come before it.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "redis" && u.Scheme != "rediss" && u.Scheme != "unix") {
		if i := strings.LastIndex(raw, "@"); i >= 0 {
			return "<hidden>" + raw[i:]
		}
		return raw
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
