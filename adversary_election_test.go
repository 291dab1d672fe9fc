package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
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

// A term longer than the fence window (a minute) keeps its fence counter,
// so Leader reads the leader's own fence all term long: whether the term
// began on a free name or was handed over by a resigning leader, the
// counter lives at least as long as the leader's lease.
func TestElectionAttackLongTermOutlivesFenceCounter(t *testing.T) {
	_, rdb := setup(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	const name = "long-term"
	key := "dlock:{" + name + "}"
	e := newElection(t, newClient(t, rdb, dlock.LeaseTTL(5*time.Minute)), name)
	check := func(what string, ld *dlock.Leadership) {
		t.Helper()
		lease, counter := rdb.PTTL(ctx, key).Val(), rdb.PTTL(ctx, key+":fence").Val()
		if counter < lease-5*time.Second {
			t.Errorf("%s: the fence counter lives %v, the leader's lease %v: it would expire while the term lasts", what, counter, lease)
		}
		if cur, err := e.Leader(ctx); err != nil || cur.Token != ld.Lock().Token() || cur.Fence != ld.Fence() {
			t.Errorf("%s: Leader = %+v, %v; want the leader's own token and fence %d", what, cur, err, ld.Fence())
		}
	}
	first, err := e.Campaign(ctx, "first")
	if err != nil {
		t.Fatal(err)
	}
	check("a term begun on a free name", first)
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
	defer o.ld.Resign(context.WithoutCancel(ctx))
	check("a term handed over", o.ld)
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
	if testing.Short() {
		t.Skip("a long fault/timing scenario; run without -short")
	}
	leakcheck.Check(t)                             // registered first: runs after the proxy and server are stopped
	p, rdb, direct := proxied(t, 3, 5*time.Second) // the cut, not a timeout, ends the wait
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	c := newClient(t, rdb, pipelined(false), dlock.LeaseTTL(5*time.Second))
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
	if testing.Short() {
		t.Skip("a long fault/timing scenario; run without -short")
	}
	for _, retries := range []int{-1, 3} {
		for _, led := range []bool{false, true} {
			t.Run(fmt.Sprintf("retries=%d/led=%v", retries, led), func(t *testing.T) {
				leakcheck.Check(t)
				p, rdb, direct := proxied(t, retries, 300*time.Millisecond)
				ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
				defer cancel()
				name := fmt.Sprintf("delayed-%d-%v", retries, led)
				key := "dlock:{" + name + "}"
				c := newClient(t, rdb, dlock.LeaseTTL(5*time.Second), pipelined(false))
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

// candidateHelper is the body of a worker process in mode "candidate": it
// campaigns once in the election DLOCK_NAME, prints "leading <fence>" when
// it leads, and resigns.
func candidateHelper(ctx context.Context, c *dlock.Client, name string) int {
	e, err := c.Election(name)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ld, err := e.Campaign(ctx, "paused")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("leading", ld.Fence())
	if err := ld.Resign(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// A candidate stopped (SIGSTOP) while it waits is handed the term; its
// lease runs out while it is stopped and the next candidate leads. When it
// resumes, the handover message (with the lost term's fence) is waiting
// for it: it must not lead on it while the next candidate does, and the
// term it leads later has a fence above the next candidate's.
func TestElectionAttackPausedCandidateHandedTheTerm(t *testing.T) {
	if testing.Short() {
		t.Skip("a long fault/timing scenario; run without -short")
	}
	s, rdb := setup(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	const name = "paused"
	a := announced(t, rdb, name)
	e := newElection(t, newClient(t, rdb), name)
	first, err := e.Campaign(ctx, "first")
	if err != nil {
		t.Fatal(err)
	}
	h := startHelper(t, s, "candidate", name, time.Second, 0)
	if !queued(ctx, rdb, name, 1) {
		t.Fatalf("the worker never queued: %s", h.out.String())
	}
	next := campaign(ctx, e, "next")
	if !queued(ctx, rdb, name, 2) {
		t.Fatal("the next candidate never queued")
	}
	if err := h.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if err := first.Resign(ctx); err != nil { // hands the term to the stopped worker
		t.Fatal(err)
	}
	o := <-next // the worker's lease ran out: the next candidate leads
	if o.err != nil {
		t.Fatal(o.err)
	}
	lost := a.drain(200 * time.Millisecond)
	if err := h.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if !queued(ctx, rdb, name, 1) { // the worker found the term gone and queued again
		t.Fatalf("the resumed worker never queued again: %s", h.out.String())
	}
	select {
	case l := <-h.lines:
		t.Errorf("the resumed worker printed %q while the next candidate leads (announced before: %q)", l, lost)
	default:
	}
	if cur, err := e.Leader(ctx); err != nil || cur.Token != o.ld.Lock().Token() || cur.Fence != o.ld.Fence() {
		t.Errorf("Leader = %+v, %v; want the next candidate, fence %d", cur, err, o.ld.Fence())
	}
	if err := o.ld.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-h.lines:
		var f int64
		if _, err := fmt.Sscanf(l, "leading %d", &f); err != nil || f <= o.ld.Fence() {
			t.Errorf("the worker's later term: %q, want a fence above the next candidate's %d", l, o.ld.Fence())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("the worker never led after the next candidate resigned: %s", h.out.String())
	}
	if err := h.wait(20 * time.Second); err != nil {
		t.Error(err)
	}
}

// Other kinds of lock on an election's name while a leader leads. The
// README says "a lock or semaphore of the same name is refused
// (ErrWrongType)": a semaphore and a reentrant lock are (ErrWrongType),
// but a plain lock is refused as any taken lock is (ErrNotAcquired, not
// ErrWrongType), and a fair lock's Acquire waits in the candidates' line
// and is handed the name by the resigning leader: Leader then reads that
// lock's holder as the leader, with the handover's fence (its own).
func TestElectionAttackOtherKindsOnAnElectionsName(t *testing.T) {
	_, rdb := setup(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	const name = "mixed"
	e := newElection(t, newClient(t, rdb), name)
	leader, err := e.Campaign(ctx, "leader")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := newClient(t, rdb, dlock.WithUnfair(nil)).TryAcquire(ctx, name); !errors.Is(err, dlock.ErrNotAcquired) || errors.Is(err, dlock.ErrWrongType) {
		t.Errorf("plain TryAcquire on a led name = %v, want ErrNotAcquired (the README says ErrWrongType)", err)
	}
	if _, err := asOwner(t, newClient(t, rdb, dlock.WithReentrant(true)), "o").TryAcquire(ctx, name); !errors.Is(err, dlock.ErrWrongType) {
		t.Errorf("reentrant TryAcquire on a led name = %v, want ErrWrongType", err)
	}
	if _, err := newSemaphore(t, newClient(t, rdb), name, 2).TryAcquire(ctx); !errors.Is(err, dlock.ErrWrongType) {
		t.Errorf("semaphore TryAcquire on a led name = %v, want ErrWrongType", err)
	}
	fair := newClient(t, rdb, dlock.HolderMeta("a fair lock"))
	got := make(chan *dlock.Lock, 1)
	go func() {
		l, err := fair.Acquire(ctx, name)
		if err != nil {
			t.Errorf("fair Acquire behind the leader = %v", err)
		}
		got <- l
	}()
	if !queued(ctx, rdb, name, 1) {
		t.Fatal("the fair lock never queued")
	}
	if err := leader.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	l := <-got
	if l == nil {
		return
	}
	defer l.Release(ctx)
	cur, err := e.Leader(ctx)
	if err != nil || cur.Token != l.Token() || cur.Value != "a fair lock" || cur.Fence != fenceOf(t, l) || cur.Fence <= leader.Fence() {
		t.Errorf("Leader while a fair lock holds the name = %+v, %v; want that lock, with its fence above %d", cur, err, leader.Fence())
	}
}
