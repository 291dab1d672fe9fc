package torture

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/dlockio/dlock"
)

// Event is one line of a history. Every process (the coordinator, its
// goroutine workers, each worker process) appends events to its own file as
// JSON lines; the coordinator merges them after the round. Times are wall
// clock nanoseconds (time.Now().UnixNano()): all processes run on one
// machine and share its clock.
type Event struct {
	W    string `json:"w"`           // worker ("g2", "p0") or "coord"
	Name string `json:"n,omitempty"` // lock name
	Op   string `json:"op"`          // see the Op* constants
	Inv  int64  `json:"i"`           // invoked (for a stamp: the instant)
	Ret  int64  `json:"r,omitempty"` // returned

	Tok   string `json:"tok,omitempty"` // the Lock's token (Lock.Token)
	Own   string `json:"own,omitempty"` // reentrant owner (Client.Owner): its holds share it
	Fence int64  `json:"f,omitempty"`
	VU    int64  `json:"vu,omitempty"`  // Lock.ValidUntil after the call (or at the stamp)
	VU0   int64  `json:"vu0,omitempty"` // Lock.ValidUntil before the call (release, extend)
	Res   string `json:"res,omitempty"` // outcome class; see classify
	Err   string `json:"err,omitempty"`
	CS    string `json:"cs,omitempty"` // critical section (or handle) id, unique per worker
	Held  bool   `json:"held,omitempty"`
	Arg   int64  `json:"a,omitempty"`  // extend: ttl in ns; fault: node index
	DL    int64  `json:"dl,omitempty"` // the call's context deadline (or cancel instant)
	Bound int64  `json:"b,omitempty"`  // how late after DL the call may return, ns
	Note  string `json:"note,omitempty"`
	// TTL is the lease time an acquisition asked for with LeaseTTL, when it
	// is not the round's (0: the round's TTL; see ttlOf).
	TTL int64 `json:"ttl,omitempty"`
	// Hold and Cap are a lease's max hold (MaxHold) and the
	// deadline it sets (Lock.Deadline), unix ns; 0 without one.
	Hold int64 `json:"hold,omitempty"`
	Cap  int64 `json:"cap,omitempty"`
	// Delay is a lease's lock-delay (LockDelay), ns: Redis keeps the lease
	// that much past the lease time asked for; 0 without one.
	Delay int64 `json:"delay,omitempty"`
	// Grp names the multi-lock call (AcquireAll, TryAcquireAll, DoAll) an
	// acquisition is a part of; its OpAll event carries it too.
	Grp string `json:"grp,omitempty"`
	// Meta is the holder metadata a lease was expected to carry (OpInspect:
	// the one asked for, or the Client's); Seen what Inspect showed, LMeta
	// what Lock.Meta said.
	Meta  string `json:"meta,omitempty"`
	Seen  string `json:"seen,omitempty"`
	LMeta string `json:"lmeta,omitempty"`
	// MH: the error (Err) wraps dlock.ErrMaxHold.
	MH bool `json:"mh,omitempty"`
	// Size is the size a semaphore's kept size change (OpSize) returned.
	Size int64 `json:"size,omitempty"`
	// N is how many permits of a semaphore an acquisition asked for
	// (Semaphore.AcquireN) and its hold, if granted, weighs: 0 for one.
	N int `json:"pn,omitempty"`
	// Via is, for a worker's config, the addresses of the proxies it
	// reaches the lock nodes through (space-separated, one per node); for
	// a fault that hit one proxy, that proxy's address.
	Via string `json:"via,omitempty"`
}

