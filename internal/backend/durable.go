package backend

import (
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/driver"
)

// Durable grants (WithDurableGrants): after a write that grants or extends
// a lease, WAITAOF 1 0 <timeout> on the same connection waits until the
// server's append-only file has it (fsynced as appendfsync says), so that
// a crash-restart on that file cannot forget the lease. With replica
// acknowledgement on too, WAIT keeps its own meaning (replicas received
// the write; WAITAOF's replica count would ask for their files instead).

// ackCmds returns the waits for a write's acknowledgements, sent after it
// on its connection: WAIT for the replicas, WAITAOF for the append-only
// file; none for one that is off.
func (n Node) ackCmds() [][]any {
	var cmds [][]any
	if r := n.replicaAcks(); r > 0 {
		cmds = append(cmds, []any{"WAIT", r, n.ackTimeout.Milliseconds()})
	}
	if n.durable > 0 {
		cmds = append(cmds, []any{"WAITAOF", 1, 0, n.durable.Milliseconds()})
	}
	return cmds
}

// aofAck is 1 with durable grants: the acknowledgement of the append-only
// file, which n.replicas counts first.
func (n Node) aofAck() int64 { return int64(flag(n.durable > 0)) }

// replicaAcks is how many replicas must acknowledge (WithReplicaAck).
func (n Node) replicaAcks() int64 { return int64(n.replicas) - n.aofAck() }

// acksOf counts the acknowledgements of the waits of ackCmds, whose
// replies are rs, as n.replicas counts them: the append-only file's first
// (none at all when it lacks the write), then the replicas', at most as
// many as asked. It returns the error of a server that refused WAITAOF (see
// notDurable), which also matches refused: an acquisition's ErrNotAcquired
// (its grant is undone), nil for an extension (the lease was not refused).
func (n Node) acksOf(rs []driver.Result, refused error) (int64, error) {
	acks := n.aofAck()
	if n.durable > 0 {
		v, err := ints(rs[len(rs)-1].Val, rs[len(rs)-1].Err)
		if err != nil {
			return 0, notDurable(err, refused)
		}
		if len(v) == 0 || v[0] < 1 {
			return 0, nil
		}
	}
	if r := n.replicaAcks(); r > 0 {
		w, _ := as[int64](rs[0].Val, rs[0].Err)
		acks += min(w, r)
	}
	return acks, nil
}

// notDurable is the error of a WAITAOF that failed: refused by a server
// without it (before Redis 7.2) or without an append-only file, which
// matches ErrNotDurable, ErrInvalid and also, unless nil; nil for a
// failure that is no refusal (the connection broke: the acknowledgement is
// missing).
func notDurable(err, also error) error {
	if !errors.As(err, new(redis.Error)) {
		return nil
	}
	why := "the server refused WAITAOF, which durable grants need: " + err.Error()
	switch msg := strings.ToLower(err.Error()); {
	case strings.Contains(msg, "unknown command"):
		why = "the server has no WAITAOF, which durable grants need (Redis 7.2 or later, or Valkey)"
	case strings.Contains(msg, "appendonly"):
		why = "the server's append-only file is off (appendonly no): durable grants need it"
	}
	if also == nil {
		return Because(ErrNotDurable, why, ErrInvalid, err)
	}
	return Because(ErrNotDurable, why, ErrInvalid, also, err)
}
