package dlock_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
)

func ExampleClient_RequestRelease() {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	c, err := dlock.New(rdb, dlock.WatchLoss(true)) // a watched lease hears requests
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	defer c.Close(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		err := c.Do(ctx, "jobs:reindex", func(ctx context.Context, l *dlock.Lock) error {
			select {
			case reason := <-l.ReleaseRequests(): // checkpoint, then let go
				fmt.Println("asked to release:", reason)
			case <-time.After(10 * time.Second):
			}
			return nil
		})
		if err != nil {
			log.Fatal(err)
		}
	}()

	// A rolling deploy asks the holder, wherever it runs (again until it
	// listens: a request is a message, heard only by a holder listening).
	for i := 0; i < 100; i++ {
		if err := c.RequestRelease(ctx, "jobs:reindex", "deploy v2"); err != nil {
			log.Fatal(err)
		}
		select {
		case <-done:
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
	// Output: asked to release: deploy v2
}
