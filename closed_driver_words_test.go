package dlock_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlockio/dlock"
)

// A call through a driver whose client was closed fails with ErrClosed
// saying "dlock: " once, as every error of the package does: the
// operation's prefix names the package, the closed client's cause does not
// again.
func TestCallsThroughAClosedDriverSayDlockOnce(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	c, rdb := onOwnRedisClient(t, s, "NewFrom")
	l, err := c.TryAcquire(t.Context(), "closed-driver-words")
	if err != nil {
		t.Fatal(err)
	}
	rdb.Close()
	_, acquire := c.TryAcquire(t.Context(), "closed-driver-words-other")
	_, inspect := c.Inspect(t.Context(), "closed-driver-words")
	for what, err := range map[string]error{
		"TryAcquire": acquire,
		"Extend":     l.Extend(t.Context(), time.Second),
		"Inspect":    inspect,
		"Release":    l.Release(t.Context()),
	} {
		if !errors.Is(err, dlock.ErrClosed) || strings.Count(err.Error(), "dlock: ") != 1 {
			t.Errorf("%s through the closed driver: %v; want ErrClosed saying \"dlock: \" once", what, err)
		}
	}
}
