package backend

import (
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/internal/redistest"
	"github.com/dlockio/dlock/internal/script"
)

// A call that meets NOSCRIPT sends its script again, with the loads, in one
// pipeline: go-redis, even with retries on, does not send that pipeline
// again when its connection breaks (the script may have run), although it
// may send a load alone again.
func TestRerunAfterNOSCRIPTIsNeverSentTwice(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t, redistest.TCP())
	direct := s.Client(t)
	ctx := t.Context()
	loser := redistest.NewLoser("script", "evalsha")
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr(), Dialer: loser.Dial, MaxRetries: 3})
	t.Cleanup(func() { rdb.Close() })
	n := NewNode(rdb, Config{TTL: time.Second})
	loser.Arm()
	err := n.run(ctx, script.Uptime, []string{"rerun"}).Err()
	if got := loser.Lost(); got != 1 {
		t.Fatalf("%d pipelines of SCRIPT LOAD and EVALSHA lost, want the rerun's (err %v)", got, err)
	}
	if !ReplyLost(err) {
		t.Errorf("run = %v, want a lost reply", err)
	}
	info, ierr := direct.Info(ctx, "commandstats").Result()
	if ierr != nil {
		t.Fatal(ierr)
	}
	if strings.Contains(info, "cmdstat_script|load:") {
		t.Errorf("the server ran a SCRIPT LOAD: go-redis sent the lost rerun again")
	}
}
