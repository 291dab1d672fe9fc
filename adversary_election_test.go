package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock"
	"github.com/dlockio/dlock/internal/leakcheck"
)

// announcements collects what is published on an election's channel, from
// a subscription of the test's own (confirmed before it returns).
type announcements struct {
	ps   *redis.PubSub
	msgs chan string
}

func announced(t *testing.T, rdb *redis.Client, name string) *announcements {
	t.Helper()
	ps := rdb.Subscribe(t.Context(), "dlock:{"+name+"}:ch")
	if _, err := ps.Receive(t.Context()); err != nil {
		t.Fatal(err)
	}
	a := &announcements{ps: ps, msgs: make(chan string, 100)}
	go func() {
		defer close(a.msgs)
		for m := range ps.Channel() {
			select {
			case a.msgs <- m.Payload:
			default:
			}
		}
	}()
	t.Cleanup(func() { ps.Close() })
	return a
}

// drain returns what was announced until nothing came for quiet.
func (a *announcements) drain(quiet time.Duration) []string {
	var got []string
	for {
		select {
		case m := <-a.msgs:
			got = append(got, m)
		case <-time.After(quiet):
			return got
		}
	}
}

// A term can last longer than the fence window (a minute): WithTTL or
// LeaseTTL above it, and the watchdog extends only every TTL/3. The
// campaign script stores the term's fence in the counter for the fence
// window only, and extend.lua's "PEXPIRE counter ttl GT" cannot bring back
// a counter that has already expired. So for a term longer than a minute
// whose first extension comes after the minute (any TTL from 3 minutes, or
// any TTL above a minute with the watchdog off), the counter expires while
// the leader still leads, and from then on Leader reports the leader with
// Fence 0 — not its own fence — and Observe delivers that as a "new term"
// whose fence is below the one before. Both break Election's documented
// guarantee ("the name's fence counter holds it for as long as the term
// lasts, so a reader always gets the fence of the leader it reads").
//
// The first check needs no waiting: right after the campaign the counter's
// PTTL is the fence window (~60s) while the lease's is the TTL (5 min).
// The second makes the counter expire now, which is what Redis does by
// itself a minute into the term (the test does not wait a minute), then
// extends the lease as the watchdog would.
func TestElectionAttackLongTermOutlivesFenceCounter(t *testing.T) {
	_, rdb := setup(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	const name = "long-term"
	e := newElection(t, newClient(t, rdb), name)
	ld, err := e.Campaign(ctx, "long", dlock.LeaseTTL(5*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer ld.Resign(ctx)
	lease := rdb.PTTL(ctx, "dlock:{"+name+"}").Val()
	counter := rdb.PTTL(ctx, "dlock:{"+name+"}:fence").Val()
	if counter < lease-5*time.Second {
		t.Errorf("the fence counter lives %v, the leader's lease %v: the counter expires while the term lasts", counter, lease)
	}

	rdb.PExpire(ctx, "dlock:{"+name+"}:fence", time.Millisecond) // a minute passes, for the counter
	time.Sleep(10 * time.Millisecond)
	if err := ld.Lock().Extend(ctx, 5*time.Minute); err != nil { // the watchdog's extension
		t.Fatal(err)
	}
	cur, err := e.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if cur.Token != ld.Lock().Token() || cur.Fence != ld.Fence() {
		t.Errorf("Leader while the long term lasts = {Token: %s, Fence: %d}, want its own fence %d", cur.Token, cur.Fence, ld.Fence())
	}
}

// Resign is idempotent: a second Resign (and one after Do-style reuse of
// the Lock) reports what the first did, and changes nothing of the next
// leader's term.
func TestElectionAttackResignTwiceLeavesTheNextTermAlone(t *testing.T) {
	_, rdb := setup(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	const name = "twice"
	e := newElection(t, newClient(t, rdb), name)
	first, err := e.Campaign(ctx, "first")
	if err != nil {
		t.Fatal(err)
	}
	next := campaign(ctx, e, "next")
	if !queued(ctx, rdb, name, 1) {
		t.Fatal("the candidate never queued")
	}
	if err := first.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	o := <-next
	if o.err != nil {
		t.Fatal(o.err)
	}
	defer o.ld.Resign(ctx)
	if err := first.Resign(ctx); err != nil && !errors.Is(err, dlock.ErrReleased) {
		t.Errorf("second Resign = %v, want what the first returned", err)
	}
	if err := first.Lock().Release(ctx); err != nil && !errors.Is(err, dlock.ErrReleased) {
		t.Errorf("Release of a resigned leadership's Lock = %v", err)
	}
	cur, err := e.Leader(ctx)
	if err != nil || cur.Token != o.ld.Lock().Token() || cur.Fence != o.ld.Fence() {
		t.Errorf("Leader after the old leader resigned twice = %+v, %v; want the next term (fence %d)", cur, err, o.ld.Fence())
	}
	if o.ld.Err() != nil {
		t.Errorf("the next leader's Err = %v after its predecessor resigned twice", o.ld.Err())
	}
}

// go-redis re-sends a campaign whose reply was lost (the connection cut
// with the reply held). The re-sent copy finds the lease already leading:
// it must return the term's own fence, issue no second one and announce
// nothing more — whether the first copy took a free name, or queued the
// candidate behind a leader that then handed it the term.
func TestElectionAttackReSentCampaign(t *testing.T) {
	leakcheck.Check(t)                             // registered first: runs after the proxy and server are stopped
	p, rdb, direct := proxied(t, 3, 5*time.Second) // the cut, not a timeout, ends the wait
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	c := newClient(t, rdb, dlock.WithPipelining(false), dlock.WithTTL(5*time.Second))
	if warm, err := newElection(t, c, "warm").Campaign(ctx, "w"); err == nil { // the scripts are loaded
		warm.Resign(ctx)
	}

	t.Run("free", func(t *testing.T) {
		const name = "resent-free"
		a := announced(t, direct, name)
		e := newElection(t, c, name)
		var ld *dlock.Leadership
		err := stallThenCut(t, p, func() (err error) {
			ld, err = e.Campaign(ctx, "v")
			return err
		}, func() bool { return direct.Exists(ctx, "dlock:{"+name+"}").Val() == 1 })
		if err != nil {
			t.Fatalf("Campaign with its reply lost once = %v", err)
		}
		checkOneTerm(t, ctx, direct, e, ld, a.drain(300*time.Millisecond))
		ld.Resign(ctx)
	})

	t.Run("handed", func(t *testing.T) {
		const name = "resent-handed"
		a := announced(t, direct, name)
		leader, err := newElection(t, newClient(t, direct), name).Campaign(ctx, "leader")
		if err != nil {
			t.Fatal(err)
		}
		e := newElection(t, c, name)
		got := campaign(ctx, e, "candidate")
		if !queued(ctx, direct, name, 1) {
			t.Fatal("the candidate never queued")
		}
		// Queued for more than half its lease time, the candidate confirms
		// a handover with a poll (it does not trust the message alone):
		// that poll runs with its reply stalled, then is cut and re-sent.
		time.Sleep(3 * time.Second)
		p.StallReplies()
		if err := leader.Resign(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
		p.Cut()
		o := <-got
		if o.err != nil {
			t.Fatalf("Campaign = %v", o.err)
		}
		msgs := a.drain(300 * time.Millisecond)
		var mine []string
		for _, m := range msgs {
			if strings.HasPrefix(m, o.ld.Lock().Token()+" ") {
				mine = append(mine, m)
			}
		}
		checkOneTerm(t, ctx, direct, e, o.ld, mine)
		o.ld.Resign(ctx)
	})
}

// checkOneTerm checks that ld's term was announced once (msgs are the
// announcements naming it), with ld's fence, and that Leader and the fence
// counter agree.
func checkOneTerm(t *testing.T, ctx context.Context, rdb *redis.Client, e *dlock.Election, ld *dlock.Leadership, msgs []string) {
	t.Helper()
	want := ld.Lock().Token() + " " + strconv.FormatInt(ld.Fence(), 10)
	n := 0
	for _, m := range msgs {
		if strings.HasPrefix(m, ld.Lock().Token()+" ") {
			n++
			if m != want {
				t.Errorf("announced %q, want %q (the term's fence)", m, want)
			}
		}
	}
	if n != 1 {
		t.Errorf("the term was announced %d times (%q), want once", n, msgs)
	}
	if cur, err := e.Leader(ctx); err != nil || cur.Token != ld.Lock().Token() || cur.Fence != ld.Fence() {
		t.Errorf("Leader = %+v, %v; want the term's token and fence %d", cur, err, ld.Fence())
	}
	if f, _ := rdb.Get(ctx, "dlock:{"+e.Name()+"}:fence").Int64(); f != ld.Fence() {
		t.Errorf("fence counter = %d, want the term's %d (a second fence was issued)", f, ld.Fence())
	}
}

// A campaign request delayed in the network past its caller's give-up
// lands after the caller undid it (the undo went straight through): it
// must take nothing for nobody — no term, no fence, no announcement, no
// queue entry — whether the name was free or led by another. With
// go-redis's retries on, the re-sent copy leads at once on a free name;
// the delayed original, landing after the Resign, must not lead again.
func TestElectionAttackDelayedCampaignTakesNothing(t *testing.T) {
	for _, retries := range []int{-1, 3} {
		for _, led := range []bool{false, true} {
			t.Run(fmt.Sprintf("retries=%d/led=%v", retries, led), func(t *testing.T) {
				leakcheck.Check(t)
				p, rdb, direct := proxied(t, retries, 300*time.Millisecond)
				ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
				defer cancel()
				name := fmt.Sprintf("delayed-%d-%v", retries, led)
				key := "dlock:{" + name + "}"
				c := newClient(t, rdb, dlock.WithTTL(5*time.Second), dlock.WithPipelining(false))
				if warm, err := newElection(t, c, name+"-warm").Campaign(ctx, "w"); err == nil { // the scripts are loaded
					warm.Resign(ctx)
				}
				var leader *dlock.Leadership
				if led {
					var err error
					if leader, err = newElection(t, newClient(t, direct), name).Campaign(ctx, "leader"); err != nil {
						t.Fatal(err)
					}
				}
				a := announced(t, direct, name)
				e := newElection(t, c, name)
				p.Delay(time.Second, 0)
				start := time.Now()
				done := make(chan struct{})
				go func() {
					defer close(done)
					time.Sleep(100 * time.Millisecond) // the request has crossed into the proxy
					p.Delay(0, 0)                      // the undo (or re-sent copy) goes straight through
				}()
				cctx, ccancel := context.WithTimeout(ctx, 500*time.Millisecond)
				ld, err := e.Campaign(cctx, "late")
				ccancel()
				<-done
				switch {
				case (retries < 0 || led) && err == nil:
					t.Errorf("Campaign through a 1s delay with a 300ms read timeout = nil error, want it to fail")
				case retries > 0 && !led && err != nil:
					t.Errorf("Campaign = %v, want the re-sent copy's term", err)
				}
				var own string
				if ld != nil {
					own = ld.Lock().Token()
					if err := ld.Resign(ctx); err != nil {
						t.Errorf("Resign = %v", err)
					}
				}
				time.Sleep(time.Until(start.Add(1500 * time.Millisecond))) // the delayed original has landed
				if leader != nil {
					if err := leader.Resign(ctx); err != nil {
						t.Errorf("the leader's Resign = %v", err)
					}
				}
				if cur, err := e.Leader(ctx); err != nil || cur != (dlock.Leader{}) {
					t.Errorf("Leader after every term ended = %+v, %v; want none (a term for nobody)", cur, err)
				}
				if n := liveKeys(ctx, direct, key, key+":q", key+":qw"); n != 0 {
					t.Errorf("keys left: lock %q, queue %v %v", direct.Get(ctx, key).Val(),
						direct.LRange(ctx, key+":q", 0, -1).Val(), direct.HGetAll(ctx, key+":qw").Val())
				}
				for _, m := range a.drain(300 * time.Millisecond) {
					if m != "*" && (own == "" || !strings.HasPrefix(m, own+" ")) {
						t.Errorf("announced %q: a term of a campaign that gave up", m)
					}
				}
			})
		}
	}
}
