package main

import (
	"context"
	_ "embed"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
)

//go:embed seckill.lua
var seckillSrc string

const seckillHelp = `demo seckill [flags]

A flash sale: a stock of items, one per user, many concurrent buyers. It is
done twice: with a dlock around the six round trips of check-and-buy, and
with one atomic Lua script and no lock at all. Both must end with no
oversell and no user buying twice; the Lua side shows what a lock costs
where a single atomic operation would do.`

type seckillResult struct {
	name                string
	sold, soldOut, dupe int64
	stockLeft           int64
	buyers              int64
	doubleBuys          int64
	elapsed             time.Duration
}

func cmdSeckill(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("demo seckill", stderr, seckillHelp)
	var redisFlag urlList
	fs.Var(&redisFlag, "redis", "Redis `URL` (default $REDIS_URL, else a private redis-server)")
	stock := fs.Int("stock", 100, "items for sale")
	users := fs.Int("users", 1000, "distinct users")
	tries := fs.Int("tries", 2, "purchase attempts per user")
	buyers := fs.Int("buyers", 32, "concurrent buyers")
	if code := parse(fs, args); code >= 0 {
		return code
	}
	if *stock < 0 || *users < 1 || *tries < 1 || *buyers < 1 {
		fmt.Fprintln(stderr, "dlock demo seckill: --stock must be ≥ 0; --users, --tries, --buyers ≥ 1")
		return exitUsage
	}
	url := ""
	switch urls := redisURLs(redisFlag); len(urls) {
	case 0:
		srv, err := privateRedis()
		if err != nil {
			return reportDemo(ctx, stderr, err)
		}
		defer srv.Stop()
		url = srv.URL()
	case 1:
		url = urls[0]
	default:
		fmt.Fprintln(stderr, "dlock demo seckill: one --redis at most")
		return exitUsage
	}
	rdb, err := connect(ctx, url)
	if err != nil {
		return reportDemo(ctx, stderr, err)
	}
	defer rdb.Close()

	attempts := make([]string, 0, *users**tries)
	for u := range *users {
		for range *tries {
			attempts = append(attempts, "user"+strconv.Itoa(u))
		}
	}
	rand.Shuffle(len(attempts), func(i, j int) { attempts[i], attempts[j] = attempts[j], attempts[i] })

	run := newRunID()
	locks, err := dlock.New(rdb, dlock.LeaseTTL(5*time.Second), dlock.WithAutoExtend(false))
	if err != nil {
		return report(stderr, libError(err))
	}
	sides := []struct {
		name string
		buy  func(ctx context.Context, stockKey, buyersKey, user string) (int64, error)
	}{
		{"with a lock (6 round trips)", func(ctx context.Context, stockKey, buyersKey, user string) (int64, error) {
			return buyUnderLock(ctx, locks, rdb, "seckill:"+run, stockKey, buyersKey, user)
		}},
		{"one Lua script (1 round trip)", func(ctx context.Context, stockKey, buyersKey, user string) (int64, error) {
			return rdb.Eval(ctx, seckillSrc, []string{stockKey, buyersKey}, user).Int64()
		}},
	}
	var results []seckillResult
	for i, side := range sides {
		stockKey := fmt.Sprintf("dlock-demo:%s:seckill:%d:{stock}", run, i)
		buyersKey := fmt.Sprintf("dlock-demo:%s:seckill:%d:{stock}:buyers", run, i)
		defer rdb.Del(context.WithoutCancel(ctx), stockKey, buyersKey)
		if err := rdb.Set(ctx, stockKey, *stock, 0).Err(); err != nil {
			return report(stderr, fail(exitRedis, "set up stock: %v", err))
		}
		res, err := sell(ctx, side.name, *buyers, attempts, func(ctx context.Context, user string) (int64, error) {
			return side.buy(ctx, stockKey, buyersKey, user)
		})
		if err != nil {
			return report(stderr, fail(exitRedis, "%s: %v", side.name, err))
		}
		res.stockLeft, _ = rdb.Get(ctx, stockKey).Int64()
		res.buyers, _ = rdb.SCard(ctx, buyersKey).Result()
		results = append(results, res)
	}

	fmt.Fprintf(stdout, "flash sale: %d items, %d users × %d attempts, %d concurrent buyers\n", *stock, *users, *tries, *buyers)
	ok := true
	for _, r := range results {
		oversold := r.sold > int64(*stock) || r.stockLeft < 0
		consistent := r.buyers == r.sold && r.stockLeft == int64(*stock)-r.sold
		verdict := "no oversell, nobody bought twice"
		if oversold || r.dupe < 0 || !consistent || r.doubleBuys > 0 {
			verdict = "BROKEN: oversold or inconsistent"
			ok = false
		}
		fmt.Fprintf(stdout, "  %-30s sold %d, stock left %d, buyers %d, refused %d sold-out + %d repeat; %.0f attempts/s — %s\n",
			r.name, r.sold, r.stockLeft, r.buyers, r.soldOut, r.dupe, float64(len(attempts))/r.elapsed.Seconds(), verdict)
	}
	if len(results) == 2 && results[0].elapsed > 0 {
		fmt.Fprintf(stdout, "  the Lua script sold %.1f× faster than the lock: a lock is for work that cannot be one atomic step\n",
			results[0].elapsed.Seconds()/results[1].elapsed.Seconds())
	}
	if !ok {
		return exitFailure
	}
	return exitOK
}

// buyUnderLock is the check-then-act purchase, made safe by a lock: acquire,
// GET stock, SISMEMBER, DECR, SADD, release.
func buyUnderLock(ctx context.Context, locks *dlock.Client, rdb redis.UniversalClient, lockName, stockKey, buyersKey, user string) (int64, error) {
	l, err := locks.Acquire(ctx, lockName)
	if err != nil {
		return 0, err
	}
	defer l.Release(context.WithoutCancel(ctx))
	stock, err := rdb.Get(ctx, stockKey).Int64()
	if err != nil {
		return 0, err
	}
	if bought, err := rdb.SIsMember(ctx, buyersKey, user).Result(); err != nil || bought {
		return 2, err
	}
	if stock <= 0 {
		return 0, nil
	}
	if err := rdb.Decr(ctx, stockKey).Err(); err != nil {
		return 0, err
	}
	added, err := rdb.SAdd(ctx, buyersKey, user).Result()
	if err != nil {
		return 0, err
	}
	if added == 0 {
		return -1, nil // bought twice: the lock failed
	}
	return 1, l.Release(context.WithoutCancel(ctx))
}

// sell runs every attempt through buy with the given concurrency.
func sell(ctx context.Context, name string, concurrency int, attempts []string, buy func(context.Context, string) (int64, error)) (seckillResult, error) {
	res := seckillResult{name: name}
	work := make(chan string)
	var (
		mu       sync.Mutex
		firstErr error
		wg       sync.WaitGroup
	)
	start := time.Now()
	for range concurrency {
		wg.Go(func() {
			for user := range work {
				r, err := buy(ctx, user)
				mu.Lock()
				switch {
				case err != nil:
					if firstErr == nil {
						firstErr = err
					}
				case r == 1:
					res.sold++
				case r == 0:
					res.soldOut++
				case r == 2:
					res.dupe++
				case r == -1:
					res.doubleBuys++
				}
				mu.Unlock()
			}
		})
	}
	for _, u := range attempts {
		work <- u
	}
	close(work)
	wg.Wait()
	res.elapsed = time.Since(start)
	return res, firstErr
}
