package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dlockio/dlock"
)

const watchHelp = `watch [flags] PATTERN

Shows the locks whose names match the glob PATTERN (* for all), refreshed
every --interval until Ctrl-C (exit 130) or --count refreshes: holder
token and metadata, remaining TTL, waiters queued, last fence, and
acquisitions per second. On a terminal it redraws one screen; otherwise
(a pipe, a file) it prints one plain block per refresh, or with --json one
JSON object per refresh. Keys under the prefix that dlock did not write
show as HELD foreign. A lock seen held earlier in the watch shows as free
(HELD no) for 30 refreshes after it was freed.

QUEUED counts the waiters in a fair lock's or a semaphore's queue; waiters
of a lock that is not fair, of a reentrant lock or of a quorum do not queue
and are not counted. A waiter that died stays counted until it is skipped.

ACQ/S counts the leases that are new since the previous refresh — a plain
lock's holder token, a semaphore's permit tokens, a reentrant lock's owner
— divided by the time between the refreshes. It misses every lease that
began and ended between two refreshes (so with --interval 1s it shows at
most 1/s for a lock, and N/s for N permits), and a reentrant owner's
re-entries. The fence does not count acquisitions: it is issued only when
a holder asks for one, and it follows the server's clock in microseconds.

Each refresh reads the locks with SCAN and one read per lock (on every
node of a quorum, every master of a Cluster). A refresh that fails shows
its error and the watch goes on; with --count, the exit status is 4 if the
last refresh failed.`

// watchForget is how many refreshes a lock freed during a watch still shows.
const watchForget = 30

// minWatchInterval keeps a watch from scanning Redis in a tight loop.
const minWatchInterval = 100 * time.Millisecond

func cmdWatch(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("watch", stderr, watchHelp)
	to := targetFlags(fs)
	interval := fs.Duration("interval", time.Second, "time between refreshes (at least 100ms)")
	count := fs.Int("count", 0, "stop after `N` refreshes (0: until interrupted)")
	asJSON := fs.Bool("json", false, "print one JSON object per refresh: time, pattern, locks (as list --json, with acq_per_s), error")
	patterns, code := parseMixed(fs, args)
	if code >= 0 {
		return code
	}
	switch {
	case len(patterns) != 1:
		fmt.Fprintln(stderr, "dlock watch: expected exactly one PATTERN, such as 'jobs:*' or '*' (see 'dlock watch -h')")
		return exitUsage
	case *interval < minWatchInterval:
		fmt.Fprintf(stderr, "dlock watch: --interval %v: must be at least %v\n", *interval, minWatchInterval)
		return exitUsage
	case *count < 0:
		fmt.Fprintf(stderr, "dlock watch: --count %d: must be 0 (until interrupted) or more\n", *count)
		return exitUsage
	}
	if err := checkPattern(patterns[0]); err != nil {
		fmt.Fprintf(stderr, "dlock watch: %v\n", err)
		return exitUsage
	}
	c, closeFn, err := to.client(ctx)
	if err != nil {
		return report(stderr, err)
	}
	defer closeFn()
	w := &watcher{c: c, pattern: patterns[0], interval: *interval, asJSON: *asJSON,
		screen: !*asJSON && isTerminal(stdout), out: stdout, seen: map[string]*seenLock{}}
	return w.loop(ctx, *count, stderr)
}

// checkPattern rejects a glob pattern that is surely a typo: empty, with
// an unclosed [ class, or ending in a lone backslash. Redis would take
// them and match nothing, or not what was meant.
func checkPattern(p string) error {
	if p == "" {
		return fmt.Errorf("empty PATTERN: use '*' for all locks")
	}
	for i := 0; i < len(p); i++ {
		switch p[i] {
		case '\\':
			if i == len(p)-1 {
				return fmt.Errorf("PATTERN %q ends in a lone backslash (write \\\\ for a backslash)", p)
			}
			i++
		case '[':
			end := strings.IndexByte(p[i+1:], ']')
			if end < 0 {
				return fmt.Errorf("PATTERN %q has an unclosed [ (write \\[ for a bracket)", p)
			}
			i += 1 + end
		}
	}
	return nil
}

