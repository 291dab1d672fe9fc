package dlockrueidis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/dlockio/dlock/driver"
)

// The pause before connecting again after a broken connection: doubled at
// each failure, from minBackoff up to maxBackoff.
const (
	minBackoff = 20 * time.Millisecond
	maxBackoff = time.Second
)

// maxQueued bounds the messages held for Receive; beyond it messages are
// dropped (confirmations and errors never are).
const maxQueued = 1 << 14

var errNotConnected = errors.New("dlockrueidis: pub/sub connection not established")

func (c conn) PubSub(ctx context.Context, channel string) (driver.PubSub, error) {
	p := &pubsub{
		c:       c.c,
		sharded: channel != "",
		done:    make(chan struct{}),
		notify:  make(chan struct{}, 1),
		kick:    make(chan struct{}, 1),
		opsSig:  make(chan struct{}, 1),
	}
	if p.sharded {
		p.chans, p.shard = []string{channel}, channel
	}
	p.wg.Add(1)
	go p.run()
	return p, nil
}

// pubsub is a dedicated connection with hooks that queue what it receives.
// One goroutine does its network work: it connects (again, and subscribes
// again, when the connection breaks) and sends the (un)subscriptions in
// the order they were asked for; the methods never wait on the network.
type pubsub struct {
	c       rueidis.Client
	sharded bool   // SSUBSCRIBE, on the shard of its channels
	shard   string // sharded: the channel it was opened for, whose slot its channels share
	done    chan struct{}
	wg      sync.WaitGroup

	mu      sync.Mutex
	chans   []string
	leaving map[string]int // sharded: unsubscriptions sent and not yet confirmed, by channel
	ops     []op           // (un)subscriptions to send, in order
	opsSig  chan struct{}
	dc      rueidis.DedicatedClient // nil while not connected
	release func()
	closed  bool

	qmu    sync.Mutex
	queue  []item
	notify chan struct{} // signalled when queue grows
	kick   chan struct{} // the server ended a subscription: connect again
}

// op is an (un)subscription to send; leaving names the channels a
// sharded unsubscription ends.
type op struct {
	cmd     rueidis.Completed
	leaving []string
}

type item struct {
	msg driver.Message
	err error
}

func (p *pubsub) push(it item) {
	p.qmu.Lock()
	if it.err != nil || it.msg.Kind != "message" && it.msg.Kind != "smessage" || len(p.queue) < maxQueued {
		p.queue = append(p.queue, it)
	}
	p.qmu.Unlock()
	select {
	case p.notify <- struct{}{}:
	default:
	}
}

func (p *pubsub) hooks() rueidis.PubSubHooks {
	kind := "message"
	if p.sharded {
		kind = "smessage"
	}
	return rueidis.PubSubHooks{
		OnMessage: func(m rueidis.PubSubMessage) {
			p.push(item{msg: driver.Message{Kind: kind, Channel: m.Channel, Payload: m.Message}})
		},
		OnSubscription: func(s rueidis.PubSubSubscription) {
			p.push(item{msg: driver.Message{Kind: s.Kind, Channel: s.Channel}})
			if s.Kind == "sunsubscribe" {
				// One that was not asked for: the slot moved.
				p.mu.Lock()
				asked := p.leaving[s.Channel] > 0
				if asked {
					if p.leaving[s.Channel]--; p.leaving[s.Channel] == 0 {
						delete(p.leaving, s.Channel)
					}
				}
				ours := !asked && slices.Contains(p.chans, s.Channel)
				p.mu.Unlock()
				if ours { // subscribe again on the slot's shard
					select {
					case p.kick <- struct{}{}:
					default:
					}
				}
			}
		},
	}
}

// connect opens a dedicated connection, subscribes it to the current
// channels and returns the channel on which rueidis reports that it broke.
func (p *pubsub) connect(ctx context.Context) <-chan error {
	select {
	case <-p.kick: // about a connection gone
	default:
	}
	dc, release, ok := p.dedicate()
	if !ok {
		return nil // closed while it connected
	}
	broken := dc.SetPubSubHooks(p.hooks())
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		dc.Close()
		release()
		return nil
	}
	p.dc, p.release = dc, release
	chans := slices.Clone(p.chans)
	p.leaving = nil
	p.mu.Unlock()
	if len(chans) > 0 {
		if err := dc.Do(ctx, p.subscribe(chans)).Error(); err != nil {
			errc := make(chan error, 1)
			errc <- err
			return errc
		}
	}
	if broken == nil {
		broken = make(chan error) // hooks need a wire: none until the first command
	}
	return broken
}

// dedicate takes a dedicated connection, which rueidis dials and greets
// with no context: until Close, then it leaves the dial to finish on its
// own and hands the connection back (so that Close waits on no network).
func (p *pubsub) dedicate() (rueidis.DedicatedClient, func(), bool) {
	type dedicated struct {
		dc      rueidis.DedicatedClient
		release func()
	}
	got := make(chan dedicated, 1)
	go func() {
		dc, release := p.c.Dedicate()
		got <- dedicated{dc, release}
	}()
	select {
	case d := <-got:
		return d.dc, d.release, true
	case <-p.done:
		go func() {
			d := <-got
			d.dc.Close()
			d.release()
		}()
		return nil, nil, false
	}
}

func (p *pubsub) subscribe(chans []string) rueidis.Completed {
	if p.sharded {
		return p.c.B().Ssubscribe().Channel(chans...).Build()
	}
	return p.c.B().Subscribe().Channel(chans...).Build()
}

