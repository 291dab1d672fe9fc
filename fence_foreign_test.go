package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dlockio/dlock"
	"github.com/redis/go-redis/v9"
)

// A Client made WithoutScripts answers a Lock's Fence, Extend and Release
// as a scripted one (of plain locks) does when another program wrote over
// the lock's keys: the lock key (another holder's token, a value of
// another type), the fence key or the lease's marker (another type): the
// same outcome, error text and identity.
func TestLeaseCallsWithoutScriptsMeetForeignKeysAsScriptsDo(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	modes := []*dlock.Client{
		newClient(t, rdb, dlock.LeaseTTL(time.Minute), dlock.WithUnfair(slowBackoff)),
		newClient(t, rdb, dlock.LeaseTTL(time.Minute), dlock.WithoutScripts()),
	}
	type sabotage struct {
		name string
		ops  string // the calls compared
		do   func(ctx context.Context, l *dlock.Lock) error
	}
	// replaced has the lock key replaced by what write writes there.
	replaced := func(write func(ctx context.Context, p redis.Pipeliner, key string)) func(ctx context.Context, l *dlock.Lock) error {
		return func(ctx context.Context, l *dlock.Lock) error {
			_, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
				p.Del(ctx, l.Key())
				write(ctx, p, l.Key())
				return nil
			})
			return err
		}
	}
	sabotages := []sabotage{
		{"other-holder", "fence extend shorten release", func(ctx context.Context, l *dlock.Lock) error {
			return rdb.Set(ctx, l.Key(), "other", time.Minute).Err()
		}},
		{"lock-hash", "fence extend shorten release", replaced(func(ctx context.Context, p redis.Pipeliner, key string) { p.HSet(ctx, key, "f", "v") })},
		{"lock-list", "fence extend shorten release", replaced(func(ctx context.Context, p redis.Pipeliner, key string) { p.LPush(ctx, key, "x") })},
		{"fence-list", "fence extend shorten release", func(ctx context.Context, l *dlock.Lock) error { return rdb.LPush(ctx, l.Key()+":fence", "x").Err() }},
		{"marker-list", "fence extend shorten release", func(ctx context.Context, l *dlock.Lock) error {
			return rdb.LPush(ctx, l.Key()+":r:"+l.Token(), "x").Err()
		}},
	}
	ops := map[string]func(ctx context.Context, l *dlock.Lock) error{
		"fence":  func(ctx context.Context, l *dlock.Lock) error { _, err := l.Fence(ctx); return err },
		"extend": func(ctx context.Context, l *dlock.Lock) error { return l.Extend(ctx, time.Minute) },
		// An extension that may shorten the lease is numbered (it reads
		// both keys with GET, as extend.lua does).
		"shorten": func(ctx context.Context, l *dlock.Lock) error { return l.Extend(ctx, time.Second) },
		"release": func(ctx context.Context, l *dlock.Lock) error { return l.Release(ctx) },
	}
	// answer is what mode i's call op says on a lease whose keys s wrote
	// over. An extension that meets an error is tried again until the
	// validity (for "shorten", a second from the call) nearly runs out; a
	// reply after it ran out makes the loss the answer, in either mode: a
	// case whose validity ran out during the call runs again, on a new
	// lease, so that both modes answer within it.
	answer := func(i int, s sabotage, op string) string {
		for try := 1; ; try++ {
			name := fmt.Sprintf("ff%d-%s-%s-%d", i, s.name, op, try)
			l, err := modes[i].TryAcquire(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.do(ctx, l); err != nil {
				t.Fatal(err)
			}
			err = ops[op](ctx, l)
			ranOut := !time.Now().Before(l.ValidUntil())
			l.Release(ctx)
			if !ranOut {
				return fmt.Sprintf("%v (not held %v, wrong type %v)", strings.ReplaceAll(fmt.Sprint(err), name, "NAME"),
					errors.Is(err, dlock.ErrNotHeld), errors.Is(err, dlock.ErrWrongType))
			}
			if try == 5 {
				t.Fatalf("%s, %s (mode %d): the lease's validity ran out during each of %d calls (the last: %v)", s.name, op, i, try, err)
			}
			t.Logf("%s, %s (mode %d): the lease's validity ran out during the call (%v): again", s.name, op, i, err)
		}
	}
	for _, s := range sabotages {
		for _, op := range strings.Fields(s.ops) {
			if want, got := answer(0, s, op), answer(1, s, op); got != want {
				t.Errorf("%s, %s WithoutScripts: %s; want %s", s.name, op, got, want)
			}
		}
	}
}
