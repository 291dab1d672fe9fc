package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/dlockio/dlock"
)

const runHelp = `run [flags] NAME -- CMD [ARG...]

Holds the lock NAME while CMD runs, like flock(1) across machines. The lock is
extended every ttl/3 while CMD runs. CMD gets DLOCK_NAME, DLOCK_KEY,
DLOCK_TOKEN and DLOCK_FENCE in its environment (pass DLOCK_FENCE to the
resource you protect).

With -n N (N > 1), NAME is a semaphore: CMD runs holding one of its N
permits, so that at most N commands run at once under NAME; waiters are
served in arrival order. Everything below applies to the permit as to the
lock. Every run of NAME should pass the same N: a permit is granted only
while fewer than the requester's own N are held. A name is either a lock or
a semaphore: while one kind is held, the other fails (exit 3). Not
available over a quorum.

With --read or --write, NAME is a read-write lock: CMD runs holding a read
(shared with other readers) or the write (alone), waiting in one line in
arrival order, so that readers do not starve a writer. Not available over a
quorum.

CMD runs in a process group of its own, which is kept under the lock or
stopped; the lock is released once the whole group has exited, a job CMD
left in the background included. SIGINT, SIGTERM and SIGHUP are forwarded to it; Ctrl-Z (SIGTSTP)
stops it along with dlock, and SIGCONT continues both. If the lock is lost
while CMD runs, the group gets SIGTERM and, after --grace, SIGKILL. A small
guardian process between dlock and CMD watches dlock: if dlock dies (even by
kill -9), the group gets SIGTERM, and SIGKILL after --grace but no later than
ttl/10 before the lease ends, when another dlock could take the lock; if
dlock is stopped or frozen and the lease comes within ttl/10 of its end
unextended, the group is stopped with SIGSTOP.

With --jeopardy-signal SIG (USR1, USR2, HUP, INT, TERM or WINCH; none by
default), the group gets SIG as soon as an extension of the lease fails, or
goes unanswered for half the validity left, while the lease is still valid:
CMD can checkpoint or stop cleanly before the lease is lost. It is sent once
per episode; a later successful extension ends the episode.

A lease that someone else ends ('dlock release --force', or a DEL of its key
where the server has keyspace events on) is known lost within milliseconds,
not at the next extension (up to ttl/3 later), and CMD is stopped as on any
loss (--watch-loss=false: at the next extension). 'dlock release --ask NAME'
sends CMD's group --request-signal (SIGTERM by default; none to ignore it):
CMD decides whether to exit, and the lock is released when it does.

With --max-hold D (0, the default: no limit; else at least 30ms), CMD holds
the lock for D at most: once it has been held for D, CMD is terminated as on
a lost lock (SIGTERM, then SIGKILL after --grace, but no later than ttl/10
after D, when the lease ends). The lease is kept ttl/10
past D (the guardian's margin), so that CMD runs under the lock for the whole
of D; the lock is released when CMD exits, ttl/10 after D at the latest, and
a waiter takes it at once.

The lock's holder metadata (--meta, "hostname:pid" of dlock by default) is
what 'dlock inspect' shows, and what a run that finds the lock held prints.

Over a quorum (--redis repeated), dlock exits 4 at once if a majority of the
nodes do not answer; nodes that fail later are waited out until --wait ends.

exit status: CMD's (128+N if killed by signal N); 5 if the lock was not
acquired (held by another holder, or lost before CMD started); 6 if it was
lost, or reached --max-hold, while CMD ran; 2 usage; 3 configuration (also: NAME
is held as another kind: lock, semaphore, read-write lock); 4 Redis unreachable, or too
many quorum nodes failing to reach a majority (the message names them); 130
(143 for SIGTERM) if interrupted while waiting for the lock; 126/127 CMD not
executable/not found`

