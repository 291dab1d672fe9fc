package torture

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/redistest"
)

// maxNodes is the largest quorum a round uses.
const maxNodes = 5

// cluster is every server the test uses, started once and reused by every
// round: five lock nodes on loopback TCP, each behind two proxies (a fault
// hits one proxy, so some clients of a node keep a healthy path), and the
// guard's server on a unix socket, which no fault touches.
type cluster struct {
	nodes   []*redistest.Server
	proxies [][]*redistest.Proxy
	guard   *redistest.Server
}

func newCluster(t *testing.T) *cluster {
	c := &cluster{guard: redistest.Start(t)}
	for range maxNodes {
		// Keyspace notifications on: holders with WatchLoss check on their key's end.
		s := redistest.Start(t, redistest.TCP(), redistest.Args("--notify-keyspace-events", "KA"))
		c.nodes = append(c.nodes, s)
		c.proxies = append(c.proxies, []*redistest.Proxy{redistest.NewProxy(t, s.Addr()), redistest.NewProxy(t, s.Addr())})
	}
	return c
}

// nodeCount is how many lock nodes a mode uses.
func nodeCount(mode string) int {
	switch mode {
	case ModeQuorum3:
		return 3
	case ModeQuorum5:
		return 5
	}
	return 1
}

// targets returns what faults may hit in a round over the first n nodes.
func (c *cluster) targets(n int) Targets {
	var t Targets
	for i := range n {
		t.Servers = append(t.Servers, c.nodes[i].Server)
		var ps []Proxy
		for _, p := range c.proxies[i] {
			ps = append(ps, p)
		}
		t.Proxies = append(t.Proxies, ps)
	}
	return t
}

// addrs returns, per node, the proxy addresses workers reach it through.
func (c *cluster) addrs(n int) [][]string {
	var out [][]string
	for i := range n {
		out = append(out, []string{c.proxies[i][0].Addr(), c.proxies[i][1].Addr()})
	}
	return out
}

// reset empties the first n nodes before a round and makes sure they run
// (a round's last fault heals itself, but a failed restart may not have).
func (c *cluster) reset(t *testing.T, n int) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for i := range n {
		s := c.nodes[i]
		s.Server.Resume()
		if _, err := s.Do(ctx, "FLUSHALL"); err != nil {
			if err := s.Server.Restart(); err != nil {
				t.Fatalf("node %d: %v", i, err)
			}
		}
		for _, p := range c.proxies[i] {
			p.Cut()
		}
	}
}

// directClients returns go-redis clients for the first n nodes that bypass
// the proxies, for the coordinator's checks.
func (c *cluster) directClients(n int) []*redis.Client {
	var out []*redis.Client
	for i := range n {
		out = append(out, redis.NewClient(&redis.Options{Addr: c.nodes[i].Addr(), PoolSize: 4}))
	}
	return out
}

// scanKey is one key found under a round's prefix.
type scanKey struct {
	node int
	key  string
	kind string
	pttl time.Duration // -1: no expiry
	val  string        // a string's value
	set  string        // a sorted set's members, with their deadlines' distance from the scan
	live int           // how many of a sorted set's members had a deadline to come
}

func (k scanKey) String() string {
	if k.set != "" {
		return fmt.Sprintf("node%d %s (%s, pttl %v: %s)", k.node, k.key, k.kind, k.pttl, k.set)
	}
	return fmt.Sprintf("node%d %s (%s, pttl %v)", k.node, k.key, k.kind, k.pttl)
}

// name returns the lock name of a key under prefix ("<prefix>{name}...").
func (k scanKey) name(prefix string) string {
	rest := strings.TrimPrefix(strings.TrimPrefix(k.key, prefix), "{")
	name, _, _ := strings.Cut(rest, "}")
	return name
}

