package script

import (
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/internal/redistest"
)

// A campaign (campaign_acquire.lua) is fenced and announced as
// it takes the lock, and a re-sent copy of it (go-redis after a lost reply)
// issues no second fence and no second announcement; its extensions keep
// the fence counter alive with the lease.
func TestCampaignFencedOnceWhenResent(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	ctx := t.Context()
	ps := rdb.Subscribe(ctx, "l:ch")
	defer ps.Close()
	if _, err := ps.Receive(ctx); err != nil { // the subscription's confirmation
		t.Fatal(err)
	}
	keys := []string{"l", "l:fence", "l:q", "l:qw", "l:r:tok-a"}
	campaign := func(token string, rev string) (any, error) {
		return Named("campaign_acquire").Run(ctx, rdb, []string{"l", "l:fence", "l:q", "l:qw", rev, "l:w"},
			token, 1000, "1000 PUBLISH 60000", 1).Result()
	}
	first, err := campaign("tok-a", keys[4])
	if err != nil {
		t.Fatal(err)
	}
	fence, ok := first.(int64)
	if !ok || fence <= 0 {
		t.Fatalf("campaign on a free lock = %v, want its fence", first)
	}
	if again, err := campaign("tok-a", keys[4]); err != nil || again != fence {
		t.Errorf("re-sent campaign = %v, %v; want the same fence %d", again, err, fence)
	}
	if c, _ := rdb.Get(ctx, "l:fence").Int64(); c != fence {
		t.Errorf("fence counter after a re-sent campaign = %d, want %d", c, fence)
	}
	msg, err := ps.ReceiveTimeout(ctx, 2*time.Second)
	if err != nil {
		t.Fatalf("no announcement of the new term: %v", err)
	}
	if _, err := ps.ReceiveTimeout(ctx, 200*time.Millisecond); err == nil {
		t.Errorf("a second announcement after a re-sent campaign (first: %v)", msg)
	}
	if other, err := campaign("tok-b", "l:r:tok-b"); err != nil {
		t.Fatal(err)
	} else if v, ok := other.([]any); !ok || len(v) != 2 || v[1] != "tok-a" {
		t.Errorf("campaign while tok-a leads = %v, want {pttl, tok-a}", other)
	}
	rdb.PExpire(ctx, "l:fence", 100*time.Millisecond)
	if n, err := Named("campaign_extend").Run(ctx, rdb, []string{"l", "l:r:tok-a", "l:fence", "l:v"}, "tok-a", 5000, 1).Int(); err != nil || n != 1 {
		t.Fatalf("extend of the campaign's lease = %d, %v", n, err)
	}
	if d := rdb.PTTL(ctx, "l:fence").Val(); d < 4*time.Second {
		t.Errorf("fence counter lives %v after the leader's extension to 5s, want the lease's life", d)
	}
}