func cmdRun(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("run", stderr, runHelp)
	to := targetFlags(fs)
	ttl := fs.Duration("ttl", dlock.DefaultTTL, "lease time; a holder that dies blocks others at most this long")
	wait := waitFlag(fs)
	grace := fs.Duration("grace", 10*time.Second, "time CMD has between SIGTERM and SIGKILL after the lock is lost, or after dlock dies (then no later than ttl/10 before the lease ends)")
	permits := fs.Int("n", 1, "run at most `N` commands at once: hold one of N permits of the semaphore NAME; 1 holds the lock NAME")
	maxHold := fs.Duration("max-hold", 0, "the longest CMD may hold the lock: then it is terminated as on a lost lock (0: no limit; else at least 30ms)")
	meta := fs.String("meta", "", "the holder `metadata` that 'dlock inspect' shows (default hostname:pid)")
	read := fs.Bool("read", false, "hold a read of the read-write lock NAME, shared with other readers")
	write := fs.Bool("write", false, "hold the write of the read-write lock NAME, alone")
	jeopardy := fs.String("jeopardy-signal", "", "the `signal` (USR1, USR2, HUP, INT, TERM, WINCH) CMD's group gets when the lease is at risk (default none)")
	watchLoss := fs.Bool("watch-loss", true, "learn at once, not at the next extension, that someone else ended the lease (release --force; a DEL where the server has keyspace events on), and hear release --ask")
	request := fs.String("request-signal", "TERM", "the `signal` (USR1, USR2, HUP, INT, TERM, WINCH, or none) CMD's group gets when 'dlock release --ask' asks for the lock")
	if code := parse(fs, args); code >= 0 {
		return code
	}
	metaSet, requestSet := false, false
	fs.Visit(func(f *flag.Flag) {
		metaSet = metaSet || f.Name == "meta"
		requestSet = requestSet || f.Name == "request-signal"
	})
	rest := fs.Args()
	switch {
	case len(rest) == 0:
		fmt.Fprintln(stderr, "dlock run: missing NAME -- CMD (see 'dlock run -h')")
		return exitUsage
	case len(rest) < 2 || rest[1] != "--":
		fmt.Fprintln(stderr, "dlock run: expected NAME -- CMD [ARG...], with flags before NAME")
		return exitUsage
	case len(rest) < 3:
		fmt.Fprintln(stderr, "dlock run: missing CMD after --")
		return exitUsage
	case *grace < 0:
		fmt.Fprintln(stderr, "dlock run: --grace must not be negative")
		return exitUsage
	case *permits < 1:
		fmt.Fprintf(stderr, "dlock run: -n %d: must be at least 1\n", *permits)
		return exitUsage
	case *read && *write || (*read || *write) && *permits > 1:
		fmt.Fprintln(stderr, "dlock run: at most one of --read, --write and -n")
		return exitUsage
	}
	jname := strings.ToUpper(*jeopardy)
	if len(jname) > len("SIG") {
		jname = strings.TrimPrefix(jname, "SIG")
	}
	jsig, ok := jeopardySignals[jname]
	if !ok || (jsig == 0 && *jeopardy != "") {
		fmt.Fprintf(stderr, "dlock run: --jeopardy-signal %q: want one of USR1, USR2, HUP, INT, TERM, WINCH\n", *jeopardy)
		return exitUsage
	}
	rsig, ok := jeopardySignals[strings.TrimPrefix(strings.ToUpper(*request), "SIG")]
	if strings.EqualFold(*request, "none") {
		rsig, ok = 0, true
	}
	if !ok || rsig == 0 && !strings.EqualFold(*request, "none") {
		fmt.Fprintf(stderr, "dlock run: --request-signal %q: want one of USR1, USR2, HUP, INT, TERM, WINCH or none\n", *request)
		return exitUsage
	}
	if requestSet && !*watchLoss {
		fmt.Fprintln(stderr, "dlock run: --request-signal needs the watched lease: not with --watch-loss=false")
		return exitUsage
	}
	opts, err := runOptions(*ttl, *maxHold, *meta, metaSet)
	if err != nil {
		fmt.Fprintf(stderr, "dlock run: %v\n", err)
		return exitUsage
	}
	if *watchLoss {
		opts = append(opts, dlock.WatchLoss(true))
	}
	name, argv := rest[0], rest[2:]

	c, closeFn, err := to.client(ctx, opts...)
	if err != nil {
		return report(stderr, err)
	}
	defer closeFn()

	nodes := redactAll(redisURLs(to.urls))
	h := holdable{c: c, name: name}
	if *permits > 1 {
		if h.sem, err = c.Semaphore(name, *permits); err != nil {
			fmt.Fprintf(stderr, "dlock run: -n %d: %v\n", *permits, strings.TrimPrefix(err.Error(), "dlock: "))
			return exitUsage
		}
	}
	if *read || *write {
		rw, err := c.RWMutex(name)
		if err != nil {
			fmt.Fprintf(stderr, "dlock run: %v\n", strings.TrimPrefix(err.Error(), "dlock: "))
			return exitUsage
		}
		if h.rw = rw.Reader(); *write {
			h.rw = rw.Writer()
		}
	}
	l, err := acquireFor(ctx, h, *wait, nodes)
	if err != nil {
		return report(stderr, err)
	}
	// The release is tried again until its 5s are spent: a release not
	// sent (Redis refusing dials for a moment, which the dial gate turns
	// into a second of failing at once) would leave the lock held for the
	// rest of its TTL. A repeated release reports what the first did.
	release := func() error {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		for {
			err := l.Release(rctx)
			if err == nil || errors.Is(err, dlock.ErrNotHeld) || errors.Is(err, dlock.ErrInvalid) {
				return err
			}
			select {
			case <-rctx.Done():
				return err
			case <-time.After(releaseRetry):
			}
		}
	}
	// A fence is issued only while the lease holds the lock: without one,
	// CMD does not run.
	fence, err := l.Fence(ctx)
	if err != nil {
		release() // if this fails too, the lock expires within ttl
		return report(stderr, fenceError(ctx, name, err, nodes))
	}

	code, lostErr := supervise(l, fence, argv, *ttl, *grace, jsig, rsig, stdout, stderr)
	if err := release(); err != nil && lostErr == nil {
		if errors.Is(err, dlock.ErrNotHeld) {
			lostErr = err
		} else {
			fmt.Fprintf(stderr, "dlock: warning: release %q: %v (it expires within %v)\n", name, err, *ttl)
		}
	}
	switch {
	case errors.Is(lostErr, dlock.ErrMaxHold):
		fmt.Fprintf(stderr, "dlock: lock %q reached its max hold of %v while the command ran; the command was terminated and the lock released\n", name, *maxHold)
	case lostErr != nil:
		fmt.Fprintf(stderr, "dlock: lock %q was lost while the command ran: %v\n", name, lostErr)
	default:
		return code
	}
	return exitLost
}

