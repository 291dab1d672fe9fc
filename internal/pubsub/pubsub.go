// Package pubsub shares one pub/sub connection among all of a Client's
// waiters: a Hub per node listens for the release messages of the locks
// being waited for and wakes their waiters. It knows nothing of locks
// beyond the messages' form (WakeAll, or the token the lock was handed to).
package pubsub

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlockio/dlock/driver"
)

// linger is how long a channel stays subscribed after its last waiter
// left: a client that keeps contending for a lock reuses the subscription
// instead of paying a SUBSCRIBE, and an extra attempt, every time.
const linger = 500 * time.Millisecond

// WakeAll is the release message that wakes every waiter on a channel; a
// message that begins with Request asks the lock's holders to release it
// (the rest, "<id> <reason>", is the Watches'); any other message is "<token> <fence>": the lock was
// handed to that waiter, with that fence ("<token>" alone reads as a
// handover without a fence). No token begins with Request.
const (
	WakeAll = "*"
	Request = "?"
)

// The wake-ups a waiter receives: Recheck, Released, or a handover:
// HandedOver, or above it the fence the handover came with (fences are
// server time in µs, far above it).
const (
	Recheck    int64 = -1 // the connection is back after a break: a release may have been missed, try again
	Released   int64 = 0  // the lock was released: try again
	HandedOver int64 = 1  // the lock was handed to the waiter, without a fence
)

// Hub shares one pub/sub connection among all of a Client's waiters on one
// node (with sharded, one connection per channel, on its slot's shard). A
// channel is subscribed while at least one waiter watches it (and for
// linger after); a connection is open while it serves a channel. The Hub
// reconnects a broken connection, subscribes again, and then wakes the
// waiters of its channels with Recheck.
type Hub struct {
	conn    driver.Conn
	sharded bool

	lines sync.WaitGroup // the goroutines that keep and read its connections

	mu     sync.Mutex
	main   *line             // not sharded: the connection of every channel; nil while none (until Close)
	topics map[string]*topic // subscribed channels
	calls  []func()          // the Watch functions to call once a message is handled

	// The keyspace channels of Watch (see watchKey): db is the database
	// the Hub's server keeps its data in, once learnt ("" unknown, noDB
	// if it cannot be); learning is set while a goroutine asks it; the
	// watches in dbWait wait for it. ctx ends at Close, and with it the
	// lines': no more subscriptions.
	db       string
	learning bool
	dbWait   []*Watch
	ctx      context.Context
	stop     context.CancelFunc
}

type topic struct {
	waiters  map[string]*Waiter // by token
	ready    chan struct{}      // closed once first confirmed, or once its connection failed
	keyspace bool               // a key's keyspace notifications: only the events in ended wake it
	idle     *time.Timer        // unsubscribes the channel after linger without waiters
	line     *line
}

// line is one pub/sub connection and the goroutine that keeps it (see
// line.run). Its fields are guarded by the Hub's mu. It listens to a
// channel (confirmed on the current connection) while it is not down and
// none of the channel's SUBSCRIBEs is pending: each connection asks them
// all again.
type line struct {
	h       *Hub
	channel string                    // "", or (sharded) the channel whose shard it connects to
	topics  map[string]*topic         // the channels it serves
	ops     []op                      // (un)subscriptions to send, in the order asked
	pending map[string]int            // SUBSCRIBEs asked on the connection (queued or sent) and not yet confirmed
	down    bool                      // its connection failed and is not back yet
	asked   chan struct{}             // ops were added
	silent  chan struct{}             // nothing was received for healthCheck: ping
	pinged  atomic.Pointer[time.Time] // when the first PING not answered yet was sent (nil: none)
	ctx     context.Context           // ends when the line is no longer needed
	stop    context.CancelFunc
}

// op is a run of subscriptions, or of unsubscriptions: one command.
type op struct {
	subscribe bool
	chans     []string
}