// Operations recorded.
const (
	OpAcquire   = "acquire"   // Client.Acquire
	OpTry       = "try"       // Client.TryAcquire
	OpDo        = "do"        // Client.Do: the acquisition, stamped as fn starts
	OpDoRet     = "do-ret"    // Client.Do returned
	OpFnRet     = "fn-ret"    // Do's fn returned (or panicked): Do releases from here
	OpExtend    = "extend"    // Lock.Extend
	OpRelease   = "release"   // Lock.Release
	OpEnter     = "enter"     // a critical section starts: the holder believes it holds
	OpAlive     = "alive"     // the holder still believes it holds
	OpExit      = "exit"      // the critical section ends (last belief, if Held)
	OpWrite     = "write"     // Guard.Write through the fenced resource
	OpPanic     = "panic"     // fn panicked inside Do; Res says whether the lock was left held
	OpLeftover  = "leftover"  // a self-check found holds left after the owner's last release
	OpReentry   = "reentry"   // a nested acquisition by the owner was refused while it held
	OpFault     = "fault"     // coordinator: a fault window [Inv, Ret]
	OpProbe     = "probe"     // coordinator: liveness probe acquisition
	OpPool      = "pool"      // a worker's go-redis pool at its end: Arg total conns, Bound pool size
	OpHung      = "hung"      // coordinator: a worker did not finish in time
	OpConfig    = "config"    // a worker's settings, Note "auto=<bool> …"
	OpLeader    = "leader"    // Election.Leader: Tok, Fence and Seen (the value) read (Tok "" when nobody leads)
	OpAll       = "all"       // a multi-lock call returned: Name the names given (comma-separated), Note its trace (see multiTrace)
	OpCapped    = "capped"    // a lease kept past its max hold: from Inv the holder waits for its loss signal, seen at Ret (Held: it fired), Err/MH its Err
	OpCapFree   = "capfree"   // after a capped lease's loss: Res "released" when Redis no longer carried it, "stillheld" or "unknown"
	OpFence     = "fence"     // Lock.Fence of a multi-lock's part, right after the set was returned (VU0, Held before it)
	OpAllLost   = "all-lost"  // a part of a set was found lost: Held if the set still said it was held, Res "open" if its Done was
	OpResume    = "resume"    // a held lease taken over by its token (dlock.Resume): Arg the TTL asked, VU0/VU the validity before and after
	OpProclaim  = "proclaim"  // Leadership.Proclaim in election mode: Seen the value proclaimed
	OpDowngrade = "downgrade" // RWMutex.Downgrade of a write hold in rw mode: the hold's stamps after Ret are a read's
	OpInspect   = "inspect"   // Client.Inspect by a holder: Res "mine" if it showed the holder's token, Meta/Seen/LMeta
	OpJeopardy  = "jeopardy"  // a jeopardy told (Res "founded" or "unfounded"), or a loss found with Jeopardy open (Res "missed")
	OpRefused   = "refused"   // a command the driver refused unsent (refuse.go): Note the call and the command, Name its lock
	OpLostCall  = "lostcall"  // a call of a lost lease's Lock by the Lost hook: Note the call (or "unwatched": no watched lease lost), Arg the fence Fence returned, DL/Bound its context's
	OpSize      = "size"      // Semaphore.AddPermits by the round's one sizer (size.go): Arg the delta (0: a read), Size the size returned
	OpQueued    = "queued"    // semaphore rounds: an acquisition of the worker started to wait (Observer.Waiting), its place in the queue taken by Inv
	OpClosed    = "closed"    // a worker's Redis clients closed under its Client (closed.go): from Inv until its fresh Client at Ret; Note the nodes closed, Arg how many it has, Held if those were its only one or a majority, Err what failed after
)

// Recorder appends events to a file, one JSON object per line. A line is
// written with one write(2) call, so a worker process killed with SIGKILL
// leaves whole lines behind.
type Recorder struct {
	mu sync.Mutex
	f  *os.File
	w  string
}

// NewRecorder creates (truncates) path and records events of worker w.
func NewRecorder(path, w string) (*Recorder, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	return &Recorder{f: f, w: w}, nil
}

// Add records e, filling in the worker.
func (r *Recorder) Add(e Event) {
	e.W = r.w
	b, _ := json.Marshal(e)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f != nil {
		r.f.Write(append(b, '\n'))
	}
}

