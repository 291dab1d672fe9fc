package backend

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/internal/redistest"
)

// A quorum's failed operation names what each node said: Held counts the
// nodes that granted it, Need the majority, and Nodes gives each node's
// answer in the nodes' order: nil for a yes, the refusal for a no, no
// answer within the node timeout for a frozen or dead node; List and
// Inspect, which wait for every node, name the node's own error. Five
// nodes: 0 and 1 hold mine, 2 theirs, 3 mine, 4 is dead; the operations
// run while 0 and 1 are frozen (acquire: while 1 and 3 are).
// (Serial: it freezes servers with SIGSTOP.)
func TestQuorumErrorsNameEachNodesAnswer(t *testing.T) {
	ctx := t.Context()
	var srvs []*redistest.Server
	var nodes []Node
	for range 5 {
		s := redistest.Start(t)
		o := s.Options()
		o.ReadTimeout, o.MaxRetries = time.Second, -1
		rdb := redis.NewClient(o)
		t.Cleanup(func() { rdb.Close() })
		srvs = append(srvs, s)
		nodes = append(nodes, NewNode(rdb, Config{TTL: 10 * time.Second}))
	}
	q := NewQuorum(nodes, 300*time.Millisecond, new(Tracker))
	t.Cleanup(func() {
		srvs[4].Restart() // (the background retries of node 4's release find it)
		for _, s := range srvs[:4] {
			s.Resume()
		}
		q.late.Wait(context.Background())
	})
	claim := func(name, token string) *Claim {
		c := &Claim{Keys: KeysFor("dlock:", name), Kind: PlainLock}
		c.SetToken(token)
		return c
	}
	// Every script loaded on every node first.
	warm := claim("warm", "warm")
	if g, err := q.Acquire(ctx, warm, 10*time.Second, false); err != nil || !g.Held {
		t.Fatalf("Acquire(warm) = %+v, %v", g, err)
	}
	if _, err := q.Fence(ctx, warm); err != nil {
		t.Fatal(err)
	}
	if _, _, err := q.Seq(ctx, warm); err != nil {
		t.Fatal(err)
	}
	if ok, err := q.Release(ctx, warm); !ok || err != nil {
		t.Fatalf("Release(warm) = %v, %v", ok, err)
	}

	mine, theirs := claim("q", "mine"), claim("q", "theirs")
	if g, err := q.nodes[2].Acquire(ctx, theirs, 10*time.Second, false); err != nil || !g.Held {
		t.Fatalf("Acquire(theirs) on node 2 = %+v, %v", g, err)
	}
	srvs[4].Kill()

	// check checks err, the QuorumError of op, against want, per node:
	// nil, errNoAnswer, errRefused, or any other error (errOther).
	errOther := errors.New("the node's own error")
	check := func(op string, err error, held int, want ...error) {
		t.Helper()
		qe, ok := errors.AsType[*QuorumError](err)
		if !ok || qe.Op != op || qe.Held != held || qe.Need != 3 || len(qe.Nodes) != len(want) {
			t.Errorf("%s = %v; want a QuorumError of %q, %d held, 3 needed, 5 nodes", op, err, op, held)
			return
		}
		text := qe.Error()
		for i, w := range want {
			got := qe.Nodes[i]
			switch {
			case w == errOther:
				if got == nil || errors.Is(got, errNoAnswer) || errors.Is(got, errRefused) || errors.Is(got, errNotWaited) || errors.Is(got, errCutShort) {
					t.Errorf("%s: node %d: %v, want the node's own error", op, i, got)
				}
			case w == errNoAnswer && i == 4:
				// (a dead node: no answer, or its dial failed in time)
				if got == nil || errors.Is(got, errRefused) {
					t.Errorf("%s: node %d: %v, want no answer or its dial error", op, i, got)
				}
			case got != w:
				t.Errorf("%s: node %d: %v, want %v", op, i, got, w)
			}
			if got != nil && !strings.Contains(text, fmt.Sprintf("; node %d: %v", i, got)) {
				t.Errorf("%s: %q does not name node %d's %q", op, text, i, got)
			}
		}
	}

	srvs[1].Pause()
	srvs[3].Pause()
	g, err := q.Acquire(ctx, mine, 10*time.Second, false)
	check("acquire", err, 1, nil, errNoAnswer, errRefused, errNoAnswer, errNoAnswer)
	if g.Held || !g.Undo {
		t.Errorf("Acquire granted by one node of five = %+v, want not held, to undo", g)
	}
	if !strings.HasPrefix(err.Error(), "1 of 5 nodes granted, 3 needed; node 1: no answer within the node timeout; node 2: held by another holder; node 3: no answer within the node timeout; node 4: ") {
		t.Errorf("Acquire = %q", err)
	}
	srvs[1].Resume()
	srvs[3].Resume()
	if err := q.late.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{0, 1, 3} {
		if g, err := q.nodes[i].Acquire(ctx, mine, 10*time.Second, false); err != nil || !g.Held {
			t.Fatalf("Acquire(mine) on node %d = %+v, %v", i, g, err)
		}
	}

	srvs[0].Pause()
	srvs[1].Pause()
	ok, err := q.Extend(ctx, mine, 10*time.Second, 0)
	check("extend", err, 1, errNoAnswer, errNoAnswer, errRefused, nil, errNoAnswer)
	if ok {
		t.Error("Extend granted by one node of five")
	}
	f, err := q.Fence(ctx, mine)
	check("fence", err, 1, errNoAnswer, errNoAnswer, errRefused, nil, errNoAnswer)
	if f != 0 {
		t.Errorf("Fence granted by one node of five = %d", f)
	}
	// Every answer of Seq is a yes: node 2's too.
	_, _, err = q.Seq(ctx, mine)
	check("resume", err, 2, errNoAnswer, errNoAnswer, nil, nil, errNoAnswer)
	_, err = q.Inspect(ctx, &mine.Keys)
	check("inspect", err, 2, errNoAnswer, errNoAnswer, nil, nil, errNoAnswer)
	// List waits for the frozen nodes' read timeout.
	keys, err := q.Scan(ctx, "dlock:{*}")
	check("list", err, 2, errOther, errOther, nil, nil, errOther)
	if keys != nil {
		t.Errorf("List without a majority = %q, want none", keys)
	}
	// Released where it answered, and the nodes that did not could still
	// make a majority: released.
	if ok, err := q.Release(ctx, mine); !ok || err != nil {
		t.Errorf("Release confirmed by node 3, refused by node 2 = %v, %v; want true, nil", ok, err)
	}
}