// Waiter receives a wake-up on its wake channel when its lock is released
// (Released), or, when the lock is handed to it, the handover's fence (or
// HandedOver if it came without one). The wake channel has room for one
// wake-up: a pending one is merged with the next.
type Waiter struct {
	h       *Hub
	channel string
	token   string
	wake    chan int64
	watch   *Watch // if a Watch's: its functions are called in place of wake
}

// New returns a Hub that subscribes through conn; with sharded, it uses
// SSUBSCRIBE, one connection per channel.
func New(conn driver.Conn, sharded bool) *Hub {
	h := &Hub{conn: conn, sharded: sharded, topics: map[string]*topic{}}
	h.ctx, h.stop = context.WithCancel(context.Background())
	return h
}

// Listening reports whether channel is subscribed and confirmed.
func (h *Hub) Listening(channel string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	t := h.topics[channel]
	return t != nil && !t.line.down && t.line.pending[channel] == 0
}

// Join adds a waiter to channel if the channel is already subscribed and
// confirmed, and returns nil otherwise. A waiter that joined before its
// first attempt cannot miss a release that follows that attempt.
func (h *Hub) Join(channel, token string, wake chan int64) *Waiter {
	h.mu.Lock()
	defer h.mu.Unlock()
	if t := h.topics[channel]; t != nil && !t.line.down && t.line.pending[channel] == 0 { // (as Listening)
		w, _ := h.subscribe(channel, token, wake, false)
		return w
	}
	return nil
}

// watchPrefix begins the token of a waiter that watches its channel (see
// WatchToken). No lease token begins with it.
const watchPrefix = "*"

var watchSeq atomic.Uint64

// WatchToken returns a new token for a waiter that watches its channel
// rather than waits for a lock: it is woken (Released) by every message,
// a handover to another waiter included. Each watcher needs its own.
func WatchToken() string {
	return watchPrefix + strconv.FormatUint(watchSeq.Add(1), 10)
}

// Subscribe adds a new waiter on channel, subscribing to it if needed, and
// returns it with a channel closed once Redis has confirmed the
// subscription (or its connection failed). A waiter whose subscription
// is unconfirmed still works: its timers wake it, and so does the
// confirmation once the connection is back. It does not wait on the
// network.
func (h *Hub) Subscribe(channel, token string, wake chan int64) (*Waiter, <-chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.subscribe(channel, token, wake, false)
}

// subscribe is Subscribe, of a key's keyspace channel if keyspace (see
// Watch.add); h.mu must be held.
func (h *Hub) subscribe(channel, token string, wake chan int64, keyspace bool) (*Waiter, <-chan struct{}) {
	w := &Waiter{h: h, channel: channel, token: token, wake: wake}
	if h.ctx.Err() != nil { // closed: woken by its timers only
		return w, h.ctx.Done()
	}
	t := h.topics[channel]
	if t == nil {
		l := h.main
		if h.sharded {
			l = h.open(channel)
		} else if l == nil {
			l = h.open("")
			h.main = l
		}
		t = &topic{waiters: map[string]*Waiter{}, ready: make(chan struct{}), keyspace: keyspace, line: l}
		t.idle = time.AfterFunc(linger, func() { h.drop(channel, t) })
		h.topics[channel] = t
		l.topics[channel] = t
		if l.down {
			close(t.ready) // nothing to wait for until the connection is back
		}
		l.ask(true, channel)
	}
	t.idle.Stop() // (armed while the topic has no waiters)
	t.waiters[token] = w
	return w, t.ready
}

// open starts a line; h.mu must be held.
func (h *Hub) open(channel string) *line {
	l := &line{h: h, channel: channel, topics: map[string]*topic{}, pending: map[string]int{},
		asked: make(chan struct{}, 1), silent: make(chan struct{}, 1)}
	l.ctx, l.stop = context.WithCancel(h.ctx)
	h.lines.Go(l.run)
	return l
}

