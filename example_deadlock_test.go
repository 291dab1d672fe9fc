package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
)

// Two services nest an order's lock and its inventory's in opposite orders.
// Each waits for the other's, holding its own: one of them is told of the
// deadlock (the one whose wait began last), its Do releases what it held,
// and the other goes on.
func ExampleErrDeadlock() {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	c, err := dlock.New(rdb) // DeadlockCheck(DefaultDeadlockCheck): on, after 1s of waiting
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	defer c.Close(context.Background())

	var both sync.WaitGroup // each holds its first lock before it asks for the second
	both.Add(2)
	nest := func(first, second string) error {
		return c.Do(ctx, first, func(ctx context.Context, _ *dlock.Lock) error {
			both.Done()
			both.Wait()
			// ctx carries the lock held: the wait below knows what it holds.
			return c.Do(ctx, second, func(ctx context.Context, _ *dlock.Lock) error { return nil })
		})
	}
	errs := make([]error, 2)
	var wg sync.WaitGroup
	wg.Go(func() { errs[0] = nest("example:order:42", "example:inventory:7") })
	wg.Go(func() { errs[1] = nest("example:inventory:7", "example:order:42") })
	wg.Wait()

	for _, err := range errs {
		if d, ok := errors.AsType[*dlock.DeadlockError](err); ok {
			var names []string
			for _, w := range d.Cycle {
				names = append(names, w.Name) // each with its Holder
			}
			slices.Sort(names)
			fmt.Println("deadlock:", errors.Is(err, dlock.ErrDeadlock), names)
		} else {
			fmt.Println("done:", err)
		}
	}
	// Unordered output:
	// deadlock: true [example:inventory:7 example:order:42]
	// done: <nil>
}
