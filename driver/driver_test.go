package driver_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/driver"
)

func TestString(t *testing.T) {
	s := "x"
	for _, c := range []struct {
		arg  any
		want string
		ok   bool
	}{
		{"a b", "a b", true}, {&s, "x", true}, {[]byte("b"), "b", true},
		{7, "7", true}, {int64(-9), "-9", true}, {1.5, "", false}, {nil, "", false},
	} {
		if got, ok := driver.String(c.arg); got != c.want || ok != c.ok {
			t.Errorf("String(%#v) = %q, %v; want %q, %v", c.arg, got, ok, c.want, c.ok)
		}
	}
}

func TestKeys(t *testing.T) {
	k1, k2 := "dlock:{a}", "dlock:{a}:r:t"
	for _, c := range []struct {
		args []any
		want []string
	}{
		{[]any{"evalsha", "sha", 2, &k1, &k2, "tok", int64(10)}, []string{k1, k2}},
		{[]any{"EVAL", "return 1", "1", "k", "arg"}, []string{"k"}},
		{[]any{"evalsha", "sha", 0, "arg"}, nil},
		{[]any{"evalsha", "sha", 3, "k"}, nil}, // (fewer arguments than keys)
		{[]any{"get", &k1}, []string{k1}},
		{[]any{"TYPE", "k"}, []string{"k"}},
		{[]any{"zrange", "k", 0, 0}, []string{"k"}},
		{[]any{"set", "k", "v", "px", int64(10)}, []string{"k"}},
		{[]any{"DEL", "k"}, []string{"k"}},
		{[]any{"script", "load", "return 1"}, nil},
		{[]any{"scan", "0", "match", "*"}, nil},
		{[]any{"ping"}, nil},
	} {
		if got := driver.Keys(c.args); !slices.Equal(got, c.want) {
			t.Errorf("Keys(%v) = %q, want %q", c.args, got, c.want)
		}
	}
}

// A driver's server error reads as go-redis's own to the code that checks
// for one.
func TestErrorIsARedisError(t *testing.T) {
	var err error = driver.Error("NOSCRIPT No matching script")
	var rerr redis.Error
	if !errors.As(err, &rerr) || !redis.HasErrorPrefix(err, "NOSCRIPT") {
		t.Fatal("driver.Error is not a redis.Error")
	}
}
