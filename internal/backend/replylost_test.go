package backend

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/driver"
)

// asOpError is an error that is not a *net.OpError but answers As for one
// (and for a net.Error), as some clients' wrappers do.
type asOpError struct{ op *net.OpError }

func (e asOpError) Error() string { return "wrapper: " + e.op.Error() }

func (e asOpError) As(target any) bool {
	switch p := target.(type) {
	case **net.OpError:
		*p = e.op
	case *net.Error:
		*p = e.op
	default:
		return false
	}
	return true
}

// TestNeverSentAndReplyLostReadEveryErrorShape pins what neverSent and
// ReplyLost answer for each shape an error may come in: bare, wrapped
// (once and twice), joined with an unrelated error, and answering As
// without wrapping; a failed dial is never sent, a failed read lost its
// reply, a server's answer is neither.
func TestNeverSentAndReplyLostReadEveryErrorShape(t *testing.T) {
	t.Parallel()
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	read := &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
	write := &net.OpError{Op: "write", Net: "tcp", Err: os.NewSyscallError("write", syscall.EPIPE)}
	other := errors.New("unrelated")
	for _, tc := range []struct {
		name            string
		err             error
		unsent, noReply bool
	}{
		{"nil", nil, false, false},
		{"not sent", ErrNotSent, true, false},
		{"dial", dial, true, false},
		{"read", read, false, true},
		{"write", write, false, true},
		{"EOF", io.EOF, false, true},
		{"unexpected EOF", io.ErrUnexpectedEOF, false, true},
		{"closed connection", net.ErrClosed, false, true},
		{"left in flight", ErrLeftInFlight, false, true},
		{"left in flight, its context ended", fmt.Errorf("%w: %w", ErrLeftInFlight, context.Canceled), false, true},
		{"driver's error reply", driver.Error("ERR boom"), false, false},
		{"go-redis's error reply", redis.Nil, false, false},
		{"unrelated", other, false, false},
		{"a dial's, then a read's", errors.Join(dial, read), true, false},
		{"a read's, then a dial's", errors.Join(read, dial), false, true},
		{"an As of a dial", asOpError{dial}, true, false},
		{"an As of a read", asOpError{read}, false, true},
	} {
		shapes := []struct {
			name string
			err  error
		}{{"bare", tc.err}}
		if tc.err != nil {
			shapes = append(shapes,
				struct {
					name string
					err  error
				}{"wrapped", fmt.Errorf("call: %w", tc.err)},
				struct {
					name string
					err  error
				}{"wrapped twice", fmt.Errorf("op: %w", fmt.Errorf("call: %w", tc.err))},
				struct {
					name string
					err  error
				}{"joined after another", errors.Join(other, tc.err)})
		}
		for _, s := range shapes {
			if got := neverSent(s.err); got != tc.unsent {
				t.Errorf("%s, %s: neverSent(%v) = %v, want %v", tc.name, s.name, s.err, got, tc.unsent)
			}
			if got := ReplyLost(s.err); got != tc.noReply {
				t.Errorf("%s, %s: ReplyLost(%v) = %v, want %v", tc.name, s.name, s.err, got, tc.noReply)
			}
		}
	}
}