// Close closes the Hub's connections and waits for their goroutines to
// end. Waiters are woken by their timers only after it.
func (h *Hub) Close() {
	h.stop() // (and with it every line)
	h.mu.Lock()
	h.dbWait = nil
	clear(h.topics) // (an idle timer then finds its topic gone)
	h.mu.Unlock()
	h.lines.Wait()
}

// Close removes the waiter. A channel left without waiters is unsubscribed
// after linger, and the connection is closed with the last channel.
func (w *Waiter) Close() {
	w.h.mu.Lock()
	defer w.h.mu.Unlock()
	if t := w.h.topics[w.channel]; t != nil && t.waiters[w.token] == w { // (not if it left already, or the Hub was closed)
		delete(t.waiters, w.token)
		if len(t.waiters) == 0 {
			t.idle.Reset(linger)
		}
	}
}

// Retoken moves the waiter to a new token, so that a handover to the
// token of an attempt after an undo reaches it.
func (w *Waiter) Retoken(token string) {
	w.h.mu.Lock()
	defer w.h.mu.Unlock()
	if t := w.h.topics[w.channel]; t != nil && t.waiters[w.token] == w {
		delete(t.waiters, w.token)
		t.waiters[token] = w
	}
	w.token = token
}

// drop unsubscribes channel if t is still its topic and has no waiters;
// a connection left without channels is closed.
func (h *Hub) drop(channel string, t *topic) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.topics[channel] != t || len(t.waiters) > 0 {
		return
	}
	delete(h.topics, channel)
	delete(t.line.topics, channel)
	if len(t.line.topics) > 0 {
		t.line.ask(false, channel)
		return
	}
	t.line.stop()
	h.main = nil // (nil already if sharded)
}

// The bounds of the Hub's waits: healthCheck is how long a connection may
// stay silent before it is pinged; opening a connection, sending on it or
// answering a PING may take netTimeout; after a failure it waits from minBackoff, doubling
// up to maxBackoff, before it connects again.
const (
	healthCheck = 30 * time.Second
	netTimeout  = 10 * time.Second
	minBackoff  = 20 * time.Millisecond
	maxBackoff  = time.Second
)

// ask queues an (un)subscription of channel for the line's goroutine, in
// the same command as the one before if that is of the same kind, and
// counts a SUBSCRIBE unconfirmed from now (its confirmation cannot come
// before it is sent); h.mu must be held.
func (l *line) ask(subscribe bool, channel string) {
	if n := len(l.ops); n == 0 || l.ops[n-1].subscribe != subscribe {
		l.ops = append(l.ops, op{subscribe: subscribe})
	}
	o := &l.ops[len(l.ops)-1]
	o.chans = append(o.chans, channel)
	if subscribe {
		l.pending[channel]++
	}
	poke(l.asked)
}

// unlock releases h.mu, and then calls the Watch functions queued under it
// (outside the lock: f may take its caller's own, under which it calls the
// Hub). Every holder of h.mu that queues calls releases it so.
func (h *Hub) unlock() {
	calls := h.calls
	h.calls = nil
	h.mu.Unlock()
	for _, f := range calls {
		f()
	}
}

