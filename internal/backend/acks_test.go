package backend

import (
	"errors"
	"io"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/driver"
	"github.com/dlockio/dlock/internal/redistest"
)

// acksOf counts the append-only file's acknowledgement first, and none
// at all when the file lacks the write, then the replicas' up to those
// asked; a refused WAITAOF is an error, a lost one is not. The refusal
// matches ErrNotAcquired for an acquisition only: an extension's (refused
// nil) reads the same and matches the rest.
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
		acks, err := n.acksOf(c.rs, ErrNotAcquired)
		refused := errors.Is(err, ErrNotDurable) && errors.Is(err, ErrNotAcquired) && errors.Is(err, ErrInvalid)
		if acks != c.want || refused != c.refused || (err != nil && !c.refused) {
			t.Errorf("%s: acksOf = %d, %v, want %d (refused %v)", c.name, acks, err, c.want, c.refused)
		}
		acks, ext := n.acksOf(c.rs, nil)
		same := (ext == nil) == (err == nil) && (ext == nil || ext.Error() == err.Error())
		if acks != c.want || !same || errors.Is(ext, ErrNotAcquired) || (ext != nil && !(errors.Is(ext, ErrNotDurable) && errors.Is(ext, ErrInvalid))) {
			t.Errorf("%s: an extension's acksOf = %d, %v, want %d, %v without ErrNotAcquired", c.name, acks, ext, c.want, err)
		}
	}
}

// Without scripts, reading the replies of both waits (WAIT and WAITAOF)
// costs no more allocations beyond their round trip than reading
// WAITAOF's alone: the replies are read where they lie.
//
// Serial: it counts the process's allocations.
func TestNoScriptsAckReadsBothWaitsWithoutAnAllocationMore(t *testing.T) {
	rdb := redistest.Start(t, redistest.Valkey(t), redistest.Args("--appendonly", "yes", "--appendfsync", "always")).Client(t)
	ctx := t.Context()
	short := errors.New("short") // (too few acknowledgements: made once)
	beyondRead := func(c Config) (extra float64) {
		n := NoScripts{NewNode(rdb, c)}
		err := rdb.Watch(ctx, func(rt *redis.Tx) error {
			t := tx{rt, ctx}
			read := testing.AllocsPerRun(20, func() { t.read(n.acks...) })
			extra = testing.AllocsPerRun(20, func() { n.ack(t, nil, ErrNotAcquired, func(int64) error { return short }) }) - read
			return nil
		}, "ack")
		if err != nil {
			t.Fatal(err)
		}
		return extra
	}
	aof := beyondRead(Config{TTL: time.Second, Durable: time.Second})
	both := beyondRead(Config{TTL: time.Second, Durable: time.Second, Replicas: 1, AckTimeout: time.Millisecond})
	if both > aof {
		t.Errorf("ack with WAIT and WAITAOF makes %v allocations beyond its read, with WAITAOF alone %v", both, aof)
	}
}
