package dlockredigo

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/gomodule/redigo/redis"

	"github.com/dlockio/dlock/driver"
)

// pubsub is one pub/sub connection of its own, read by a goroutine that
// hands each message to Receive and ends when the connection does.
type pubsub struct {
	c      redis.Conn
	msgs   chan driver.Message
	closed chan struct{} // closed by Close
	once   sync.Once
	dead   chan struct{} // closed when read ends; err then says why
	err    error
}

// dial opens a pub/sub connection with pool's dial function.
func dial(ctx context.Context, pool *redis.Pool) (*pubsub, error) {
	var c redis.Conn
	var err error
	switch {
	case pool.DialContext != nil:
		c, err = pool.DialContext(ctx)
	case pool.Dial != nil:
		c, err = pool.Dial()
	default:
		err = errors.New("dlockredigo: the pool has neither Dial nor DialContext")
	}
	if err != nil {
		return nil, err
	}
	p := &pubsub{c: c, msgs: make(chan driver.Message), closed: make(chan struct{}), dead: make(chan struct{})}
	go p.read()
	return p, nil
}

func (p *pubsub) read() {
	defer close(p.dead)
	for {
		m, err := p.next()
		if err != nil {
			p.c.Close()
			select {
			case <-p.closed:
				p.err = driver.ErrClosed
			default:
				p.err = err
			}
			return
		}
		select {
		case p.msgs <- m:
		case <-p.closed:
			p.err = driver.ErrClosed
			return
		}
	}
}

// next reads the connection's next message, with no read timeout: the
// connection may stay silent for long.
func (p *pubsub) next() (driver.Message, error) {
	var v any
	var err error
	if c, ok := p.c.(redis.ConnWithTimeout); ok {
		v, err = c.ReceiveWithTimeout(0)
	} else {
		v, err = p.c.Receive()
	}
	if v, err = reply(v, err); err != nil {
		return driver.Message{}, err
	}
	return message(v)
}

// message reads a pushed reply: ["message", channel, payload], a
// confirmation [kind, channel, count], or a PING's reply.
func message(v any) (driver.Message, error) {
	if v == "PONG" {
		return driver.Message{Kind: "pong"}, nil
	}
	a, _ := v.([]any)
	var s [3]string
	for i := range min(len(a), 3) {
		s[i], _ = a[i].(string)
	}
	if len(a) < 2 || s[0] == "" {
		return driver.Message{}, fmt.Errorf("dlockredigo: unexpected pub/sub reply %v", v)
	}
	m := driver.Message{Kind: s[0], Channel: s[1]}
	if m.Kind == "message" {
		m.Payload = s[2]
	}
	return m, nil
}

func (p *pubsub) Subscribe(ctx context.Context, channels ...string) error {
	if len(channels) == 0 {
		return errors.New("dlockredigo: subscribe to no channel")
	}
	return p.send(ctx, "SUBSCRIBE", channels)
}

func (p *pubsub) Unsubscribe(ctx context.Context, channels ...string) error {
	return p.send(ctx, "UNSUBSCRIBE", channels)
}

func (p *pubsub) Ping(ctx context.Context) error { return p.send(ctx, "PING", nil) }

// send writes the command cmd. A write that ctx cuts short closes the
// connection: part of a command may have been written.
func (p *pubsub) send(ctx context.Context, cmd string, channels []string) error {
	select {
	case <-p.dead:
		return p.err
	case <-p.closed:
		return driver.ErrClosed
	default:
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() { p.c.Close() })
	defer stop()
	args := make([]any, len(channels))
	for i, ch := range channels {
		args[i] = ch
	}
	err := p.c.Send(cmd, args...)
	if err == nil {
		err = p.c.Flush()
	}
	select {
	case <-p.closed:
		return driver.ErrClosed
	default:
	}
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("dlockredigo: %s: %w", cmd, ctx.Err())
	}
	return err
}

func (p *pubsub) Receive(ctx context.Context) (driver.Message, error) {
	select {
	case m := <-p.msgs:
		return m, nil
	case <-p.dead:
		return driver.Message{}, p.err
	case <-p.closed:
		return driver.Message{}, driver.ErrClosed
	case <-ctx.Done():
		return driver.Message{}, fmt.Errorf("dlockredigo: receive: %w", ctx.Err())
	}
}

// Close closes the connection and waits for its reader to end.
func (p *pubsub) Close() error {
	p.once.Do(func() {
		close(p.closed)
		p.c.Close()
	})
	<-p.dead
	return nil
}
