package dlock_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/redistest"
)

// BenchmarkRedisSet is the baseline for the lock benchmarks: one plain SET
// per iteration through the same client, in the same process.
func BenchmarkRedisSet(b *testing.B) {
	rdb := redistest.Start(b).Client(b)
	ctx := b.Context()
	b.Run("serial", func(b *testing.B) {
		for b.Loop() {
			if err := rdb.Set(ctx, "k", "v", 0).Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := rdb.Set(ctx, "k", "v", 0).Err(); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// BenchmarkTryAcquireRelease measures an uncontended lock+release pair (two
// round trips).
func BenchmarkTryAcquireRelease(b *testing.B) {
	rdb := redistest.Start(b).Client(b)
	c := newClient(b, rdb, dlock.WithAutoExtend(false))
	ctx := b.Context()
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			l, err := c.TryAcquire(ctx, "bench")
			if err != nil {
				b.Fatal(err)
			}
			l.Release(ctx)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		var id atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			name := fmt.Sprintf("bench:%d", id.Add(1)) // one name per goroutine: no contention
			for pb.Next() {
				l, err := c.TryAcquire(ctx, name)
				if err != nil {
					b.Error(err)
					return
				}
				l.Release(ctx)
			}
		})
	})
}

// BenchmarkContendedHandoff has several goroutines take turns on one name,
// each holding it for a short while. It reports handoffs/s and the time from
// one holder's release to the next holder's acquisition (p50, p99).
func BenchmarkContendedHandoff(b *testing.B) {
	for _, workers := range []int{2, 8} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			rdb := redistest.Start(b).Client(b)
			c := newClient(b, rdb, dlock.WithAutoExtend(false))
			ctx, cancel := context.WithTimeout(b.Context(), 5*time.Minute)
			defer cancel()
			var (
				mu          sync.Mutex
				lastRelease time.Time
				gaps        []time.Duration
			)
			var remaining atomic.Int64
			remaining.Store(int64(b.N))
			start := time.Now()
			var wg sync.WaitGroup
			for range workers {
				wg.Go(func() {
					for remaining.Add(-1) >= 0 {
						l, err := c.Acquire(ctx, "handoff")
						if err != nil {
							b.Error(err)
							return
						}
						now := time.Now()
						mu.Lock()
						if !lastRelease.IsZero() {
							gaps = append(gaps, now.Sub(lastRelease))
						}
						mu.Unlock()
						time.Sleep(100 * time.Microsecond) // the critical section
						mu.Lock()
						lastRelease = time.Now()
						mu.Unlock()
						if err := l.Release(ctx); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "handoffs/s")
			if len(gaps) > 0 {
				slices.Sort(gaps)
				b.ReportMetric(float64(gaps[len(gaps)/2].Microseconds()), "p50-µs")
				b.ReportMetric(float64(gaps[len(gaps)*99/100].Microseconds()), "p99-µs")
			}
		})
	}
}

// BenchmarkRedlockPair measures uncontended acquire+release over a quorum of
// N independent nodes (N=1 is a single node through the same quorum code),
// all in the same run.
func BenchmarkRedlockPair(b *testing.B) {
	for _, n := range []int{1, 3, 5} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			var nodes []redis.UniversalClient
			for range n {
				nodes = append(nodes, redistest.Start(b).Client(b))
			}
			c := newRedlock(b, nodes, 0, dlock.WithAutoExtend(false))
			ctx := b.Context()
			b.ReportAllocs()
			for b.Loop() {
				l, err := c.TryAcquire(ctx, "bench")
				if err != nil {
					b.Fatal(err)
				}
				l.Release(ctx)
			}
		})
	}
}

// BenchmarkHolderMeta measures uncontended acquire/release pairs (many
// goroutines, distinct names, pipelined) with holder metadata of several
// sizes, and the Redis server's CPU per pair (INFO cpu): the metadata rides
// in the lease token, so it must add no command and no key, only bytes.
func BenchmarkHolderMeta(b *testing.B) {
	for _, tc := range []struct{ name, meta string }{
		{"none", ""},
		{"hostname:pid", "build-server-17.example.net:123456"},
		{"128B-escaped", strings.Repeat("é", 64)},
	} {
		b.Run(tc.name, func(b *testing.B) {
			rdb := redistest.Start(b).Client(b)
			c := newClient(b, rdb, dlock.WithAutoExtend(false), dlock.HolderMeta(tc.meta))
			ctx := b.Context()
			var id atomic.Int64
			cpu := redisCPU(b, rdb)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				name := fmt.Sprintf("bench:%d", id.Add(1))
				for pb.Next() {
					l, err := c.TryAcquire(ctx, name)
					if err != nil {
						b.Error(err)
						return
					}
					l.Release(ctx)
				}
			})
			b.ReportMetric((redisCPU(b, rdb)-cpu).Seconds()*1e6/float64(b.N), "redis-µs/pair")
		})
	}
}

// redisCPU returns the CPU time the server has used (INFO cpu: system and
// user, main thread and children).
func redisCPU(b *testing.B, rdb *redis.Client) time.Duration {
	b.Helper()
	info, err := rdb.Info(b.Context(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total float64
	for _, line := range strings.Split(info, "\r\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			f, _ := strconv.ParseFloat(v, 64)
			total += f
		}
	}
	return time.Duration(total * float64(time.Second))
}