// runOptions checks the flags that become the Client's options, so that a
// bad one is reported in the flag's own name, and returns the options.
// The lease's max hold is the command's, maxHold, and the guardian's
// margin after it: CMD is terminated at maxHold (see newLossPath), and
// the lease must still have the margin left then, or the guardian, which
// acts a margin before the lease ends, would stop CMD earlier.
func runOptions(ttl, maxHold time.Duration, meta string, metaSet bool) ([]dlock.Option, error) {
	if err := checkTTL(ttl); err != nil {
		return nil, err
	}
	if err := checkMaxHold(maxHold); err != nil {
		return nil, err
	}
	leaseCap := maxHold
	if maxHold > 0 {
		leaseCap = min(maxHold, math.MaxInt64-guardianMargin(ttl)) + guardianMargin(ttl) // (no sum past the longest Duration)
	}
	opts := []dlock.Option{dlock.LeaseTTL(ttl), dlock.MaxHold(leaseCap)}
	if metaSet {
		if err := checkMeta(meta); err != nil {
			return nil, err
		}
		opts = append(opts, dlock.HolderMeta(meta))
	}
	return opts, nil
}

// guardianMargin is how long before the lease ends the guardian acts (see
// supervise).
func guardianMargin(ttl time.Duration) time.Duration { return max(ttl/10, time.Millisecond) }

