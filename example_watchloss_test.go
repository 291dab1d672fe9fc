package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
)

func ExampleWatchLoss() {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	c, err := dlock.New(rdb, dlock.LeaseTTL(30*time.Second), dlock.WatchLoss(true))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	defer c.Close(ctx)
	l, err := c.Acquire(ctx, "reports:watched")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Release(ctx)

	// The holder listens once its subscription is confirmed; an end before
	// that is told at the next extension, as without WatchLoss.
	ch := l.Key() + ":ch"
	for i := 0; i < 500 && rdb.PubSubNumSub(ctx, ch).Val()[ch] == 0; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := c.ForceRelease(ctx, "reports:watched"); err != nil { // an operator's, say
		log.Fatal(err)
	}
	select {
	case <-l.Done(): // not 10s later, at the next extension
		fmt.Println("told at once:", errors.Is(l.Err(), dlock.ErrNotHeld))
	case <-time.After(5 * time.Second):
		fmt.Println("not told yet")
	}
	// Output: told at once: true
}