// isTerminal reports whether w is a terminal (a character device): a
// watch redraws the screen there, and prints plain blocks elsewhere.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0 && os.Getenv("TERM") != "dumb"
}

// watcher is the state of one dlock watch between refreshes.
type watcher struct {
	c        *dlock.Client
	pattern  string
	interval time.Duration
	asJSON   bool
	screen   bool // redraw in place with escape codes
	out      io.Writer

	refreshes int
	last      time.Time            // when the previous refresh read the locks
	seen      map[string]*seenLock // by name: locks seen held in this watch
}

// seenLock is what a watch remembers of a lock from refresh to refresh.
type seenLock struct {
	leases map[string]bool // the lease tokens (or reentrant owners) it had
	info   dlock.Info      // the last state read while it was held
	freed  int             // refreshes since it was last seen held
}

// loop refreshes until count refreshes are done (0: until ctx ends).
func (w *watcher) loop(ctx context.Context, count int, stderr io.Writer) int {
	tick := time.NewTicker(w.interval)
	defer tick.Stop()
	failed := false
	for n := 1; count == 0 || n <= count; n++ {
		if n > 1 {
			select {
			case <-tick.C:
			case <-ctx.Done():
				return report(stderr, interrupted(ctx, "(the watch stopped)"))
			}
		}
		infos, err := w.read(ctx)
		if ctx.Err() != nil {
			return report(stderr, interrupted(ctx, "(the watch stopped)"))
		}
		if errors.Is(err, dlock.ErrInvalid) {
			return report(stderr, libError(err))
		}
		failed = err != nil
		if err := w.show(infos, err); err != nil {
			return report(stderr, fail(exitFailure, "watch: cannot write the view: %v", err))
		}
	}
	if failed {
		return exitRedis
	}
	return exitOK
}

// read lists the locks, bounded in time so that a Redis that stalls shows
// as an error, and abandoned when ctx ends: go-redis does not give up a
// blocked read when its ctx is cancelled, and Ctrl-C must not wait for
// Redis (closing the client ends the call).
func (w *watcher) read(ctx context.Context) ([]dlock.Info, error) {
	rctx, cancel := context.WithTimeout(ctx, max(2*w.interval, 5*time.Second))
	defer cancel()
	type listed struct {
		infos []dlock.Info
		err   error
	}
	done := make(chan listed, 1)
	go func() {
		infos, err := w.c.List(rctx, w.pattern)
		done <- listed{infos, err}
	}()
	select {
	case r := <-done:
		return r.infos, r.err
	case <-rctx.Done():
		return nil, rctx.Err()
	}
}

// watchedLock is one lock of a refresh: its state and its acquisitions
// per second since the previous refresh (NaN on the first).
type watchedLock struct {
	info dlock.Info
	rate float64
}

// update folds a refresh's locks into what the watch remembers, and
// returns the locks to show: those held now, and those freed within the
// last watchForget refreshes.
func (w *watcher) update(infos []dlock.Info, now time.Time) []watchedLock {
	elapsed := now.Sub(w.last).Seconds()
	first := w.last.IsZero()
	w.last = now
	held := make(map[string]bool, len(infos))
	var locks []watchedLock
	for _, in := range infos {
		held[in.Name] = true
		leases := leasesOf(in)
		s := w.seen[in.Name]
		if s == nil {
			s = &seenLock{}
			w.seen[in.Name] = s
		}
		fresh := 0
		for l := range leases {
			if !s.leases[l] {
				fresh++
			}
		}
		rate := math.NaN() // unknown: no earlier refresh, or not a lock
		if !first && elapsed > 0 && foreign(in) == "" {
			rate = float64(fresh) / elapsed
		}
		s.leases, s.info, s.freed = leases, in, 0
		locks = append(locks, watchedLock{in, rate})
	}
	for name, s := range w.seen {
		if held[name] {
			continue
		}
		if s.freed++; s.freed > watchForget {
			delete(w.seen, name)
			continue
		}
		s.leases = nil
		locks = append(locks, watchedLock{dlock.Info{Name: name, Key: s.info.Key, Type: "none", Fence: s.info.Fence}, 0})
	}
	slices.SortFunc(locks, func(a, b watchedLock) int { return strings.Compare(a.info.Name, b.info.Name) })
	return locks
}

