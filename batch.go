package dlock

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"
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
// It implements redis.Scripter, so the scripts run through it unchanged
// (EVALSHA, then EVAL on NOSCRIPT).
type batcher struct {
	rdb redis.UniversalClient

	mu       sync.Mutex
	queue    []*call
	spare    []*call // the previous queue's array, reused
	flushers int
	pipes    sync.Pool // idle Pipeliners, reused across flushes
}

type call struct {
	cmd  redis.Cmder
	done chan struct{}
}

var callPool = sync.Pool{New: func() any { return &call{done: make(chan struct{}, 1)} }}

func newBatcher(rdb redis.UniversalClient) *batcher { return &batcher{rdb: rdb} }

// do runs cmd, alone or in a pipeline with other goroutines' commands, and
// returns when its reply (or error) is in cmd.
func (b *batcher) do(cmd redis.Cmder) {
	c := callPool.Get().(*call)
	c.cmd = cmd
	b.mu.Lock()
	b.queue = append(b.queue, c)
	lead := b.flushers < maxFlushers
	if lead {
		b.flushers++
	}
	b.mu.Unlock()
	if lead {
		b.flush()
	}
	<-c.done
	c.cmd = nil
	callPool.Put(c)
}

// flush sends what is queued until the queue is empty. The replies' wait is
// bounded by the client's read timeout; callers' contexts are not consulted,
// as go-redis does not consult them on reads either.
func (b *batcher) flush() {
	ctx := context.Background()
	for {
		b.mu.Lock()
		batch := b.queue
		if len(batch) == 0 {
			b.flushers--
			b.mu.Unlock()
			return
		}
		b.queue, b.spare = b.spare[:0], nil
		b.mu.Unlock()

		if len(batch) == 1 {
			b.rdb.Process(ctx, batch[0].cmd)
		} else {
			pipe, _ := b.pipes.Get().(redis.Pipeliner)
			if pipe == nil {
				pipe = b.rdb.Pipeline()
			}
			for _, c := range batch {
				pipe.Process(ctx, c.cmd)
			}
			pipe.Exec(ctx) // each command carries its own error; Exec empties pipe
			b.pipes.Put(pipe)
		}
		for i, c := range batch {
			c.done <- struct{}{}
			batch[i] = nil
		}
		b.mu.Lock()
		if b.spare == nil {
			b.spare = batch[:0]
		}
		b.mu.Unlock()
	}
}

func (b *batcher) run(ctx context.Context, args ...any) *redis.Cmd {
	cmd := redis.NewCmd(ctx, args...)
	b.do(cmd)
	return cmd
}

func evalArgs(cmd, scriptOrSHA string, keys []string, args []any) []any {
	a := make([]any, 0, 3+len(keys)+len(args))
	a = append(a, cmd, scriptOrSHA, len(keys))
	for _, k := range keys {
		a = append(a, k)
	}
	return append(a, args...)
}

func (b *batcher) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return b.run(ctx, evalArgs("eval", script, keys, args)...)
}

func (b *batcher) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return b.run(ctx, evalArgs("evalsha", sha1, keys, args)...)
}

func (b *batcher) EvalRO(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return b.run(ctx, evalArgs("eval_ro", script, keys, args)...)
}

func (b *batcher) EvalShaRO(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return b.run(ctx, evalArgs("evalsha_ro", sha1, keys, args)...)
}

func (b *batcher) ScriptExists(ctx context.Context, hashes ...string) *redis.BoolSliceCmd {
	return b.rdb.ScriptExists(ctx, hashes...)
}

func (b *batcher) ScriptLoad(ctx context.Context, script string) *redis.StringCmd {
	return b.rdb.ScriptLoad(ctx, script)
}