// checkMeta checks a --meta flag as dlock.HolderMeta does, so that a
// bad one is reported in the flag's own name.
func checkMeta(meta string) error {
	switch {
	case len(meta) > dlock.MaxMetaLen:
		return fmt.Errorf("--meta: %d bytes, longer than %d", len(meta), dlock.MaxMetaLen)
	case !utf8.ValidString(meta):
		return fmt.Errorf("--meta %q: not valid UTF-8", meta)
	case strings.IndexFunc(meta, unicode.IsControl) >= 0:
		return fmt.Errorf("--meta %q: holds a control character", meta)
	}
	return nil
}

// checkMaxHold checks a --max-hold flag: 0 (none), or at least the
// shortest lease.
func checkMaxHold(d time.Duration) error {
	if d < 0 || d > 0 && d < dlock.MinTTL {
		return fmt.Errorf("--max-hold %v: must be 0 (no limit) or at least %v", d, dlock.MinTTL)
	}
	return nil
}

// checkTTL checks a --ttl flag before it becomes dlock.LeaseTTL, so that a
// bad one is reported in the flag's own name.
func checkTTL(ttl time.Duration) error {
	if ttl < dlock.MinTTL {
		return fmt.Errorf("--ttl %v: must be at least %v", ttl, dlock.MinTTL)
	}
	return nil
}

// waitFlag defines --wait: how long to wait for the lock, "forever" (the
// default, or any negative duration) until interrupted, 0 to try once.
func waitFlag(fs *flag.FlagSet) *time.Duration {
	w := waitValue(-1)
	fs.Var(&w, "wait", "how long to wait for the lock, a `duration`: 0 tries once; forever (or a negative duration) waits until interrupted")
	return (*time.Duration)(&w)
}

type waitValue time.Duration

func (w *waitValue) String() string {
	if *w < 0 {
		return "forever"
	}
	return time.Duration(*w).String()
}

func (w *waitValue) Set(s string) error {
	if s == "forever" {
		*w = -1
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return errors.New("want a duration such as 30s, or forever")
	}
	*w = waitValue(d)
	return nil
}

// holdable is what dlock run holds while CMD runs: the lock name, or (-n
// above 1) a permit of the semaphore name.
type holdable struct {
	c    *dlock.Client
	name string
	sem  *dlock.Semaphore // nil: the lock
	rw   *dlock.RWLocker  // non-nil: a read or the write of the read-write lock name
}

// acquireFor takes h, waiting up to wait (0: once; negative: until ctx
// ends); nodes names the Redis nodes, in order, for messages. The library
// reports a quorum that failed as not acquired too (a QuorumError matches
// ErrNotAcquired), and an interrupted wait as well; the exit codes tell
// them apart: 5 only when the lock is held by another holder (or every
// permit is held), 4 when nodes failed, 128+N when a signal interrupted the
// wait.
func acquireFor(ctx context.Context, h holdable, wait time.Duration, nodes []string) (*dlock.Lock, error) {
	var (
		l    *dlock.Lock
		err  error
		name = h.name
	)
	var opts []dlock.LockOption
	if wait >= 0 {
		opts = append(opts, dlock.MaxWait(wait)) // MaxWait(0): one attempt
	}
	switch {
	case h.rw != nil:
		l, err = h.rw.Acquire(ctx, opts...)
	case h.sem != nil:
		l, err = h.sem.Acquire(ctx, opts...)
	default:
		l, err = h.c.Acquire(ctx, name, opts...)
	}
	if err == nil {
		return l, nil
	}
	// A waiting Acquire joins the last QuorumError to the context's error.
	qe, noQuorum := errors.AsType[*dlock.QuorumError](err)
	switch {
	case errors.Is(err, dlock.ErrInvalid):
		return nil, &cliError{code: exitUsage, err: err}
	case ctx.Err() != nil && errors.Is(err, context.Canceled):
		if noQuorum {
			return nil, interrupted(ctx, "while waiting for lock %q (the last attempt reached no majority: %s)", name, nodeFailures(qe, nodes))
		}
		return nil, interrupted(ctx, "while waiting for lock %q", name)
	case noQuorum:
		// The library returns a QuorumError only when the nodes that failed
		// left too few answers to decide: a majority that refused is
		// reported as plain ErrNotAcquired.
		return nil, fail(exitRedis, "lock %q: too many Redis nodes failed to reach a majority (%d of %d granted, %d needed): %s",
			name, qe.Held, len(qe.Nodes), qe.Need, nodeFailures(qe, nodes))
	case errors.Is(err, dlock.ErrWrongType):
		// A name used as a lock and as a semaphore, or a key another
		// program wrote: a configuration error, not Redis failing.
		return nil, &cliError{code: exitConfig, err: err}
	case errors.Is(err, dlock.ErrNotAcquired) && h.rw != nil && h.rw.Write():
		return nil, fail(exitNotAcquired, "read-write lock %q is held (by readers or a writer), or others wait ahead", name)
	case errors.Is(err, dlock.ErrNotAcquired) && h.rw != nil:
		return nil, fail(exitNotAcquired, "read-write lock %q is held by a writer, or others wait ahead", name)
	case errors.Is(err, dlock.ErrNotAcquired) && h.sem != nil:
		return nil, fail(exitNotAcquired, "all %d permits of semaphore %q are held, or others wait ahead", h.sem.Permits(), name)
	case errors.Is(err, dlock.ErrNotAcquired):
		if na, ok := errors.AsType[*dlock.NotAcquiredError](err); ok && na.Meta != "" {
			return nil, fail(exitNotAcquired, "lock %q is held by another holder, %s", name, strconv.Quote(na.Meta))
		}
		return nil, fail(exitNotAcquired, "lock %q is held by another holder", name)
	}
	return nil, &cliError{code: exitRedis, err: err}
}

