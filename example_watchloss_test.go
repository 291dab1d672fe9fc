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

	// Acquire returns once the holder listens (it waits up to a second for
	// its subscription; an end before that is told at the next extension,
	// as without WatchLoss). The wait below only makes this example's
	// output certain on a machine too loaded to subscribe within a second.
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