// Close closes the file; later events are dropped.
func (r *Recorder) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	f := r.f
	r.f = nil
	if f == nil {
		return nil
	}
	return f.Close()
}

// LoadDir reads and merges every *.jsonl file of dir, sorted by Inv. A
// truncated last line (a process killed mid-write) is skipped.
func LoadDir(dir string) ([]Event, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if err != nil {
		return nil, err
	}
	var all []Event
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			var e Event
			if json.Unmarshal(sc.Bytes(), &e) == nil {
				all = append(all, e)
			}
		}
		f.Close()
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].Inv < all[j].Inv })
	return all, nil
}

// holder identifies who holds a lease: a reentrant owner, whose nested
// holds have tokens of their own, or else the lease's token.
func holder(e Event) string {
	if e.Own != "" {
		return "owner:" + e.Own
	}
	return e.Tok
}

// ttlOf is the lease time the acquisition e asked for: its LeaseTTL, or
// the round's ttl.
func ttlOf(e Event, ttl time.Duration) int64 {
	if e.TTL > 0 {
		return e.TTL
	}
	return int64(ttl)
}

// now is the history's clock.
func now() int64 { return time.Now().UnixNano() }

// classify names the outcome of a dlock call for the history.
func classify(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, dlock.ErrClosed):
		return "closed" // (o): whatever else the error says
	case errors.Is(err, dlock.ErrStaleFence):
		return "stale"
	case errors.Is(err, dlock.ErrReleased):
		return "released"
	case errors.Is(err, dlock.ErrNotHeld):
		return "notheld"
	case errors.Is(err, dlock.ErrInvalid):
		return "invalid"
	case errors.Is(err, dlock.ErrWrongType):
		return "wrongtype"
	case errors.Is(err, dlock.ErrDeadlock):
		return "deadlock" // (m)
	case errors.Is(err, dlock.ErrNotAcquired):
		return "notacq"
	}
	return "err"
}

// errText shortens an error for the history.
func errText(err error) string {
	if err == nil {
		return ""
	}
	s := err.Error()
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

// Excerpt formats the events of name (all names if "") within [from, to],
// and those of the critical sections cs at any time, at most max lines,
// with times in ms relative to base: the context printed with a violation.
func Excerpt(h []Event, name string, cs []string, from, to, base int64, max int) string {
	var b strings.Builder
	n := 0
	for _, e := range h {
		inWindow := e.Inv >= from && e.Inv <= to && (name == "" || e.Name == name || e.Op == OpFault)
		if !inWindow && (e.CS == "" || !slices.Contains(cs, e.CS)) {
			continue
		}
		if n == max {
			b.WriteString("    …\n")
			break
		}
		n++
		fmt.Fprintf(&b, "    %s\n", format(e, base))
	}
	return b.String()
}

// format renders one event on one line.
func format(e Event, base int64) string {
	ms := func(t int64) string {
		if t == 0 {
			return "-"
		}
		return fmt.Sprintf("%.1f", float64(t-base)/1e6)
	}
	s := fmt.Sprintf("%-5s %-8s %-10s inv=%s ret=%s", e.W, e.Op, e.Name, ms(e.Inv), ms(e.Ret))
	if e.CS != "" {
		s += " cs=" + e.CS
	}
	if e.Tok != "" {
		tok := e.Tok
		if len(tok) > 10 {
			tok = tok[len(tok)-10:]
		}
		s += " tok=…" + tok
	}
	if e.Fence != 0 {
		s += fmt.Sprintf(" fence=%d", e.Fence)
	}
	if e.N > 1 {
		s += fmt.Sprintf(" permits=%d", e.N)
	}
	if e.VU != 0 {
		s += " vu=" + ms(e.VU)
	}
	if e.Held {
		s += " held"
	}
	if e.Res != "" {
		s += " res=" + e.Res
	}
	if e.Note != "" {
		s += " note=" + e.Note
	}
	if e.Op == OpFault && e.Via != "" {
		s += " via=" + e.Via
	}
	if e.Err != "" {
		s += " err=" + e.Err
	}
	return s
}