// scan lists every key under prefix on the given nodes, with its type and PTTL.
func scan(ctx context.Context, rdbs []*redis.Client, prefix string) ([]scanKey, error) {
	var out []scanKey
	for i, rdb := range rdbs {
		iter := rdb.Scan(ctx, 0, prefix+"*", 256).Iterator()
		for iter.Next(ctx) {
			k := scanKey{node: i, key: iter.Val()}
			k.kind, _ = rdb.Type(ctx, k.key).Result()
			switch k.kind {
			case "string":
				k.val, _ = rdb.Get(ctx, k.key).Result()
			case "zset":
				k.set, k.live = members(ctx, rdb, k.key)
			}
			pttl, err := rdb.PTTL(ctx, k.key).Result()
			if err != nil {
				return nil, err
			}
			k.pttl = pttl
			// "none" or PTTL -2: expired between SCAN and TYPE, or TYPE and PTTL
			if k.kind != "none" && pttl != -2 {
				out = append(out, k)
			}
		}
		if err := iter.Err(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// members lists a sorted set's members (the first ten) with each one's
// deadline as a distance from the server's clock, for the report of a key
// left behind, and counts those whose deadline is still to come (-1: the
// set could not be read).
func members(ctx context.Context, rdb *redis.Client, key string) (string, int) {
	zs, err := rdb.ZRangeWithScores(ctx, key, 0, -1).Result()
	t, terr := rdb.Time(ctx).Result()
	if err != nil || terr != nil {
		return "unread", -1
	}
	var (
		b    strings.Builder
		live int
	)
	for i, z := range zs {
		left := int64(z.Score) - t.UnixMilli()
		if left > 0 {
			live++
		}
		if i > 0 && i < 10 {
			b.WriteString(", ")
		}
		if i < 10 {
			fmt.Fprintf(&b, "%v %+dms", z.Member, left)
		}
	}
	return b.String(), live
}

// leftovers is (e): it sorts the keys found under prefix into those the
// docs allow to stay for a while (fence counters within the fence window —
// a minute, a day over a quorum — and markers that expire within the
// longest lease) and the rest. Keys with an expiry below grace are excused
// (returned as excused) when grace > 0: a killed worker's lease and queue
// entries, which only time removes. So is a lock key expiring within the
// longest lease on a node that was restarted empty (in restarted): the
// restart forgot the markers that revoke ended leases, and the docs say a
// request of one still in flight (go-redis re-sending it to the new
// server) can then take that node's lock for nobody, for one lease.
func leftovers(keys []scanKey, prefix string, maxLease, grace time.Duration, restarted map[int]bool) (bad []scanKey, excused []string) {
	for _, k := range keys {
		rest := strings.TrimPrefix(k.key, prefix)
		desc := k.String()
		_, tail, _ := strings.Cut(rest, "}")
		// PTTL 0: the key expires within this millisecond (-1: never).
		expiring := k.pttl >= 0 && k.pttl <= maxLease
		switch {
		case tail == ":fence" && k.kind == "string" && k.pttl >= 0 && k.pttl <= 24*time.Hour: // a minute; a day on a quorum
			continue
		case strings.HasPrefix(tail, ":r:") && expiring:
			continue
		case tail == ":w" && k.kind == "string" && expiring: // a wake key: the holder's remaining lease at most
			continue
		case tail == "" && k.kind == "zset" && k.live == 0 && expiring:
			// Holds that all lapsed: nobody holds the lock (every script
			// drops them first). The key outlives them when the release of
			// a longer hold left its expiry (a release does not shorten it);
			// such a hold for nobody is a request that landed after its
			// undo's marker ended, as the docs allow.
			continue
		case tail == ":n" && k.kind == "string" && k.pttl < 0:
			continue // a semaphore's kept size (size.go): configuration, without expiry
		case strings.HasPrefix(tail, ":n:") && k.kind == "string" && k.pttl >= 0 && k.pttl <= time.Minute:
			continue // the kept answer of a size change, for a minute
		case strings.HasPrefix(rest, "waits:") && k.kind == "string" && k.pttl >= 0 && k.pttl <= recordLife:
			continue // a waiter's deadlock record whose delete a fault or a kill cut off (see nest.go)
		case grace > 0 && k.pttl >= 0 && k.pttl <= grace:
			excused = append(excused, desc)
		case restarted[k.node] && tail == "" && expiring:
			excused = append(excused, desc+" on a node restarted empty")
		default:
			bad = append(bad, k)
		}
	}
	return bad, excused
}

// probe is (d) for a quiet system: with every worker gone, each name must
// be acquirable within bound. It records one probe event per name.
func probe(rec *Recorder, cfg WorkerConfig, rdbs []*redis.Client, bound time.Duration) {
	var nodes []redis.UniversalClient
	for _, r := range rdbs {
		nodes = append(nodes, r)
	}
	opts := []dlock.Option{dlock.LeaseTTL(cfg.TTL), dlock.WithPrefix(cfg.Prefix)}
	var (
		c   *dlock.Client
		err error
	)
	switch cfg.Mode {
	case ModeQuorum3, ModeQuorum5:
		c, err = dlock.NewRedlock(nodes, nodeTimeout, opts...)
	default:
		c, err = dlock.New(nodes[0], append(opts, waiting(Fair(cfg.Mode)),
			dlock.WithReentrant(cfg.Mode == ModeReentrant))...)
	}
	if err != nil {
		rec.Add(Event{Op: OpProbe, Inv: now(), Ret: now(), Res: classify(err), Err: errText(err)})
		return
	}
	var wg sync.WaitGroup
	for _, name := range cfg.Names {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), bound+2*time.Second)
			defer cancel()
			e := Event{Name: name, Op: OpProbe, Inv: now(), Bound: int64(bound)}
			var t target = lockName{c, name, nil}
			if cfg.Mode == ModeSemaphore {
				s, err := c.Semaphore(name, cfg.Permits)
				if err != nil {
					e.Ret, e.Res, e.Err = now(), classify(err), errText(err)
					rec.Add(e)
					return
				}
				t = s
			}
			if cfg.Mode == ModeElection {
				el, err := c.Election(name)
				if err != nil {
					e.Ret, e.Res, e.Err = now(), classify(err), errText(err)
					rec.Add(e)
					return
				}
				t = candidate{e: el, value: "probe"}
			}
			if cfg.Mode == ModeRW {
				rw, err := c.RWMutex(name)
				if err != nil {
					e.Ret, e.Res, e.Err = now(), classify(err), errText(err)
					rec.Add(e)
					return
				}
				t = rwSide(rw, true) // the write: free only if nothing is held
			}
			l, err := t.Acquire(ctx)
			e.Ret, e.Res, e.Err = now(), classify(err), errText(err)
			if l != nil {
				e.Tok = l.Token()
				e.Fence, _ = l.Fence(ctx)
				l.Release(context.Background())
			}
			rec.Add(e)
		})
	}
	wg.Wait()
}