// fenceError is the error of a fence that could not be issued for the
// lock just acquired, with the exit code of a failed acquire: 5 if the
// lease no longer held the lock, 4 if nodes failed, 128+N if a signal
// interrupted it.
func fenceError(ctx context.Context, name string, err error, nodes []string) error {
	qe, noQuorum := errors.AsType[*dlock.QuorumError](err)
	switch {
	case ctx.Err() != nil && errors.Is(err, context.Canceled):
		return interrupted(ctx, "while issuing the fence of lock %q", name)
	case errors.Is(err, dlock.ErrNotHeld):
		return fail(exitNotAcquired, "lock %q was lost before the command started (%v)", name, err)
	case noQuorum:
		return fail(exitRedis, "lock %q: too many Redis nodes failed to issue its fence (%d of %d granted, %d needed): %s",
			name, qe.Held, len(qe.Nodes), qe.Need, nodeFailures(qe, nodes))
	}
	return &cliError{code: exitRedis, err: err}
}

// nodeFailures names the nodes of qe that failed and why, on one line;
// nodes that answered that another holder holds the lock are no failure.
func nodeFailures(qe *dlock.QuorumError, nodes []string) string {
	var parts []string
	for i, err := range qe.Nodes {
		if err == nil || refused(err) {
			continue
		}
		node := fmt.Sprintf("node %d", i)
		if i < len(nodes) {
			node = nodes[i]
		}
		msg := strings.TrimPrefix(strings.ReplaceAll(err.Error(), "\n", " "), "dlock: ")
		parts = append(parts, node+": "+msg)
	}
	if len(parts) == 0 {
		return qe.Error()
	}
	return strings.Join(parts, "; ")
}

// refused reports whether a node's entry in a QuorumError is its answer
// that another holder holds the lock rather than a failure. The library does
// not export that error; its text is "held by another holder".
func refused(err error) bool {
	return errors.Is(err, dlock.ErrNotAcquired) || err.Error() == "held by another holder"
}

// jeopardySignals are the signals --jeopardy-signal takes ("": none).
var jeopardySignals = map[string]syscall.Signal{"": 0, "USR1": syscall.SIGUSR1, "USR2": syscall.SIGUSR2,
	"HUP": syscall.SIGHUP, "INT": syscall.SIGINT, "TERM": syscall.SIGTERM, "WINCH": syscall.SIGWINCH}

