package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
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
	return connectVia(ctx, rawURL, new(dialGate))
}

// connectVia is connect with the server's dials behind gate.
func connectVia(ctx context.Context, rawURL string, gate *dialGate) (redis.UniversalClient, error) {
	rdb, err := openRedis(rawURL, gate, 0)
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
		if noSuchDB(err) { // Redis answered: the URL is wrong
			return nil, fail(exitConfig, "bad Redis URL %s: Redis has no such database (%v)", redact(rawURL), err)
		}
		return nil, fail(exitRedis, "cannot reach Redis at %s: %v", redact(rawURL), err)
	}
	return rdb, nil
}

// noSuchDB reports whether err is Redis refusing the database a URL's
// /db path selects: an index past its "databases" setting, or any but 0
// on a Cluster node.
func noSuchDB(err error) bool {
	rerr, ok := errors.AsType[redis.Error](err)
	return ok && (strings.Contains(rerr.Error(), "DB index is out of range") ||
		strings.Contains(rerr.Error(), "SELECT is not allowed in cluster mode"))
}

// dialCooldown is how long a server whose dial failed is taken for down
// (see dialGate). go-redis's pool, once its dials keep failing, also tries
// again once a second.
const dialCooldown = time.Second

// dialGate remembers a server's failed dial: for dialCooldown after it,
// dials fail at once with its error (a dial error still, so that go-redis
// and dlock know the request was never sent), and then one is tried again.
// A node that does not answer costs one dial timeout, not one per command
// and per retry. A dial that the caller cancelled proves nothing, and is
// not remembered.
type dialGate struct {
	mu    sync.Mutex
	err   error     // the last failed dial's; nil once one succeeds
	until time.Time // when dials are tried again
}

type dialFunc = func(ctx context.Context, network, addr string) (net.Conn, error)

// wrap returns dial behind the gate.
func (g *dialGate) wrap(dial dialFunc) dialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		g.mu.Lock()
		if err := g.err; err != nil && time.Now().Before(g.until) {
			g.mu.Unlock()
			return nil, err
		}
		g.mu.Unlock()
		conn, err := dial(ctx, network, addr)
		g.mu.Lock()
		defer g.mu.Unlock()
		switch op, ok := errors.AsType[*net.OpError](err); {
		case err == nil:
			g.err = nil
		case ok && op.Op == "dial" && !errors.Is(ctx.Err(), context.Canceled):
			g.err, g.until = err, time.Now().Add(dialCooldown)
		}
		return conn, err
	}
}

// urlShapes says which Redis URLs dlock takes, for its error messages.
const urlShapes = "want redis://[user:password@]host:port[/db] (rediss:// for TLS), unix:///path/to/socket, " +
	"redis+sentinel://[user:password@]host:port?master_name=NAME[&addr=host:port…] for Sentinel, or " +
	"redis+cluster://[user:password@]host:port[?addr=host:port…] for a Cluster"

// openRedis returns a go-redis client for rawURL: a single server, a
// Sentinel-managed master (redis+sentinel://, or a master_name parameter)
// or a Cluster (redis+cluster://); rediss+ schemes use TLS. A password the
// URL lacks comes from $REDIS_PASSWORD, or the file $REDIS_PASSWORD_FILE
// names: never from argv. A single server's dials go through gate (see
// dialGate); go-redis's command retries are maxRetries unless it is 0
// (-1: none). Each attempt of a command dials once: go-redis would dial up
// to 5 times, 100ms apart, for each of them, and a server that refuses
// connections would cost every command seconds.
func openRedis(rawURL string, gate *dialGate, maxRetries int) (redis.UniversalClient, error) {
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
		if err == nil && opts.DB < 0 {
			err = fmt.Errorf("invalid database number: %d", opts.DB) // go-redis would select none: database 0
		}
		if err != nil {
			return nil, bad(err)
		}
		opts.Password = cmp.Or(opts.Password, password)
		opts.DialerRetries = 1
		opts.MaxRetries = cmp.Or(maxRetries, opts.MaxRetries)
		opts.Dialer = gate.wrap(redis.NewDialer(opts))
		return redis.NewClient(opts), nil
	case "sentinel":
		opts, err := redis.ParseFailoverURL(base + "://" + rest)
		if err == nil && opts.MasterName == "" {
			err = errors.New("a Sentinel URL needs master_name=NAME")
		}
		if err == nil && opts.DB < 0 {
			err = fmt.Errorf("invalid database number: %d", opts.DB)
		}
		if err != nil {
			return nil, bad(err)
		}
		opts.Password = cmp.Or(opts.Password, opts.SentinelPassword, password) // the master's; the URL's userinfo is the Sentinels'
		opts.DialerRetries = cmp.Or(opts.DialerRetries, 1)
		opts.MaxRetries = cmp.Or(maxRetries, opts.MaxRetries)
		return redis.NewFailoverClient(opts), nil
	case "cluster":
		opts, err := redis.ParseClusterURL(base + "://" + rest)
		if err != nil {
			return nil, bad(err)
		}
		opts.Password = cmp.Or(opts.Password, password)
		opts.DialerRetries = cmp.Or(opts.DialerRetries, 1)
		opts.MaxRetries = cmp.Or(maxRetries, opts.MaxRetries)
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
// fails at once, naming the nodes, rather than wait for them unseen. A
// node that does not answer costs one dial timeout, at once with the
// others', and not again for each later command or retry (see dialGate).
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
		rdb  redis.UniversalClient
		gate *dialGate
		err  error
	}
	conns := make([]conn, len(urls))
	var wg sync.WaitGroup
	for i, u := range urls {
		wg.Go(func() {
			conns[i].gate = new(dialGate)
			conns[i].rdb, conns[i].err = connectVia(ctx, u, conns[i].gate)
		})
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
			// Behind the gate its PING went through: a dial that just
			// failed is not tried again for a while. Nor does go-redis
			// retry its commands: the library retries on its own schedule,
			// and each retry here would only wait to fail again.
			rdb, _ := openRedis(urls[i], cn.gate, -1) // the URL parsed above
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
		c, err = dlock.NewRedlock(nodes, 0, opts...)
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