// poke signals c, a channel of capacity 1, unless a signal is pending.
func poke(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// run keeps the line's connection until the line is stopped: it connects,
// serves the connection until it is done, marks the line's channels
// unconfirmed (a waiter still waiting for a first confirmation goes on
// without it), and connects again after a backoff. A client found closed
// will never announce a release: its waiters are told to try again
// (Recheck), and its watches called, and so learn that it is closed.
func (l *line) run() {
	for backoff := minBackoff; l.ctx.Err() == nil; backoff = min(2*backoff, maxBackoff) {
		start := time.Now()
		closed := errors.Is(l.serve(), driver.ErrClosed)
		l.h.mu.Lock()
		l.down = true
		for _, t := range l.topics {
			select {
			case <-t.ready:
			default:
				close(t.ready)
			}
			for _, w := range t.waiters {
				if closed { // (every time it is found closed: a waiter that came meanwhile too)
					w.signal(Recheck)
				}
			}
		}
		l.h.unlock() // (a closed client's watches: no message will come whose reader calls them)
		if time.Since(start) > maxBackoff {
			backoff = minBackoff // it had been up a while
		}
		select {
		case <-l.ctx.Done():
		case <-time.After(backoff):
		}
	}
}

// serve opens a connection, subscribes it to the line's channels, and
// sends the (un)subscriptions asked for and the pings needed until the
// connection is done or the line stopped; it returns the error of the
// call that found the connection unusable, if one did.
func (l *line) serve() error {
	ctx, cancel := context.WithTimeout(l.ctx, netTimeout)
	ps, err := l.h.conn.PubSub(ctx, l.channel)
	cancel()
	if err != nil {
		return err
	}
	defer ps.Close()
	l.h.mu.Lock()
	l.down, l.ops = false, nil
	l.pinged.Store(nil)
	clear(l.pending)
	for ch := range l.topics {
		l.ask(true, ch) // (one SUBSCRIBE for all)
	}
	l.h.mu.Unlock()
	// (The reader starts once the first SUBSCRIBE returned. A line has
	// channels, and so a SUBSCRIBE to send, until it is stopped.)
	if l.ctx.Err() != nil {
		return nil
	}
	if err := l.flush(ps); err != nil {
		return err
	}
	done := make(chan struct{})
	l.h.lines.Go(func() { l.read(ps, done) }) // (Hub.Close waits for it too: it ends last)
	defer func() {
		ps.Close() // (its Receive returns)
		<-done
	}()
	for err == nil { // (while the connection takes what is sent)
		select {
		case <-l.ctx.Done():
			return nil
		case <-done:
			return nil
		case <-l.silent:
			now := time.Now() // (with its monotonic reading)
			l.pinged.CompareAndSwap(nil, &now)
			err = l.send(ps.Ping)
		case <-l.asked:
			err = l.flush(ps)
		}
	}
	return err
}

// send runs a command of the connection, bounded by netTimeout.
func (l *line) send(cmd func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(l.ctx, netTimeout)
	defer cancel()
	return cmd(ctx)
}

// flush sends the (un)subscriptions asked for, in order; it returns the
// error of one the connection did not take. Ops asked meanwhile are sent
// by the next flush, which ask signals.
func (l *line) flush(ps driver.PubSub) error {
	l.h.mu.Lock()
	ops := l.ops
	l.ops = nil
	l.h.mu.Unlock()
	for _, o := range ops {
		f := ps.Unsubscribe
		if o.subscribe {
			f = ps.Subscribe
		}
		if err := l.send(func(ctx context.Context) error { return f(ctx, o.chans...) }); err != nil {
			return err
		}
	}
	return nil
}

// read dispatches the connection's messages until it is done or the line
// stopped, and then closes done; after a silence of healthCheck it asks
// serve to ping, and after one that followed a PING unanswered for longer
// than netTimeout it lets the connection go: a connection that takes what
// is sent and answers nothing (a stalled network, a host gone without a
// reset) would otherwise be kept for good.
func (l *line) read(ps driver.PubSub, done chan struct{}) {
	defer close(done)
	for ok := true; ok; { // (until a message says the connection must be replaced)
		ctx, cancel := context.WithTimeout(l.ctx, healthCheck)
		m, err := ps.Receive(ctx)
		silent := ctx.Err() != nil && l.ctx.Err() == nil
		cancel()
		switch {
		case err == nil:
			l.pinged.Store(nil) // (whatever came, the connection answers)
			l.h.mu.Lock()
			ok = l.deliver(m)
			l.h.unlock()
		case silent && errors.Is(err, context.DeadlineExceeded):
			if at := l.pinged.Load(); at != nil && time.Since(*at) > netTimeout {
				return
			}
			poke(l.silent)
		default:
			return // done, or stopped
		}
	}
}

// deliver handles one message; it reports false when the connection must
// be replaced. h.mu must be held.
func (l *line) deliver(m driver.Message) bool {
	switch m.Kind {
	case "subscribe", "ssubscribe":
		// Confirmations come in the order the SUBSCRIBEs were sent; the
		// last one outstanding is the one that covers current waiters.
		if l.pending[m.Channel]--; l.pending[m.Channel] > 0 {
			break
		}
		delete(l.pending, m.Channel)
		if t := l.topics[m.Channel]; t != nil {
			select {
			case <-t.ready: // confirmed again after a break: a release announced meanwhile was lost
				for _, w := range t.waiters {
					w.signal(Recheck)
				}
			default:
				close(t.ready)
			}
		}
	case "message", "smessage":
		if t := l.topics[m.Channel]; t != nil && (!t.keyspace || ended[m.Payload]) {
			t.dispatch(m.Payload)
		}
	case "sunsubscribe":
		// A sharded line never unsubscribes: the server ended it (the
		// slot moved). Connect again, to the slot's new shard.
		return l.channel == ""
	}
	return true
}

// dispatch wakes the waiters a release message is for: all of them for
// WakeAll, else the one it was handed to and every watcher (see
// WatchToken); a Request message instead tells the Watches the rest of
// it. h.mu must be held.
func (t *topic) dispatch(payload string) {
	msg, request := strings.CutPrefix(payload, Request)
	token, f, _ := strings.Cut(payload, " ")
	fence, _ := strconv.ParseInt(f, 10, 64)
	for _, w := range t.waiters {
		switch {
		case request:
			if w.watch != nil && w.watch.req != nil {
				w.h.calls = append(w.h.calls, func() { w.watch.req(msg) })
			}
		case payload == WakeAll || strings.HasPrefix(w.token, watchPrefix):
			w.signal(Released)
		case w.token == token:
			w.signal(max(fence, HandedOver))
		}
	}
}

func (w *Waiter) signal(wake int64) {
	if w.watch != nil {
		w.h.calls = append(w.h.calls, w.watch.f)
		return
	}
	for { // (wake has room for one: one case is always ready)
		select {
		case w.wake <- wake:
			return
		case old := <-w.wake: // a wake-up is pending: keep the handover, if either is one
			wake = max(wake, old)
		}
	}
}

// Watch is a watcher (see WatchToken) on a lock's channel and, where the
// Hub can listen to them, on its key's keyspace notifications, that calls
// a function instead of signalling a wake channel.
type Watch struct {
	h     *Hub
	key   string
	f     func()
	req   func(string)
	ready <-chan struct{} // see Ready
	ws    []*Waiter       // h.mu guards it
}

// Watch makes f be called on every message of channel (a release, a
// handover to anyone), after every reconnect (a message may have been
// missed: Recheck), and on each keyspace notification of key (none if key
// is "") that says it was deleted, expired, evicted or replaced (see
// ended). f runs on the Hub's reader, outside the Hub's lock: it must be
// quick, and may be called a last time after Close returned. It does not
// wait on the network: the key's channel is subscribed once the Hub knows
// the server's database, which it asks the server once (see watchKey).
// A Request message on channel calls req (if not nil) with the rest of
// the message instead, likewise.
func (h *Hub) Watch(channel, key string, f func(), req func(msg string)) *Watch {
	h.mu.Lock()
	defer h.mu.Unlock()
	w := &Watch{h: h, key: key, f: f, req: req}
	w.ready = w.add(channel, false)
	if key != "" && !h.sharded && h.ctx.Err() == nil {
		h.watchKey(w)
	}
	return w
}

// add subscribes w to channel, a key's keyspace channel if keyspace (its
// messages are events, of which only those in ended call w's function: a
// lock's channel, which ends in ":ch", is never one, its key ending in
// "}"), and returns the channel's ready (see Subscribe); h.mu must be
// held.
func (w *Watch) add(channel string, keyspace bool) <-chan struct{} {
	hw, ready := w.h.subscribe(channel, WatchToken(), nil, keyspace)
	hw.watch = w
	w.ws = append(w.ws, hw)
	return ready
}

// Ready returns a channel closed once Redis has confirmed the watch's
// subscription to its channel (a message published after that reaches
// it), or its connection failed, or the Hub was closed. The keyspace
// channel is not waited for: it comes later.
func (w *Watch) Ready() <-chan struct{} { return w.ready }

// Close ends the watch; its channels are dropped as a waiter's are.
func (w *Watch) Close() {
	w.h.mu.Lock()
	ws := w.ws // (a Waiter's Close does nothing the second time)
	w.h.dbWait = slices.DeleteFunc(w.h.dbWait, func(x *Watch) bool { return x == w })
	w.h.mu.Unlock()
	for _, hw := range ws {
		hw.Close()
	}
}

// noDB is Hub.db when the server does not say which database the Hub's
// client uses.
const noDB = "-"

// ended are the keyspace events that say a key's value is gone or was
// replaced: deleted (DEL, UNLINK, an emptied set or hash), expired,
// evicted, renamed or moved away, written over (SET, RENAME, COPY,
// RESTORE onto it). The events of a holder's own requests (expire, a
// set's zadd, a hash's hset) are not among them, nor another holder's
// of a semaphore (zadd, zrem): an extension would otherwise call the next.
var ended = map[string]bool{"del": true, "expired": true, "evicted": true, "set": true,
	"rename_from": true, "rename_to": true, "move_from": true, "copy_to": true, "restore": true}

// watchKey subscribes w to its key's keyspace channel
// ("__keyspace@<db>__:<key>") once the database
// is known, asking the server for it on the first watch (CLIENT INFO,
// Redis 6.2 and later; an error reply means never). A Cluster's Hub
// never does: keyspace notifications are the node's own, not sharded.
// h.mu must be held.
func (h *Hub) watchKey(w *Watch) {
	switch h.db {
	case noDB:
	case "":
		h.dbWait = append(h.dbWait, w)
		if !h.learning {
			h.learning = true
			h.lines.Go(h.learnDB)
		}
	default:
		w.add("__keyspace@"+h.db+"__:"+w.key, true)
	}
}

// learnDB asks the server which database the Hub's client uses, and
// subscribes the watches waiting for it.
func (h *Hub) learnDB() {
	for backoff := minBackoff; !h.learnt(h.askDB()); backoff = min(2*backoff, maxBackoff) {
		select {
		case <-h.ctx.Done():
		case <-time.After(backoff):
		}
	}
}

// askDB returns the database CLIENT INFO names, noDB if the server
// refuses it (an error reply names none), or "" if it did not answer.
func (h *Hub) askDB() string {
	ctx, cancel := context.WithTimeout(h.ctx, netTimeout)
	defer cancel()
	r, err := h.conn.Do(ctx, "CLIENT", "INFO")
	if err != nil && !errors.As(err, new(driver.Error)) {
		return "" // unknown still
	}
	// The last " db=" is the field: the addresses before it (a unix
	// socket's path) may hold any text, the fields after it no space.
	s, _ := r.(string)
	i := strings.LastIndex(s, " db=")
	if i < 0 {
		return noDB
	}
	db, _, _ := strings.Cut(s[i+len(" db="):], " ")
	if _, err := strconv.Atoi(db); err != nil {
		return noDB
	}
	return db
}

// learnt ends a learning of the database db ("" unknown still) and
// subscribes the watches waiting for it; it reports false, and ends
// nothing, if db is unknown while watches wait. A failure to reach the
// server is not remembered: learnDB asks again after a backoff while
// watches wait, and the next Watch asks again after they left (none
// waits after Close).
func (h *Hub) learnt(db string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if db == "" && len(h.dbWait) > 0 {
		return false
	}
	h.learning, h.db = false, db
	for _, w := range h.dbWait {
		h.watchKey(w) // (db is known, or none waits: it adds none to dbWait)
	}
	h.dbWait = nil
	return true
}
