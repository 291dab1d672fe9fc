// Command fencing shows why a lock needs a fencing token: a holder that is
// paused past its lease wakes up and writes, after another holder has taken
// the lock and written. The resource, guarded by dlock.Guard, refuses the
// late write.
//
//	go run ./examples/fencing                  # starts a private redis-server
//	REDIS_URL=redis://127.0.0.1:6379 go run ./examples/fencing
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/redisserver"
)

func main() {
	log.SetFlags(0)
	if err := run(); err != nil {
		log.Fatal(err)
	}
}

func run() error {
	url := os.Getenv("REDIS_URL")
	if url == "" {
		srv, err := redisserver.Start()
		if err != nil {
			return err
		}
		defer srv.Stop()
		url = srv.URL()
	}
	opts, err := redis.ParseURL(url)
	if err != nil {
		return err
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	ctx := context.Background()

	// Auto-extend off: holder A's "pause" must be able to outlast its lease.
	c, err := dlock.New(rdb, dlock.LeaseTTL(300*time.Millisecond), dlock.WithAutoExtend(false))
	if err != nil {
		return err
	}
	g := dlock.NewGuard(rdb)
	rdb.Del(ctx, "example:balance")

	a, err := c.Acquire(ctx, "example:account")
	if err != nil {
		return err
	}
	fenceA, err := a.Fence(ctx) // issued now, while A holds the lock
	if err != nil {
		return err
	}
	fmt.Printf("A holds the lock, fence %d; A writes 100\n", fenceA)
	if err := g.Write(ctx, "example:balance", "100", fenceA, a.Token()); err != nil {
		return err
	}

	fmt.Println("A pauses (a long GC pause, a stopped VM) for longer than its 300ms lease…")
	time.Sleep(500 * time.Millisecond) // stands in for the pause
	select {
	case <-a.Done():
	default:
		return errors.New("the first holder's lease should have run out")
	}

	b, err := c.Acquire(ctx, "example:account")
	if err != nil {
		return err
	}
	defer b.Release(ctx)
	fenceB, err := b.Fence(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("B holds the lock, fence %d; B writes 50\n", fenceB)
	if err := g.Write(ctx, "example:balance", "50", fenceB, b.Token()); err != nil {
		return err
	}

	fmt.Println("A wakes up, unaware, and writes 120")
	err = g.Write(ctx, "example:balance", "120", fenceA, a.Token())
	if !errors.Is(err, dlock.ErrStaleFence) {
		return fmt.Errorf("the late write was not refused: %v", err)
	}
	fmt.Printf("refused: %v\n", err)
	v, fence, err := g.Read(ctx, "example:balance")
	if err != nil {
		return err
	}
	fmt.Printf("balance = %s (written with fence %d): B's write stands\n", v, fence)
	return nil
}
