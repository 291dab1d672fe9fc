package dlockrueidis

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/redis/rueidis"

	"github.com/dlockio/dlock/driver"
)

// PubSub takes a dedicated connection, which rueidis dials and greets with
// no context: when ctx ends first, it returns and leaves the dial to finish
// on its own goroutine, then hands the connection back.
func (c conn) PubSub(ctx context.Context, channel string) (driver.PubSub, error) {
	p := &pubsub{c: c.c, shard: channel, msgs: make(chan driver.Message, 64), done: make(chan struct{})}
	got := make(chan struct{})
	go func() {
		defer close(got)
		p.dc, p.release = c.c.Dedicate()
		p.broken = p.dc.SetPubSubHooks(p.hooks())
	}()
	select {
	case <-got:
		return p, nil
	case <-ctx.Done():
		go func() {
			<-got
			p.Close()
		}()
		return nil, fmt.Errorf("dlockrueidis: pub/sub connection: %w", ctx.Err())
	}
}

// pubsub is a dedicated connection whose hooks pass what it receives to
// Receive, waiting for it (rueidis answers a SUBSCRIBE at its first
// confirmation, before any wait). It does not reconnect: once broken,
// every method fails.
type pubsub struct {
	c       rueidis.Client
	shard   string // "", or the channel whose slot its channels share (SSUBSCRIBE)
	dc      rueidis.DedicatedClient
	release func()
	broken  <-chan error          // rueidis reports the end of the connection on it
	gone    atomic.Pointer[error] // why every method now fails
	msgs    chan driver.Message
	done    chan struct{} // closed by Close
	once    sync.Once
}

func (p *pubsub) hooks() rueidis.PubSubHooks {
	pass := func(m driver.Message) {
		select {
		case p.msgs <- m:
		case <-p.done:
		}
	}
	return rueidis.PubSubHooks{
		OnMessage: func(m rueidis.PubSubMessage) {
			pass(driver.Message{Kind: "message", Channel: m.Channel, Payload: m.Message})
		},
		OnSubscription: func(s rueidis.PubSubSubscription) {
			pass(driver.Message{Kind: s.Kind, Channel: s.Channel})
		},
	}
}

// fail records err as the reason every method fails from now on, unless
// one is recorded already; it returns the reason.
func (p *pubsub) fail(err error) error {
	p.gone.CompareAndSwap(nil, &err)
	return *p.gone.Load()
}

// do sends cmd, unless the connection is gone.
func (p *pubsub) do(ctx context.Context, cmd rueidis.Completed) error {
	if err := p.gone.Load(); err != nil {
		return *err
	}
	if err := p.dc.Do(ctx, cmd).Error(); err != nil {
		if ctx.Err() == nil {
			return p.fail(convertErr(err))
		}
		return convertErr(err)
	}
	return nil
}

func (p *pubsub) Subscribe(ctx context.Context, channels ...string) error {
	if p.shard == "" {
		return p.do(ctx, p.c.B().Subscribe().Channel(channels...).Build())
	}
	cmd, ref := p.c.B().Ssubscribe().Channel(channels...).Build(), p.c.B().Ssubscribe().Channel(p.shard).Build()
	if cmd.Slot() != ref.Slot() {
		// (rueidis would panic: a dedicated connection serves one slot)
		return fmt.Errorf("dlockrueidis: channels of another slot than %q on a sharded connection", p.shard)
	}
	return p.do(ctx, cmd)
}

func (p *pubsub) Unsubscribe(ctx context.Context, channels ...string) error {
	if p.shard == "" {
		return p.do(ctx, p.c.B().Unsubscribe().Channel(channels...).Build())
	}
	return p.do(ctx, p.c.B().Sunsubscribe().Channel(channels...).Build())
}

// Ping waits for the PING's reply, which rueidis reads, and passes it on
// to Receive, unless Receive's queue is full: a message in it shows as
// well that the connection lives.
func (p *pubsub) Ping(ctx context.Context) error {
	if err := p.do(ctx, p.c.B().Ping().Build()); err != nil {
		return err
	}
	select {
	case p.msgs <- driver.Message{Kind: "pong"}:
	default:
	}
	return nil
}

func (p *pubsub) Receive(ctx context.Context) (driver.Message, error) {
	if err := p.gone.Load(); err != nil {
		return driver.Message{}, *err
	}
	select {
	case m := <-p.msgs:
		return m, nil
	case err := <-p.broken:
		if err == nil {
			err = errors.New("dlockrueidis: pub/sub connection ended")
		}
		return driver.Message{}, p.fail(convertErr(err))
	case <-p.done:
		return driver.Message{}, driver.ErrClosed
	case <-ctx.Done():
		return driver.Message{}, fmt.Errorf("dlockrueidis: receive: %w", ctx.Err())
	}
}

// Close closes the connection off the caller's goroutine: rueidis's Close
// pings the server and waits for the reply (up to a second).
func (p *pubsub) Close() error {
	p.once.Do(func() {
		p.fail(driver.ErrClosed)
		close(p.done)
		go func() {
			p.dc.Close()
			p.release()
		}()
	})
	return nil
}
