package backend

import (
	"errors"
	"io"
	"testing"
	"time"

	"github.com/dlockio/dlock/driver"
)

// acksOf counts the append-only file's acknowledgement first, and none
// at all when the file lacks the write, then the replicas' up to those
// asked; a refused WAITAOF is an error, a lost one is not.
func TestAcksOfCountsTheFileFirstThenTheReplicas(t *testing.T) {
	t.Parallel()
	wait := func(n int64) driver.Result { return driver.Result{Val: n} }
	waitAOF := func(local int64) driver.Result { return driver.Result{Val: []any{local, int64(0)}} }
	failed := func(err error) driver.Result { return driver.Result{Err: err} }
	for _, c := range []struct {
		name     string
		replicas int
		durable  time.Duration
		rs       []driver.Result
		want     int64
		refused  bool
	}{
		{"neither", 0, 0, nil, 0, false},
		{"replicas", 2, 0, []driver.Result{wait(1)}, 1, false},
		{"more replicas than asked", 2, 0, []driver.Result{wait(5)}, 2, false},
		{"the file", 1, time.Second, []driver.Result{waitAOF(1)}, 1, false},
		{"the file without the write", 1, time.Second, []driver.Result{waitAOF(0)}, 0, false},
		{"the file and replicas", 3, time.Second, []driver.Result{wait(1), waitAOF(1)}, 2, false},
		{"the file and more replicas than asked", 3, time.Second, []driver.Result{wait(4), waitAOF(1)}, 3, false},
		{"replicas, the file without the write", 3, time.Second, []driver.Result{wait(2), waitAOF(0)}, 0, false},
		{"WAITAOF lost", 1, time.Second, []driver.Result{failed(io.EOF)}, 0, false},
		{"WAITAOF refused", 1, time.Second, []driver.Result{failed(replyErr("ERR WAITAOF cannot be used when numlocal is set but appendonly is disabled."))}, 0, true},
	} {
		n := Node{replicas: c.replicas, durable: c.durable}
		acks, err := n.acksOf(c.rs)
		refused := errors.Is(err, ErrNotDurable) && errors.Is(err, ErrNotAcquired) && errors.Is(err, ErrInvalid)
		if acks != c.want || refused != c.refused || (err != nil && !c.refused) {
			t.Errorf("%s: acksOf = %d, %v, want %d (refused %v)", c.name, acks, err, c.want, c.refused)
		}
	}
}
