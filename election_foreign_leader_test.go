package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlockio/dlock"
)

// Leader refuses a name whose string holds another program's value
// (ErrWrongType), as it refuses a plain lock's token, even when the value
// begins with a leader's mark: "e:lock held by cron on host-7" is no lease
// token (it holds spaces, and no campaign made it), so it names no leader.
func TestElectionLeaderRefusesAForeignValueThatLooksMarked(t *testing.T) {
	t.Parallel()
	_, rdb := setup(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	const name, value = "foreign-leader", "e:lock held by cron on host-7"
	if err := rdb.Set(ctx, "dlock:{"+name+"}", value, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if ld, err := newElection(t, newClient(t, rdb), name).Leader(ctx); !errors.Is(err, dlock.ErrWrongType) {
		t.Errorf("Leader of a name holding %q = %+v, %v; want ErrWrongType", value, ld, err)
	}
}
