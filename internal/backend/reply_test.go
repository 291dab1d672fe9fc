package backend

import (
	"errors"
	"io"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/driver"
	"github.com/dlockio/dlock/internal/goredisdriver"
	"github.com/dlockio/dlock/internal/redistest"
	"github.com/dlockio/dlock/internal/script"
)

// A reply reads alike through go-redis and through a driver: a nil reply
// (a missing key) is no error where it has a meaning, and is redis.Nil to
// a typed read; a reply of the wrong type is an error.
func TestRepliesReadAlikeThroughGoRedisAndADriver(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	ctx := t.Context()
	for road, n := range map[string]Node{
		"go-redis": NewNode(rdb, Config{TTL: time.Second}),
		"driver":   NewNodeFrom(goredisdriver.Conn(rdb), Config{TTL: time.Second}),
	} {
		key := "reply:" + road
		if v, ok, err := n.GetRecord(ctx, key); v != "" || ok || err != nil {
			t.Errorf("%s: GetRecord(missing) = %q, %v, %v, want \"\", false, nil", road, v, ok, err)
		}
		if err := n.SetRecord(ctx, key, "v", 10000); err != nil {
			t.Fatalf("%s: SetRecord = %v", road, err)
		}
		if v, ok, err := n.GetRecord(ctx, key); v != "v" || !ok || err != nil {
			t.Errorf("%s: GetRecord = %q, %v, %v, want \"v\", true, nil", road, v, ok, err)
		}
		c := &Claim{Keys: KeysFor("dlock:", road), Kind: PlainLock}
		c.SetToken("t")
		if seq, drives, err := n.Seq(ctx, c); seq != 0 || !drives || err != nil {
			t.Errorf("%s: Seq without a marker = %d, %v, %v, want 0, true, nil", road, seq, drives, err)
		}
		if _, err := as[int64](n.do(ctx, "get", key)); err == nil {
			t.Errorf("%s: a string read as an integer: nil error", road)
		}
		if _, err := as[string](n.do(ctx, "get", key+":none")); err != redis.Nil {
			t.Errorf("%s: a nil reply read as a string = %v, want redis.Nil", road, err)
		}
	}
}

// A call through a closed driver fails with driver.ErrClosed, which is no
// reply of the server and not worth retrying.
func TestCallThroughAClosedDriverIsErrClosed(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(redistest.Start(t).Options())
	rdb.Close()
	n := NewNodeFrom(goredisdriver.Conn(rdb), Config{TTL: time.Second})
	_, err := n.run(t.Context(), script.Uptime, []any{"closed"})
	if !errors.Is(err, driver.ErrClosed) || Transient(err) || isRedisError(err) || ReplyLost(err) {
		t.Errorf("a call through a closed driver = %v, want driver.ErrClosed, not transient, no reply of the server's, no lost reply", err)
	}
}

// as passes an error on, and reads a nil reply as redis.Nil and one of
// another type as an error.
func TestAsReadsAReplyOfItsType(t *testing.T) {
	t.Parallel()
	if v, err := as[int64](int64(3), nil); v != 3 || err != nil {
		t.Errorf("as[int64](3) = %v, %v", v, err)
	}
	if _, err := as[int64](nil, nil); err != redis.Nil {
		t.Errorf("as[int64](nil) = %v, want redis.Nil", err)
	}
	if _, err := as[int64]("3", nil); err == nil {
		t.Error("as[int64](\"3\") = nil error")
	}
	if _, err := as[[]any](nil, io.EOF); err != io.EOF {
		t.Errorf("as with an error = %v, want it", err)
	}
	if v, err := ints([]any{int64(1), int64(2)}, nil); len(v) != 2 || v[1] != 2 || err != nil {
		t.Errorf("ints({1, 2}) = %v, %v", v, err)
	}
	if _, err := ints([]any{int64(1), "x"}, nil); err == nil {
		t.Error("ints({1, \"x\"}) = nil error")
	}
}