// A leader's value key (proclaim.lua) follows its lease: a numbered
// extension sets its expiry with the lease's, also shorter, a re-sent copy
// of it (already applied) leaves it alone, and the release deletes it and
// announces "*" with nobody queued, for those who watch the leadership.
func TestCampaignValueKeyFollowsTheLease(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	ctx := t.Context()
	keys := []string{"l", "l:fence", "l:q", "l:qw", "l:r:tok", "l:w"}
	if _, err := Named("campaign_acquire").Run(ctx, rdb, keys, "tok", 10000, "10000 PUBLISH 60000").Int64(); err != nil {
		t.Fatal(err)
	}
	rdb.Set(ctx, "l:v", "tok{1} v", 10*time.Second)
	extend := func(ttl int) int {
		n, err := Named("campaign_extend").Run(ctx, rdb, []string{"l", "l:r:tok", "l:fence", "l:v"}, "tok", ttl, 1).Int()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := extend(5000); n != 1 {
		t.Fatalf("numbered extension to 5s = %d, want 1", n)
	}
	if d := rdb.PTTL(ctx, "l:v").Val(); d > 5*time.Second || d < 4*time.Second {
		t.Errorf("value key lives %v after the extension to 5s, want the lease's 5s", d)
	}
	rdb.PExpire(ctx, "l:v", 3*time.Second)
	if n := extend(5000); n != 1 {
		t.Fatalf("re-sent extension = %d, want 1", n)
	}
	if d := rdb.PTTL(ctx, "l:v").Val(); d > 3*time.Second {
		t.Errorf("value key lives %v after a re-sent copy of the extension, want it left at 3s", d)
	}
	ps := rdb.Subscribe(ctx, "l:ch")
	defer ps.Close()
	if _, err := ps.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := Named("campaign_release").Run(ctx, rdb, []string{"l", "l:fence", "l:q", "l:qw", "l:r:tok", "l:v"}, "tok", "PUBLISH 60000").Int(); err != nil || n != 1 {
		t.Fatalf("release = %d, %v; want 1", n, err)
	}
	if n := rdb.Exists(ctx, "l", "l:v").Val(); n != 0 {
		t.Errorf("%d of the lock and value keys left after the release", n)
	}
	if m, err := ps.ReceiveTimeout(ctx, 2*time.Second); err != nil {
		t.Errorf("release not announced: %v", err)
	} else if msg, ok := m.(*redis.Message); !ok || msg.Payload != "*" {
		t.Errorf("release announced %v, want *", m)
	}
}

// The scripts of a lease that no longer leads leave the leader's term
// alone: the old leader's extension (its watchdog, late) and a waiting
// candidate's release (it gives up) change neither the leader's value key
// nor the fence counter, which name the current term, and announce nothing;
// the candidate leaves the queue and its lease is marked ended.
func TestCampaignCallsOfAnotherLeaseLeaveTheTermAlone(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	ctx := t.Context()
	acquire := func(token string) any {
		v, err := Named("campaign_acquire").Run(ctx, rdb, []string{"l", "l:fence", "l:q", "l:qw", "l:r:" + token, "l:w"},
			token, 10000, "10000 PUBLISH 60000", 1).Result()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	acquire("lead")
	acquire("cand") // queued
	rdb.Set(ctx, "l:v", "lead{1} v", 10*time.Second)
	fence, _ := rdb.Get(ctx, "l:fence").Result()
	ps := rdb.Subscribe(ctx, "l:ch")
	defer ps.Close()
	if _, err := ps.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	term := func(after string) {
		t.Helper()
		if v, _ := rdb.Get(ctx, "l:v").Result(); v != "lead{1} v" {
			t.Errorf("after %s the value key holds %q, want the leader's", after, v)
		}
		if d := rdb.PTTL(ctx, "l:v").Val(); d < 9*time.Second {
			t.Errorf("after %s the value key lives %v, want the leader's 10s", after, d)
		}
		if f, _ := rdb.Get(ctx, "l:fence").Result(); f != fence {
			t.Errorf("after %s the fence counter is %q, want %q", after, f, fence)
		}
		if d := rdb.PTTL(ctx, "l:fence").Val(); d < 59*time.Second {
			t.Errorf("after %s the fence counter lives %v, want the 60s it was given", after, d)
		}
		if h, _ := rdb.Get(ctx, "l").Result(); h != "lead" {
			t.Errorf("after %s the lock key holds %q, want the leader's token", after, h)
		}
	}
	for _, seq := range []any{0, 7} {
		if n, err := Named("campaign_extend").Run(ctx, rdb, []string{"l", "l:r:old", "l:fence", "l:v"}, "old", 1000, seq).Int(); err != nil || n != 0 {
			t.Errorf("extension (seq %v) of a lease that does not lead = %d, %v; want 0", seq, n, err)
		}
		term(fmt.Sprintf("an extension (seq %v) of a lease that does not lead", seq))
	}
	if n, err := Named("campaign_release").Run(ctx, rdb, []string{"l", "l:fence", "l:q", "l:qw", "l:r:cand", "l:v"}, "cand", "PUBLISH 60000", 5000).Int(); err != nil || n != 0 {
		t.Errorf("release by a waiting candidate = %d, %v; want 0", n, err)
	}
	term("a waiting candidate's release")
	if q := rdb.LRange(ctx, "l:q", 0, -1).Val(); len(q) != 0 || rdb.HExists(ctx, "l:qw", "cand").Val() {
		t.Errorf("after its release the candidate is still queued: %q", q)
	}
	if m := rdb.Get(ctx, "l:r:cand").Val(); m != "0" {
		t.Errorf("the candidate's marker after its release = %q, want 0 (ended, not holding)", m)
	}
	if m, err := ps.ReceiveTimeout(ctx, 200*time.Millisecond); err == nil {
		t.Errorf("announced %v, want nothing: the term did not change", m)
	}
}
