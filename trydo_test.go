package dlock_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
)

// job is fn run under TryDo of one kind's lock.
type job = func(ctx context.Context, fn func(context.Context, *dlock.Lock) error) error

// tryDoKinds are the kinds that have TryDo, each as a func that makes a
// Client of its own on rdb (an instance of the job) and returns its TryDo
// of the name.
var tryDoKinds = []struct {
	kind        string
	namesHolder bool // the refusal's NotAcquiredError names the holder's token
	instance    func(t *testing.T, rdb *redis.Client, name string) job
}{
	{"lock", true, func(t *testing.T, rdb *redis.Client, name string) job {
		c := newClient(t, rdb)
		return func(ctx context.Context, fn func(context.Context, *dlock.Lock) error) error {
			return c.TryDo(ctx, name, fn)
		}
	}},
	{"semaphore of one permit", false, func(t *testing.T, rdb *redis.Client, name string) job {
		s, err := newClient(t, rdb).Semaphore(name, 1)
		if err != nil {
			t.Fatal(err)
		}
		return func(ctx context.Context, fn func(context.Context, *dlock.Lock) error) error {
			return s.TryDo(ctx, fn)
		}
	}},
	{"multi-lock", true, func(t *testing.T, rdb *redis.Client, name string) job {
		c := newClient(t, rdb)
		return func(ctx context.Context, fn func(context.Context, *dlock.Lock) error) error {
			// In key order "nightly" comes before "other": an attempt is
			// refused on it, and fn gets its lease.
			return c.TryDoAll(ctx, []string{"other", name}, func(ctx context.Context, m *dlock.MultiLock) error {
				i := slices.IndexFunc(m.Locks(), func(l *dlock.Lock) bool { return l.Name() == name })
				return fn(ctx, m.Locks()[i])
			})
		}
	}},
	{"write lock", false, func(t *testing.T, rdb *redis.Client, name string) job {
		rw, err := newClient(t, rdb).RWMutex(name)
		if err != nil {
			t.Fatal(err)
		}
		return func(ctx context.Context, fn func(context.Context, *dlock.Lock) error) error {
			return rw.Writer().TryDo(ctx, fn)
		}
	}},
}

// Three instances of a job start together, each with a Client of its own:
// TryDo runs the job in one of them, and the other two skip it, told that
// the lock is held (by whom, for a lock). The job's fn stays in until both
// others have returned, so the three attempts overlap.
func TestTryDoRunsTheJobOnceAmongInstancesStartedTogether(t *testing.T) {
	t.Parallel()
	for _, k := range tryDoKinds {
		t.Run(k.kind, func(t *testing.T) {
			_, rdb := setup(t)
			var (
				runs, skipped atomic.Int32
				winner        atomic.Value // the token of the lease fn ran under
				start         = make(chan struct{})
				wg            sync.WaitGroup
			)
			errs := make([]error, 3)
			for i := range errs {
				tryDo := k.instance(t, rdb, "nightly")
				wg.Go(func() {
					<-start
					errs[i] = tryDo(t.Context(), func(ctx context.Context, l *dlock.Lock) error {
						runs.Add(1)
						winner.Store(l.Token())
						if !waitFor(10*time.Second, func() bool { return skipped.Load() == 2 }) {
							return errors.New("the two other instances did not return within 10s")
						}
						return ctx.Err()
					})
					if errors.Is(errs[i], dlock.ErrNotAcquired) {
						skipped.Add(1)
					}
				})
			}
			close(start)
			wg.Wait()

			if n := runs.Load(); n != 1 {
				t.Errorf("fn ran %d times among three TryDo, want 1", n)
			}
			refused := 0
			for i, err := range errs {
				if err == nil {
					continue
				}
				refused++
				na, ok := errors.AsType[*dlock.NotAcquiredError](err)
				if !ok || na.Name != "nightly" {
					t.Errorf("instance %d: TryDo = %v, want nil, or an error wrapping ErrNotAcquired with a *NotAcquiredError for \"nightly\"", i, err)
					continue
				}
				if tok, _ := winner.Load().(string); k.namesHolder && na.Holder != tok {
					t.Errorf("instance %d: refused with Holder %q, want the running instance's token %q", i, na.Holder, tok)
				}
			}
			if refused != 2 {
				t.Errorf("%d of three TryDo refused, want 2 (errors: %v)", refused, errs)
			}
		})
	}
}

// TryDo runs fn and releases the lock when the lock is free, so a second
// TryDo after it runs too; a MaxWait that would make it wait is refused.
func TestTryDoRunsWhenFreeAndReleases(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx := t.Context()
	c := newClient(t, rdb)
	for i := range 2 {
		ran := false
		err := c.TryDo(ctx, "free", func(ctx context.Context, l *dlock.Lock) error {
			ran = l.Err() == nil
			return nil
		})
		if err != nil || !ran {
			t.Errorf("TryDo #%d on a free lock = %v (fn ran under a held lock: %v), want nil and fn run", i+1, err, ran)
		}
	}
	if n := liveKeys(ctx, rdb, "dlock:{free}"); n != 0 {
		t.Errorf("lock still exists after TryDo returned")
	}
	err := c.TryDo(ctx, "free", func(context.Context, *dlock.Lock) error {
		t.Error("fn ran under TryDo with MaxWait(1s)")
		return nil
	}, dlock.MaxWait(time.Second))
	if !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("TryDo with MaxWait(1s) = %v, want ErrInvalid", err)
	}
}