// jeopardySignalName is the name --jeopardy-signal takes for sig.
func jeopardySignalName(sig syscall.Signal) string {
	for name, s := range jeopardySignals {
		if s == sig {
			return name
		}
	}
	return sig.String()
}

// supervise runs argv, through a guardian (see guardian.go), while l is
// held; fence is l's fence, for argv's environment; jsig (0: none) goes to
// its group when the lease is at risk. It returns the exit code for the
// command's status and, if the lock was lost while it ran, why.
func supervise(l *dlock.Lock, fence int64, argv []string, ttl, grace time.Duration, jsig, rsig syscall.Signal, stdout, stderr io.Writer) (int, error) {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGTSTP, syscall.SIGCONT)
	defer signal.Stop(sigs)

	env := []string{
		"DLOCK_NAME=" + l.Name(),
		"DLOCK_KEY=" + l.Key(),
		"DLOCK_TOKEN=" + l.Token(),
		"DLOCK_FENCE=" + strconv.FormatInt(fence, 10),
	}
	// The guardian acts ttl/10 before the lease ends, and hears of each
	// extension within ttl/10. With an extension every ttl/3, a lease in
	// good health has at least 2/3 of the TTL left, so the margin is only
	// reached when dlock cannot extend.
	margin := guardianMargin(ttl)
	g, code := startGuardian(l, argv, env, grace, margin, stdout, stderr)
	if g == nil {
		return code, nil
	}
	defer g.close()
	beat := time.NewTicker(margin)
	defer beat.Stop()

	p := newLossPath(l, g, grace, margin, stderr)
	var jeop <-chan struct{} // the lease's Jeopardy while jsig is to be sent
	if jsig != 0 {
		jeop = l.Jeopardy()
	}
	var asked <-chan string // the lease's release requests while rsig is to be sent
	if rsig != 0 {
		asked = l.ReleaseRequests()
	}
	// resume continues the group after dlock was stopped, unless the lease
	// ran out meanwhile: then the loss path applies (it continues the group
	// too, to deliver its SIGTERM).
	resume := func() {
		if p.lost != nil && errors.Is(l.Err(), dlock.ErrNotHeld) {
			p.onLost()
			return
		}
		g.signal(syscall.SIGCONT)
	}
	for {
		select {
		case err := <-g.exited:
			if ee, ok := errors.AsType[*exec.ExitError](err); ok {
				if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
					// The guardian exits with CMD's status; killed itself,
					// it leaves CMD's group unwatched.
					g.signal(syscall.SIGKILL)
					fmt.Fprintf(stderr, "dlock: the guardian process was killed by %v; killed the command's process group\n", signalName(ws.Signal()))
				}
			}
			return exitCode(err), p.err
		case sig := <-sigs:
			switch sig {
			case syscall.SIGTSTP:
				// Ctrl-Z: CMD's group (which the terminal's SIGTSTP does not
				// reach) stops with dlock, which cannot extend the lease
				// while stopped. SIGSTOP for both: no handler can delay it,
				// and it works in an orphaned process group too.
				g.signal(syscall.SIGSTOP)
				stopSelf()
				resume()
			case syscall.SIGCONT:
				resume()
			default:
				g.signal(sig.(syscall.Signal))
			}
		case <-beat.C:
			g.beat(l)
			if jsig != 0 && jeop == nil && l.Err() == nil {
				if j := l.Jeopardy(); isOpen(j) {
					jeop = j // the lease recovered: the next episode is told too
				}
			}
		case <-jeop:
			jeop = nil
			if l.Err() == nil { // (a loss takes the loss path)
				fmt.Fprintf(stderr, "dlock: lock %q is at risk: an extension failed; sent SIG%s to the command\n", l.Name(), jeopardySignalName(jsig))
				g.signal(jsig)
			}
		case reason := <-asked:
			if l.Err() == nil {
				fmt.Fprintf(stderr, "dlock: lock %q: release asked for (%q); sent SIG%s to the command\n", l.Name(), reason, jeopardySignalName(rsig))
				g.signal(rsig)
			}
		case <-p.lost:
			p.onLost()
		case <-p.capped:
			p.atCap()
		case <-p.kill:
			p.kill = nil
			g.signal(syscall.SIGKILL)
		}
	}
}

