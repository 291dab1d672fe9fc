package torture

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"

	"github.com/dlockio/dlock/driver"
	"github.com/dlockio/dlock/internal/script"
)

// refusing is a worker's connection to a lock node on the driver road that
// refuses a fraction of the commands it is given before sending them, as a
// driver may (rueidis refuses a cross-slot script or a command it cannot
// build, a pool refuses once closed): the error wraps driver.ErrNotSent and
// Redis never sees the command. dlock must take it for what it is, no lost
// reply: a refused acquisition holds nothing, a refused release leaves the
// lease to a retry or its expiry, and the invariants hold with no window
// exempted. Each refusal is recorded (OpRefused).
type refusing struct {
	driver.Conn
	r *refuser
}

// refuser decides, for every connection of one worker, which commands are
// refused.
type refuser struct {
	mu   sync.Mutex
	rng  *rand.Rand // from the worker's seed; calls come from many goroutines, hence mu
	rate float64    // the fraction of commands refused
	rec  *Recorder
	pre  string // the round's key prefix, to name a command's lock
}

// refusalRates are the fractions of commands a worker on the driver road
// has refused, one drawn per worker: none for a quarter of them.
var refusalRates = []float64{0, 0.02, 0.05, 0.1}

// refusals wraps the connections conns of a worker on the driver road
// with a refuser of a rate drawn from its seed, and returns the rate.
func (w *Worker) refusals(conns []driver.Conn) float64 {
	rng := rand.New(rand.NewPCG(w.cfg.Seed, 0x5e75))
	r := &refuser{rng: rng, rate: refusalRates[rng.IntN(len(refusalRates))], rec: w.rec, pre: w.cfg.Prefix}
	if r.rate == 0 {
		return 0
	}
	for i, c := range conns {
		conns[i] = refusing{c, r}
	}
	return r.rate
}

// refuse reports whether the next command is refused.
func (r *refuser) refuse() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.rng.Float64() < r.rate
}

func (c refusing) Do(ctx context.Context, args ...any) (any, error) {
	if c.r.refuse() {
		return nil, c.r.refused("Do", args)
	}
	return c.Conn.Do(ctx, args...)
}

// DoMulti refuses the whole batch at the rate (as go-redis fails a
// pipeline, and a closed pool every command), and otherwise each command
// on its own at the rate (as rueidis refuses one it cannot build, and
// sends the others).
func (c refusing) DoMulti(ctx context.Context, cmds ...[]any) []driver.Result {
	out := make([]driver.Result, len(cmds))
	all := c.r.refuse()
	send, at := make([][]any, 0, len(cmds)), make([]int, 0, len(cmds))
	for i, args := range cmds {
		if all || c.r.refuse() {
			out[i].Err = c.r.refused(fmt.Sprintf("DoMulti %d/%d", i+1, len(cmds)), args)
			continue
		}
		send, at = append(send, args), append(at, i)
	}
	if len(send) > 0 {
		for j, res := range c.Conn.DoMulti(ctx, send...) {
			out[at[j]] = res
		}
	}
	return out
}

// Masters returns the masters' Conns, refusing as c does.
func (c refusing) Masters(ctx context.Context) ([]driver.Conn, error) {
	ms, err := c.Conn.Masters(ctx)
	out := make([]driver.Conn, len(ms))
	for i, m := range ms {
		out[i] = refusing{m, c.r}
	}
	return out, err
}

// refused records the refusal of the command args, sent by call, and
// returns its error.
func (r *refuser) refused(call string, args []any) error {
	what := commandName(args)
	e := Event{Op: OpRefused, Inv: now(), Note: call + ": " + what}
	for _, k := range driver.Keys(args) {
		if name, ok := lockOfKey(k, r.pre); ok {
			e.Name = name
			break
		}
	}
	e.Ret = e.Inv
	r.rec.Add(e)
	return fmt.Errorf("%w: %s%s refused", driver.ErrNotSent, refusedMark, what)
}

// refusedMark begins what a refusal of the refuser's adds to ErrNotSent.
const refusedMark = "torture: "

// refusedHere reports whether the call e failed on a refusal of the
// refuser's, made before its command reached the Redis client.
func refusedHere(e Event) bool { return strings.Contains(e.Err, "not sent: "+refusedMark) }

// commandName names a command for the history: a script by its file.
func commandName(args []any) string {
	if len(args) == 0 {
		return "(empty)"
	}
	name, _ := driver.String(args[0])
	if strings.EqualFold(name, "evalsha") && len(args) > 1 {
		if sha, _ := driver.String(args[1]); scriptNames[sha] != "" {
			return name + " " + scriptNames[sha]
		}
	}
	return name
}

// scriptNames are dlock's scripts' names by digest.
var scriptNames = func() map[string]string {
	m := map[string]string{}
	for _, s := range script.All() {
		m[s.Hash()] = s.Name()
	}
	return m
}()

// lockOfKey returns the lock name of a key of the round (prefix, then the
// name in braces).
func lockOfKey(key, prefix string) (string, bool) {
	rest, ok := strings.CutPrefix(key, prefix+"{")
	if !ok {
		return "", false
	}
	name, _, ok := strings.Cut(rest, "}")
	return name, ok
}