// leasesOf returns what tells in's leases apart: a plain lock's token, a
// semaphore's permit tokens, a reentrant lock's owners.
func leasesOf(in dlock.Info) map[string]bool {
	m := map[string]bool{}
	if in.Token != "" {
		m[in.Token] = true
	}
	for _, p := range in.Permits {
		m[p.Token] = true
	}
	for _, o := range in.Owners {
		m[o.ID] = true
	}
	return m
}

// show prints one refresh: the locks of infos, or the error that read them.
func (w *watcher) show(infos []dlock.Info, readErr error) error {
	now := time.Now()
	w.refreshes++
	var locks []watchedLock
	if readErr == nil {
		locks = w.update(infos, now)
	}
	if w.asJSON {
		return w.showJSON(now, locks, readErr)
	}
	var b strings.Builder
	held, queued, total := 0, 0, 0.0
	for _, l := range locks {
		if l.info.Held && foreign(l.info) == "" {
			held++
		}
		queued += l.info.Queued
		if !math.IsNaN(l.rate) {
			total += l.rate
		}
	}
	fmt.Fprintf(&b, "%s  %s  every %v  refresh %d: %d held, %d queued, %s acq/s\n",
		now.Format("15:04:05"), cell(w.pattern), w.interval, w.refreshes, held, queued, rateText(total, w.refreshes == 1))
	if readErr != nil {
		fmt.Fprintf(&b, "error: %s\n", strings.ReplaceAll(strings.TrimPrefix(readErr.Error(), "dlock: "), "\n", "; "))
	} else {
		tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, infoHeader+"\tACQ/S")
		for _, l := range locks {
			fmt.Fprintf(tw, "%s\t%s\n", rowOf(l.info), rateText(l.rate, false))
		}
		if len(locks) == 0 {
			fmt.Fprintln(tw, noRows)
		}
		tw.Flush()
	}
	text := b.String()
	if w.screen {
		// Home, each line cleared to its end, then the rest of the screen:
		// a redraw without flicker.
		text = "\x1b[H" + strings.ReplaceAll(text, "\n", "\x1b[K\n") + "\x1b[J"
	} else {
		text += "\n"
	}
	_, err := io.WriteString(w.out, text)
	return err
}

// rateText shows acquisitions per second: "-" when there is no previous
// refresh to compare with.
func rateText(rate float64, first bool) string {
	if first || math.IsNaN(rate) {
		return "-"
	}
	return fmt.Sprintf("%.1f", rate)
}

type watchJSON struct {
	Time    string          `json:"time"`
	Refresh int             `json:"refresh"`
	Pattern string          `json:"pattern"`
	Locks   []watchLockJSON `json:"locks"`
	Error   string          `json:"error,omitempty"`
}

type watchLockJSON struct {
	infoJSON
	AcqPerS *float64 `json:"acq_per_s"` // null on the first refresh
}

func (w *watcher) showJSON(now time.Time, locks []watchedLock, readErr error) error {
	j := watchJSON{Time: now.Format(time.RFC3339Nano), Refresh: w.refreshes, Pattern: w.pattern, Locks: []watchLockJSON{}}
	if readErr != nil {
		j.Error = readErr.Error()
	}
	for _, l := range locks {
		lj := watchLockJSON{infoJSON: jsonOf(l.info)}
		if !math.IsNaN(l.rate) {
			lj.AcqPerS = &l.rate
		}
		j.Locks = append(j.Locks, lj)
	}
	return json.NewEncoder(w.out).Encode(j)
}
