package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
)

// chainTTL is the lease of every generation of a resume chain, and what
// each generation's Extend asks.
const chainTTL = 3 * time.Second

type resumeTaker func(ctx context.Context, c *dlock.Client, name string, opts ...dlock.LockOption) (*dlock.Lock, error)

// resumeChain resumes a lease generation after generation (each on a
// Client of its own, from mk) while the previous generation's Lock, its
// watchdog running, asks for a fence, extends and writes through a Guard
// at the same moment. Every fence is above every earlier generation's, each
// resumer's calls work, a superseded Lock's Release frees nothing, and the
// name is free after the last Release.
func resumeChain(t *testing.T, rdb *redis.Client, mk func(gen int) *dlock.Client, name string, take resumeTaker) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	g := dlock.NewGuard(rdb)
	res := name + ":res"
	const gens = 6
	var locks []*dlock.Lock
	fences := make([]int64, gens) // 0: none obtained
	var mu sync.Mutex
	l0, err := take(ctx, mk(0), name)
	if err != nil {
		t.Fatal(err)
	}
	locks = append(locks, l0)
	staleAccepted := 0
	for gen := 1; gen < gens; gen++ {
		old := locks[gen-1]
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { // the old generation races the resume
			defer wg.Done()
			time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond)
			if f, err := old.Fence(ctx); err == nil {
				mu.Lock()
				if fences[gen-1] == 0 {
					fences[gen-1] = f
				}
				mu.Unlock()
				g.Write(ctx, res, fmt.Sprint("g", gen-1), f, old.Token())
			}
			old.Extend(ctx, chainTTL)
		}()
		time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond)
		t0 := time.Now()
		nl, err := take(ctx, mk(gen), name, dlock.Resume(old.Token()))
		tResume := time.Since(t0)
		if err != nil {
			wg.Wait()
			t.Fatalf("gen %d resume: %v", gen, err)
		}
		locks = append(locks, nl)
		f, err := nl.Fence(ctx)
		tFence := time.Since(t0)
		if err != nil {
			t.Errorf("gen %d: the resumer's Fence: %v", gen, err)
		} else {
			mu.Lock()
			fences[gen] = f
			mu.Unlock()
			if err := g.Write(ctx, res, fmt.Sprint("g", gen), f, nl.Token()); err != nil {
				t.Errorf("gen %d: the resumer's write: %v", gen, err)
			}
		}
		wg.Wait()
		tWait := time.Since(t0)
		// the old generation tries again now: must be rejected
		if f, err := old.Fence(ctx); err == nil {
			if err := g.Write(ctx, res, "late", f, old.Token()); err == nil {
				staleAccepted++
				t.Errorf("gen %d: a late write of the superseded gen %d with fence %d was accepted", gen, gen-1, f)
			}
		}
		if err := nl.Extend(ctx, chainTTL); err != nil {
			t.Errorf("gen %d: the resumer's Extend: %v (resume %v, fence at %v, old done at %v, now %v, valid until +%v)", gen, err, tResume, tFence, tWait, time.Since(t0), nl.ValidUntil().Sub(t0))
		}
	}
	checkResumeChainEnd(t, ctx, locks, fences, func(ctx context.Context, opts ...dlock.LockOption) (*dlock.Lock, error) {
		return take(ctx, mk(0), name, opts...)
	})
}

// checkResumeChainEnd: fences rise generation after generation (0: none
// obtained), every superseded Lock's Release says ErrNotHeld, the last Lock
// holds and releases, and then take gets the name.
func checkResumeChainEnd(t *testing.T, ctx context.Context, locks []*dlock.Lock, fences []int64, take func(context.Context, ...dlock.LockOption) (*dlock.Lock, error)) {
	t.Helper()
	for i := 0; i < len(locks); i++ {
		for j := i + 1; j < len(locks); j++ {
			if fences[i] != 0 && fences[j] != 0 && fences[i] >= fences[j] {
				t.Errorf("fence of gen %d (%d) >= fence of later gen %d (%d)", i, fences[i], j, fences[j])
			}
		}
	}
	for i := 0; i < len(locks)-1; i++ {
		if err := locks[i].Release(ctx); err == nil {
			t.Errorf("the superseded gen %d's Release = nil, want ErrNotHeld", i)
		} else if !errors.Is(err, dlock.ErrNotHeld) {
			t.Errorf("the superseded gen %d's Release = %v, want ErrNotHeld", i, err)
		}
	}
	last := locks[len(locks)-1]
	if err := last.Err(); err != nil {
		t.Errorf("the last resumer lost its lease: %v", err)
	}
	if err := last.Release(ctx); err != nil {
		t.Errorf("the last resumer's Release: %v", err)
	}
	l, err := take(ctx, dlock.MaxWait(2*time.Second))
	if err != nil {
		t.Errorf("the name after the last Release: %v", err)
	} else {
		l.Release(ctx)
	}
}

// A chain of resumes over a quorum, each racing the superseded Lock's calls
// (the resume's read of the lease once copied a claim a straggling node's
// call still read).
func TestResumeChainOverAQuorum(t *testing.T) {
	t.Parallel()
	long(t)
	_, rdb := setup(t)
	_, nodes := startQuorum(t, 3)
	plain := func(ctx context.Context, c *dlock.Client, name string, opts ...dlock.LockOption) (*dlock.Lock, error) {
		return c.Acquire(ctx, name, opts...)
	}
	for round := range 4 {
		resumeChain(t, rdb, func(gen int) *dlock.Client {
			return newRedlock(t, nodes, 250*time.Millisecond, dlock.LeaseTTL(chainTTL), dlock.WithUnfair(nil))
		}, fmt.Sprintf("resume-chain-q-%d", round), plain)
	}
}
