package backend

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/driver"
	"github.com/dlockio/dlock/internal/goredisdriver"
)

// maxFlushers bounds how many pipelines a batcher keeps in flight at once:
// enough to keep the server busy while batches' replies travel back, few
// enough not to split the waiting commands into many small pipelines
// (measured on 2 cores: 1 is ~20% slower than 4 at 64 goroutines, 8 no faster).
const maxFlushers = 4

// batcher runs the script calls of concurrent goroutines together: a call
// that finds a pipeline in flight queues behind it, and the next flush sends
// everything queued as one pipeline — one write and one read for many
// commands, on the client and on the server. A lone call goes out at once,
// so nothing waits for a batch to fill.
//
// Batching changes nothing but speed: a call honours its context as it
// would unbatched, and better. A call whose ctx is done is not sent; one
// whose ctx ends while it is queued is taken out of the queue, and one
// whose ctx ends while it is in flight returns at once (its reply, when it
// comes, is dropped). Flushes run on goroutines of their own, so no caller
// ever waits for another caller's pipeline beyond its own deadline.
//
// It is a Node's Conn: the scripts' EVALSHA goes through its Do (a
// NOSCRIPT reply is handled by Node.rerun, which loads the scripts back on
// the client itself), the rest through goredisdriver.Loader.
//
// Every command goes out once: go-redis never sends it again after a
// failure that may have left it running (see once), so a command whose
// reply came back has no copy that can land later.
type batcher struct {
	driver.Conn // rdb as goredisdriver.Loader: what is not a script call (DoMulti, Masters…)
	rdb         redis.UniversalClient
	alone       bool // each call goes alone, on its caller's goroutine (pipelining off)

	mu       sync.Mutex
	queue    []*call
	flushers int
	pipes    sync.Pool // idle Pipeliners, reused across flushes

	calls, writes atomic.Uint64 // commands sent, and the writes (pipelines or lone commands) that carried them
}

// A call's life: queued, then sent by a flusher and done when its reply is
// in; or abandoned by its caller, whose ctx ended first. Whoever touches it
// last returns it to the pool: the caller once it has read a done call, the
// flusher for an abandoned one.
const (
	callQueued int32 = iota
	callSent
	callDone
	callAbandoned
)

type call struct {
	goredisdriver.Once // the command; go-redis is given the call, which is never re-sent
	ctx                context.Context
	state              atomic.Int32
	done               chan struct{}
}

var callPool = sync.Pool{New: func() any { return &call{done: make(chan struct{}, 1)} }}

// ErrNotSent reports a call abandoned (or a driver's command refused)
// before it was sent: it never reached Redis, so there is nothing to undo.
var ErrNotSent = driver.ErrNotSent

// NotSent is err, the cause of a call abandoned before it was sent,
// wrapped with ErrNotSent.
func NotSent(err error) error { return fmt.Errorf("%w: %w", ErrNotSent, err) }

// ErrLeftInFlight reports a call whose caller left when its context ended
// after it was sent (or, through a driver in trouble, while it may still
// be sent): it may run, its reply unread (ReplyLost).
var ErrLeftInFlight = errors.New("left in flight")

// Do runs one command, alone or in a pipeline with other goroutines'
// commands, and returns its reply or error as go-redis gives them; or, if
// ctx ended first, ctx's error (wrapping ErrNotSent if the command was
// never sent).
func (b *batcher) Do(ctx context.Context, args ...any) (any, error) {
	if err := ctx.Err(); err != nil {
		return nil, NotSent(err)
	}
	cmd := redis.NewCmd(ctx, args...)
	if b.alone {
		b.rdb.Process(ctx, goredisdriver.Once{Cmder: cmd})
		return cmd.Result()
	}
	c := callPool.Get().(*call)
	c.Cmder, c.ctx = cmd, ctx
	c.state.Store(callQueued)
	b.mu.Lock()
	b.queue = append(b.queue, c)
	lead := b.flushers < maxFlushers
	if lead {
		b.flushers++
	}
	b.mu.Unlock()
	if lead {
		go b.flush()
	}
	select {
	case <-c.done:
	case <-ctx.Done():
		if c.state.CompareAndSwap(callQueued, callAbandoned) {
			return nil, NotSent(ctx.Err())
		}
		if c.state.CompareAndSwap(callSent, callAbandoned) {
			return nil, fmt.Errorf("%w: %w", ErrLeftInFlight, ctx.Err())
		}
		<-c.done // done meanwhile: the reply is in
	}
	c.free()
	return cmd.Result()
}

// free returns the call to the pool.
func (c *call) free() {
	c.Cmder, c.ctx = nil, nil
	callPool.Put(c)
}

// flush sends what is queued until the queue is empty. A pipeline is sent
// with the first caller's context stripped of its cancellation (its values
// reach go-redis's hooks); each caller watches its own context.
func (b *batcher) flush() {
	var buf [16]*call
	batch := buf[:0] // the queue is copied out here, so that its array is reused
	for {
		b.mu.Lock()
		batch = append(batch[:0], b.queue...)
		clear(b.queue)
		b.queue = b.queue[:0]
		if len(batch) == 0 {
			b.flushers--
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()

		sent := batch[:0]
		for _, c := range batch {
			if c.state.CompareAndSwap(callQueued, callSent) {
				sent = append(sent, c)
			} else {
				c.free() // abandoned before it was sent
			}
		}
		b.send(sent)
		for _, c := range sent {
			if c.state.CompareAndSwap(callSent, callDone) {
				c.done <- struct{}{}
			} else {
				c.free() // abandoned in flight
			}
		}
	}
}

// send runs the calls' commands, one alone or several as a pipeline.
func (b *batcher) send(calls []*call) {
	if len(calls) == 0 {
		return
	}
	b.calls.Add(uint64(len(calls)))
	b.writes.Add(1)
	ctx := context.WithoutCancel(calls[0].ctx)
	if len(calls) == 1 {
		b.rdb.Process(ctx, calls[0])
		return
	}
	pipe, _ := b.pipes.Get().(redis.Pipeliner)
	if pipe == nil {
		pipe = b.rdb.Pipeline()
	}
	for _, c := range calls {
		pipe.Process(ctx, c)
	}
	if _, err := pipe.Exec(ctx); err != nil { // each command carries its own error (see goredisdriver.Unanswered); Exec empties pipe
		for _, c := range calls {
			goredisdriver.Unanswered(c.Cmder.(*redis.Cmd), err)
		}
	}
	b.pipes.Put(pipe)
}
