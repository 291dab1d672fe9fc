package dlockrueidis_test

import (
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/redis/rueidis"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/extra/dlockrueidis"
	"github.com/dlockio/dlock/internal/redistest"
)

// BenchmarkTryAcquireRelease measures an uncontended lock+release pair
// through the driver, as the root's benchmark of the same name does
// through go-redis.
func BenchmarkTryAcquireRelease(b *testing.B) {
	s := redistest.Start(b, redistest.TCP())
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{s.Addr()}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(rc.Close)
	c, err := dlockrueidis.New(rc, dlock.WithAutoExtend(false))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close(b.Context()) })
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
		var n atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			name := "bench:" + strconv.FormatInt(n.Add(1), 10)
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