// lossPath is the loss path of supervise: what starts it (the lock's
// loss, or its max hold coming near), why it was taken, and when SIGKILL
// follows.
type lossPath struct {
	l      *dlock.Lock
	g      *guardian
	grace  time.Duration
	stderr io.Writer

	lost   <-chan struct{}  // the lock's Done, until the path is taken
	capped <-chan time.Time // the command's max hold (nil without one)
	kill   <-chan time.Time // SIGKILL, once the path is taken
	err    error            // why it was taken: the loss, or ErrMaxHold
}

// newLossPath returns the loss path of l, whose guardian is g and acts
// margin before the lease ends. With a max hold, CMD is terminated at its
// own, margin before the lease's cap (see runOptions), with the lease still
// held: the guardian, which hears of no extension past the cap, would stop
// the group at that moment. The lock is released when CMD exits, or at
// the cap.
func newLossPath(l *dlock.Lock, g *guardian, grace, margin time.Duration, stderr io.Writer) *lossPath {
	p := &lossPath{l: l, g: g, grace: grace, stderr: stderr, lost: l.Done()}
	if deadline, ok := l.Deadline(); ok {
		p.capped = time.After(max(time.Until(deadline)-margin, 0))
	}
	return p
}

// terminate takes the loss path for err: the guardian enforces no more
// deadlines, and CMD's group gets SIGTERM, and SIGKILL after grace.
func (p *lossPath) terminate(err error, format string, args ...any) {
	p.terminateKilling(p.grace, err, format, args...)
}

// terminateKilling is terminate with SIGKILL after kill.
func (p *lossPath) terminateKilling(kill time.Duration, err error, format string, args ...any) {
	p.err, p.lost, p.capped = err, nil, nil
	p.g.lost()
	fmt.Fprintf(p.stderr, format+"; sending SIGTERM, SIGKILL in %v\n", append(args, kill.Round(time.Millisecond))...)
	p.g.signal(syscall.SIGTERM)
	p.g.signal(syscall.SIGCONT) // a stopped group would not see the SIGTERM
	p.kill = time.After(kill)
}

// onLost takes the loss path if the lock was lost (or ended at its max hold).
func (p *lossPath) onLost() {
	p.lost = nil
	switch err := p.l.Err(); {
	case errors.Is(err, dlock.ErrMaxHold):
		p.terminate(err, "dlock: lock %q reached its max hold", p.l.Name())
	case errors.Is(err, dlock.ErrNotHeld):
		p.terminate(err, "dlock: lock %q lost (%v)", p.l.Name(), err)
	}
}

// releaseRetry is the pause between tries of run's release.
const releaseRetry = 100 * time.Millisecond

// atCap takes the loss path at the command's max hold. The lease cannot
// be extended past its cap, so SIGKILL comes after grace but no later
// than the cap: a command slow to act on SIGTERM must not run on once
// another holder can take the lock.
func (p *lossPath) atCap() {
	deadline, _ := p.l.Deadline()
	left := max(time.Until(deadline), 0)
	p.terminateKilling(min(p.grace, left), dlock.ErrMaxHold, "dlock: lock %q reached its max hold (it is released when the command exits, in %v at the latest)",
		p.l.Name(), left.Round(time.Millisecond))
}

// stopSelf stops dlock with SIGSTOP and returns once it is continued. The
// signal goes to the calling thread (tgkill), which stops before it runs
// Go code again; kill(getpid()) may have another thread take the signal and
// return first, and dlock would continue the command before stopping.
func stopSelf() {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	syscall.Tgkill(os.Getpid(), syscall.Gettid(), syscall.SIGSTOP)
}

// exitCode maps the command's wait status to an exit code.
func exitCode(err error) int {
	if err == nil {
		return exitOK
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	return exitFailure
}

// isOpen reports whether ch is still open.
func isOpen(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return false
	default:
		return true
	}
}
