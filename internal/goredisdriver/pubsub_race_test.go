package goredisdriver

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/driver"
	"github.com/dlockio/dlock/internal/leakcheck"
	"github.com/dlockio/dlock/internal/redistest"
)

// A PubSub used as the hub uses it (Receive on one goroutine, short
// deadlines; Subscribe, Unsubscribe and Ping on another), whose connection
// is cut, or whose server is restarted, or which is closed, at a random
// moment while messages flow: once any method failed (its ctx's deadline
// aside), no method that starts after it succeeds, none hangs, a Receive in
// progress returns, the server soon counts no subscriber, and after Close
// every method fails with ErrClosed.
func TestPubSubStaysFailedUnderConcurrentUse(t *testing.T) {
	t.Parallel()
	rounds := 24
	if testing.Short() {
		rounds = 6
	}
	leakcheck.Check(t)
	s := redistest.Start(t, redistest.TCP())
	p := redistest.NewProxy(t, s.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr()})
	defer rdb.Close()
	direct := s.Client(t)
	for round := range rounds {
		fault := []string{"cut", "restart", "close"}[round%3]
		t.Run(fmt.Sprint(round, fault), func(t *testing.T) {
			stress(t, s, p, rdb, direct, fault, rand.N(50*time.Millisecond))
		})
	}
}

func stress(t *testing.T, s *redistest.Server, p *redistest.Proxy, rdb *redis.Client, direct *redis.Client, fault string, after time.Duration) {
	ctx := t.Context()
	dps, err := Conn(rdb).PubSub(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	defer dps.Close()
	if err := dps.Subscribe(ctx, "st"); err != nil {
		t.Fatal(err)
	}
	if m, err := dps.Receive(ctx); err != nil || m.Kind != "subscribe" {
		t.Fatalf("Receive = %+v, %v; want the confirmation", m, err)
	}
	var (
		failed    atomic.Bool  // a method returned a failure
		ok        atomic.Int64 // messages received and methods that succeeded
		wg        sync.WaitGroup
		mu        sync.Mutex
		problems  []string
		stop      = make(chan struct{})
		readerEnd = make(chan struct{})
	)
	problem := func(format string, args ...any) {
		mu.Lock()
		problems = append(problems, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	// outcome records a method's result; before says whether a failure
	// had been seen when it started.
	outcome := func(name string, before bool, err error) {
		switch {
		case err == nil && before:
			problem("%s succeeded after a failure", name)
		case err == nil:
			ok.Add(1)
		case err != nil && !errors.Is(err, context.DeadlineExceeded):
			failed.Store(true)
		}
	}
	wg.Go(func() { // the reader
		defer close(readerEnd)
		for {
			before := failed.Load()
			rctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
			start := time.Now()
			_, err := dps.Receive(rctx)
			cancel()
			if d := time.Since(start); d > 8*time.Second {
				problem("Receive took %v", d)
			}
			outcome("Receive", before, err)
			if err != nil && !errors.Is(err, context.DeadlineExceeded) {
				return
			}
		}
	})
	wg.Go(func() { // the other methods
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			before := failed.Load()
			mctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			var name string
			var err error
			switch i % 3 {
			case 0:
				name, err = "Subscribe", dps.Subscribe(mctx, fmt.Sprint("st", i%7))
			case 1:
				name, err = "Unsubscribe", dps.Unsubscribe(mctx, fmt.Sprint("st", (i+3)%7))
			case 2:
				name, err = "Ping", dps.Ping(mctx)
			}
			cancel()
			outcome(name, before, err)
			time.Sleep(time.Millisecond)
		}
	})
	wg.Go(func() { // messages flow
		for {
			select {
			case <-stop:
				return
			default:
			}
			direct.Publish(ctx, "st", "m")
			time.Sleep(time.Millisecond)
		}
	})
	time.Sleep(after)
	for deadline := time.Now().Add(5 * time.Second); ok.Load() < 10; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d successes in 5s before the %s", ok.Load(), fault)
		}
	}
	switch fault {
	case "cut":
		p.Cut()
	case "restart":
		s.Restart()
	case "close":
		dps.Close()
	}
	select {
	case <-readerEnd:
	case <-time.After(10 * time.Second):
		t.Fatalf("the reader still reads 10s after the %s", fault)
	}
	for deadline := time.Now().Add(5 * time.Second); !failed.Load(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no method failed 5s after the %s", fault)
		}
	}
	time.Sleep(20 * time.Millisecond) // (more calls after the failure)
	close(stop)
	wg.Wait()
	for _, pb := range problems {
		t.Error(pb)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		n, err := direct.PubSubNumPat(ctx).Result()
		subs := direct.PubSubChannels(ctx, "st*").Val()
		if err == nil && n == 0 && len(subs) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("channels %v still subscribed 5s after the %s", subs, fault)
		}
	}
	dps.Close()
	if _, err := dps.Receive(ctx); !errors.Is(err, driver.ErrClosed) {
		t.Errorf("Receive after Close = %v, want ErrClosed", err)
	}
	for name, err := range map[string]error{"Subscribe": dps.Subscribe(ctx, "st"), "Unsubscribe": dps.Unsubscribe(ctx, "st"), "Ping": dps.Ping(ctx)} {
		if !errors.Is(err, driver.ErrClosed) {
			t.Errorf("%s after Close = %v, want ErrClosed", name, err)
		}
	}
}
