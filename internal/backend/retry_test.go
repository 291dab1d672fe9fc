package backend

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/driver"
)

// replyError is an error reply of the server, as go-redis returns one.
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}

// Transient says an error may pass where Redis did not answer or refused a
// write for the time being, and not where it answered for good, the client
// was closed, or another Lock resumed the lease.
func TestTransientSaysWhichErrorsMayPass(t *testing.T) {
	tests := []struct {
		err  error
		want bool
	}{
		{nil, false},
		{ErrSuperseded, false},
		{redis.ErrClosed, false},
		{fmt.Errorf("node 1: %w", redis.ErrClosed), false},
		{driver.ErrClosed, false},
		{fmt.Errorf("%w: %w", driver.ErrClosed, errors.New("the client is closed")), false},
		{io.EOF, true},
		{context.DeadlineExceeded, true},
		{NotSent(errors.New("dial tcp: connection refused")), true},
		{replyError("ERR unknown command"), false},
		{replyError("NOPERM this user has no permissions"), false},
		{replyError("WRONGTYPE Operation against a key holding the wrong kind of value"), false},
		{fmt.Errorf("extend: %w", &QuorumError{Op: "extend", Need: 2, Nodes: []error{replyError("WRONGTYPE of another type"), nil, io.EOF}}), true},
		{&QuorumError{Op: "extend", Need: 2, Nodes: []error{replyError("WRONGTYPE of another type"), nil, replyError("WRONGTYPE of another type")}}, false},
		{&QuorumError{Op: "extend", Need: 2, Nodes: []error{errRefused, nil, replyError("WRONGTYPE of another type")}}, false}, // (a node's no stands)
		{&QuorumError{Op: "extend", Need: 2, Nodes: []error{errRefused, nil, errNoAnswer}}, true},
	}
	for _, p := range []string{"NOREPLICAS", "READONLY", "OOM", "LOADING", "BUSY", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN", "MISCONF", "MOVED", "ASK"} {
		tests = append(tests, struct {
			err  error
			want bool
		}{fmt.Errorf("wrapped: %w", replyError(p+" for now")), true})
	}
	for _, tt := range tests {
		if got := Transient(tt.err); got != tt.want {
			t.Errorf("Transient(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}

// Unsent: a request that left for no Redis; over a quorum, for no node
// (one node's ErrNotSent does not make the others' calls unsent).
func TestUnsentMeansNoNodeWasSentTheRequest(t *testing.T) {
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	read := &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	for _, c := range []struct {
		what string
		err  error
		want bool
	}{
		{"never sent", NotSent(context.Canceled), true},
		{"a failed dial", dial, true},
		{"a reply lost", read, false},
		{"a quorum sent to no node", &QuorumError{Nodes: []error{NotSent(context.Canceled), dial, dial}}, true},
		{"a quorum with one node unsent", &QuorumError{Nodes: []error{NotSent(context.Canceled), nil, read}}, false},
		{"a quorum with one node granted", &QuorumError{Nodes: []error{dial, nil, dial}}, false},
	} {
		if got := Unsent(c.err); got != c.want {
			t.Errorf("%s: Unsent(%v) = %v, want %v", c.what, c.err, got, c.want)
		}
	}
}