// drop closes the current connection.
func (p *pubsub) drop() {
	p.mu.Lock()
	dc, release := p.dc, p.release
	p.dc, p.release = nil, nil
	p.mu.Unlock()
	if dc != nil {
		// rueidis's Close pings the server and waits for the reply (up to a
		// second): off the caller's goroutine, which waits on no network.
		go func() {
			dc.Close()
			release()
		}()
	}
}

func (p *pubsub) run() {
	defer p.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-p.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	broken := p.connect(ctx)
	if broken == nil {
		return // closed
	}
	backoff := minBackoff
	for {
		var err error
		start := time.Now()
		select {
		case <-p.done:
			return
		case <-p.opsSig:
			p.sendOps(ctx)
			continue
		case err = <-broken:
		case <-p.kick:
			err = errors.New("dlockrueidis: the server ended a subscription")
		}
		if err == nil {
			err = errors.New("dlockrueidis: pub/sub connection closed")
		}
		p.drop()
		select {
		case <-p.done:
			return
		default:
		}
		p.push(item{err: convertErr(err)})
		if time.Since(start) > maxBackoff {
			backoff = minBackoff // it had been up a while
		}
		select {
		case <-p.done:
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxBackoff)
		broken = p.connect(ctx)
		if broken == nil {
			return // closed
		}
	}
}

// sendOps sends the (un)subscriptions asked for, in order, on the current
// connection; without one they are dropped (connect subscribes to the
// channels of the moment).
func (p *pubsub) sendOps(ctx context.Context) {
	for {
		p.mu.Lock()
		ops, dc := p.ops, p.dc
		p.ops = nil
		p.mu.Unlock()
		if len(ops) == 0 {
			return
		}
		if dc == nil {
			continue
		}
		for _, o := range ops {
			if len(o.leaving) > 0 {
				// Its confirmations are not the server's (see hooks).
				p.mu.Lock()
				if p.leaving == nil {
					p.leaving = map[string]int{}
				}
				for _, ch := range o.leaving {
					p.leaving[ch]++
				}
				p.mu.Unlock()
			}
			dc.Do(ctx, o.cmd) // (a broken connection is reported on broken)
		}
	}
}

// ask records an (un)subscription for the run goroutine to send.
func (p *pubsub) ask(o op) {
	p.ops = append(p.ops, o)
	select {
	case p.opsSig <- struct{}{}:
	default:
	}
}

// Subscribe adds channels; it does not wait for the network (Receive
// returns the confirmations).
func (p *pubsub) Subscribe(_ context.Context, channels ...string) error {
	if len(channels) == 0 {
		return nil
	}
	cmd := p.subscribe(channels)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return driver.ErrClosed
	}
	if p.sharded {
		if err := p.sameSlot(cmd, p.shard); err != nil {
			return err
		}
	}
	for _, ch := range channels {
		if !slices.Contains(p.chans, ch) {
			p.chans = append(p.chans, ch)
		}
	}
	p.ask(op{cmd: cmd})
	return nil
}

// sameSlot checks that cmd's channels hash to the slot of first: a
// sharded connection serves one shard.
func (p *pubsub) sameSlot(cmd rueidis.Completed, first string) error {
	ref := p.c.B().Ssubscribe().Channel(first).Build()
	if cmd.Slot() != ref.Slot() {
		return fmt.Errorf("dlockrueidis: channels of another slot than %q on a sharded connection", first)
	}
	return nil
}

// Unsubscribe removes channels (all of them without any); it does not wait
// for the network.
func (p *pubsub) Unsubscribe(_ context.Context, channels ...string) error {
	var cmd rueidis.Completed
	switch {
	case p.sharded && len(channels) == 0:
		cmd = p.c.B().Sunsubscribe().Build()
	case p.sharded:
		cmd = p.c.B().Sunsubscribe().Channel(channels...).Build()
	case len(channels) == 0:
		cmd = p.c.B().Unsubscribe().Build()
	default:
		cmd = p.c.B().Unsubscribe().Channel(channels...).Build()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return driver.ErrClosed
	}
	var leaving []string
	if p.sharded {
		leaving = channels
		if len(channels) == 0 {
			leaving = slices.Clone(p.chans)
		}
	}
	if len(channels) == 0 {
		p.chans = nil
	} else {
		p.chans = slices.DeleteFunc(p.chans, func(ch string) bool { return slices.Contains(channels, ch) })
	}
	p.ask(op{cmd, leaving})
	return nil
}

func (p *pubsub) Receive(ctx context.Context) (driver.Message, error) {
	for {
		select {
		case <-p.done:
			return driver.Message{}, driver.ErrClosed
		default:
		}
		p.qmu.Lock()
		if len(p.queue) > 0 {
			it := p.queue[0]
			p.queue[0] = item{}
			p.queue = p.queue[1:]
			p.qmu.Unlock()
			return it.msg, it.err
		}
		p.qmu.Unlock()
		select {
		case <-p.done:
			return driver.Message{}, driver.ErrClosed
		case <-ctx.Done():
			return driver.Message{}, fmt.Errorf("dlockrueidis: receive: %w", ctx.Err())
		case <-p.notify:
		}
	}
}

func (p *pubsub) Ping(ctx context.Context) error {
	p.mu.Lock()
	dc, closed := p.dc, p.closed
	p.mu.Unlock()
	switch {
	case closed:
		return driver.ErrClosed
	case dc == nil:
		return errNotConnected
	}
	return convertErr(dc.Do(ctx, dc.B().Ping().Build()).Error())
}

func (p *pubsub) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	close(p.done)
	p.mu.Unlock()
	p.drop()
	p.wg.Wait()
	p.qmu.Lock()
	p.queue = nil
	p.qmu.Unlock()
	return nil
}
