package dlock_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
)

func ExampleClient_AcquireAll() {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	c, err := dlock.New(rdb, dlock.HolderMeta("transfers-1"))
	if err != nil {
		log.Fatal(err)
	}

	ctx := context.Background()
	// A transfer locks both accounts. The order the names are given in does
	// not matter: every caller takes them in the same order, so two
	// transfers in opposite directions cannot deadlock.
	m, err := c.AcquireAll(ctx, []string{"transfer:acct:7", "transfer:acct:3"})
	if err != nil {
		log.Fatal(err) // names the lock that could not be taken; none is held
	}
	defer m.Release(context.WithoutCancel(ctx))
	for _, l := range m.Locks() { // in the order given
		fence, err := l.Fence(ctx) // one fence per account, for its own writes
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("holding", l.Name(), "with a fence:", fence > 0)
	}

	// Another instance wants one of them and a free one: all or nothing.
	other, _ := dlock.New(rdb)
	_, err = other.TryAcquireAll(ctx, []string{"transfer:acct:9", "transfer:acct:3"})
	fmt.Println(err)
	if l, err := other.TryAcquire(ctx, "transfer:acct:9"); err == nil {
		fmt.Println("transfer:acct:9 was given back")
		l.Release(ctx)
	}
	// Output:
	// holding transfer:acct:7 with a fence: true
	// holding transfer:acct:3 with a fence: true
	// dlock: acquire "transfer:acct:3": not acquired: held by another holder, "transfers-1"
	// transfer:acct:9 was given back
}

func ExampleClient_DoAll() {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	c, err := dlock.New(rdb, dlock.HolderMeta("transfers-1"))
	if err != nil {
		log.Fatal(err)
	}

	names := []string{"inventory:sku:1", "inventory:sku:2"}
	err = c.DoAll(context.Background(), names, func(ctx context.Context, m *dlock.MultiLock) error {
		// ctx is cancelled, with a cause naming the part, if any part is
		// lost; every part is released when fn returns or panics.
		fmt.Println("holding", m.Names(), "lost:", ctx.Err() != nil)
		fmt.Println("each part held by", m.Locks()[0].Meta(), "and", m.Locks()[1].Meta())
		return nil
	}, dlock.MaxWait(5*time.Second), dlock.HolderMeta("restock")) // for the whole set, for every part
	fmt.Println("done:", err)
	// Output:
	// holding [inventory:sku:1 inventory:sku:2] lost: false
	// each part held by restock and restock
	// done: <nil>
}
