package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/dlockio/dlock"
)

func cmdInspect(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("inspect", stderr, "inspect [flags] NAME...\n\nShows each lock's holder token and metadata (hostname:pid by default), remaining\nTTL and last fence.")
	to := targetFlags(fs)
	asJSON := fs.Bool("json", false, "print JSON, one object per lock (ttl_ms: null when free, -1 when held with no expiry)")
	delay := delayFlag(fs)
	names, code := parseMixed(fs, args)
	if code >= 0 {
		return code
	}
	if len(names) == 0 {
		fmt.Fprintln(stderr, "dlock inspect: missing NAME (see 'dlock inspect -h')")
		return exitUsage
	}
	if *delay < 0 {
		fmt.Fprintln(stderr, "dlock inspect: --lock-delay must not be negative")
		return exitUsage
	}
	c, closeFn, err := to.client(ctx, dlock.LockDelay(*delay))
	if err != nil {
		return report(stderr, err)
	}
	defer closeFn()
	var infos []dlock.Info
	for _, name := range names {
		info, err := c.Inspect(ctx, name)
		if err != nil {
			return report(stderr, libError(err))
		}
		infos = append(infos, info)
	}
	return printInfos(stdout, infos, *asJSON)
}

func cmdList(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("list", stderr, "list [flags] [PATTERN]\n\nLists held locks whose names match the glob PATTERN (default *), using SCAN\n(on every node of a quorum). Keys under the prefix that dlock did not write\n(another program's) show as HELD foreign.")
	to := targetFlags(fs)
	asJSON := fs.Bool("json", false, "print JSON, one object per lock (ttl_ms: null when free, -1 when held with no expiry)")
	delay := delayFlag(fs)
	patterns, code := parseMixed(fs, args)
	if code >= 0 {
		return code
	}
	if len(patterns) > 1 {
		fmt.Fprintln(stderr, "dlock list: at most one PATTERN")
		return exitUsage
	}
	if *delay < 0 {
		fmt.Fprintln(stderr, "dlock list: --lock-delay must not be negative")
		return exitUsage
	}
	c, closeFn, err := to.client(ctx, dlock.LockDelay(*delay))
	if err != nil {
		return report(stderr, err)
	}
	defer closeFn()
	pattern := "" // all
	if len(patterns) == 1 {
		pattern = patterns[0]
	}
	infos, err := c.List(ctx, pattern)
	if err != nil {
		return report(stderr, libError(err))
	}
	return printInfos(stdout, infos, *asJSON)
}

const releaseHelp = `release --token TOKEN [-n N | --read | --write] NAME
release --force NAME
release --ask [--reason TEXT] NAME

With --token, ends the lease of TOKEN (printed by 'dlock acquire') on NAME,
as its holder would; pass the -n, --read or --write that acquired it. Exit 6
if the lease has already ended.

With --force, deletes the lock NAME whoever holds it, and wakes its waiters.

With --ask, asks the holders of NAME to release it, for --reason, and
releases nothing: a 'dlock run' holding it passes the request on to its
command as a signal (--request-signal, SIGTERM by default); a program hears
it on Lock.ReleaseRequests. Only holders listening at that moment hear it.

WARNING: if the holder is still running, it keeps running until its next
extension notices, and overlaps with the next holder meanwhile. Use it only
for a lock whose holder is known to be gone; a dead holder's lock also
frees itself when its TTL runs out.`

func cmdRelease(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("release", stderr, releaseHelp)
	to := targetFlags(fs)
	force := fs.Bool("force", false, "delete the lock whoever holds it (operators only)")
	ask := fs.Bool("ask", false, "ask the holders to release the lock, and release nothing")
	reason := fs.String("reason", "", "why --ask asks (what the holder is told)")
	token := fs.String("token", "", "end the lease of this `token` (dlock acquire), as its holder")
	kf := kindFlags(fs)
	name, code := oneName("release", fs, args, stderr)
	if code >= 0 {
		return code
	}
	switch {
	case *force && *token != "" || *ask && (*force || *token != ""):
		fmt.Fprintln(stderr, "dlock release: one of --force, --token and --ask")
		return exitUsage
	case *ask:
		return askRelease(ctx, name, *reason, to, stdout, stderr)
	case *token != "":
		return releaseByToken(ctx, name, *token, kf, to, stdout, stderr)
	case !*force:
		fmt.Fprintln(stderr, "dlock release: refusing without --token, --force or --ask (see 'dlock release -h')")
		return exitUsage
	}
	names := []string{name}
	c, closeFn, err := to.client(ctx)
	if err != nil {
		return report(stderr, err)
	}
	defer closeFn()
	deleted, err := c.ForceRelease(ctx, names[0])
	if err != nil {
		return report(stderr, libError(err))
	}
	if deleted {
		fmt.Fprintf(stdout, "released %q\n", names[0])
	} else {
		fmt.Fprintf(stdout, "%q was not held\n", names[0])
	}
	return exitOK
}

// askRelease asks the holders of name to release it, for reason.
func askRelease(ctx context.Context, name, reason string, to *target, stdout, stderr io.Writer) int {
	c, closeFn, err := to.client(ctx)
	if err != nil {
		return report(stderr, err)
	}
	defer closeFn()
	if err := c.RequestRelease(ctx, name, reason); err != nil {
		return report(stderr, libError(err))
	}
	fmt.Fprintf(stdout, "asked the holders of %q to release it\n", name)
	return exitOK
}

// delayFlag defines --lock-delay on fs: the holders' lock-delay, by which
// a lock held only by leases with no more than it left shows as in it.
func delayFlag(fs *flag.FlagSet) *time.Duration {
	return fs.Duration("lock-delay", 0, "the holders' LockDelay: a lock whose leases have at most this `long` left shows HELD delay (JSON in_delay): its holders' validity has ended")
}

// libError gives a library error its exit code.
func libError(err error) error {
	if errors.Is(err, dlock.ErrInvalid) {
		return &cliError{code: exitUsage, err: err}
	}
	return &cliError{code: exitRedis, err: err}
}

type infoJSON struct {
	Name    string       `json:"name"`
	Key     string       `json:"key"`
	Held    bool         `json:"held"`
	Type    string       `json:"type"`
	Foreign bool         `json:"foreign,omitempty"` // the key holds a value dlock does not write (see foreign)
	Token   string       `json:"token,omitempty"`
	Meta    string       `json:"meta,omitempty"`
	Owners  []ownerJSON  `json:"owners,omitempty"`
	Permits []permitJSON `json:"permits,omitempty"`
	RWHolds []rwHoldJSON `json:"rw_holds,omitempty"`
	TTLMS   *int64       `json:"ttl_ms"`             // null when free, -1 when held with no expiry
	InDelay bool         `json:"in_delay,omitempty"` // held only by leases in lock-delay (--lock-delay)
	Queued  int          `json:"queued"`
	Fence   int64        `json:"fence"`
}

type permitJSON struct {
	Token string `json:"token"`
	Count int    `json:"count"` // the permits the hold has: 1, or n (AcquireN)
	TTLMS int64  `json:"ttl_ms"`
	Meta  string `json:"meta,omitempty"`
}

type rwHoldJSON struct {
	Token string `json:"token"`
	TTLMS int64  `json:"ttl_ms"`
	Write bool   `json:"write"`
	Meta  string `json:"meta,omitempty"`
}

type ownerJSON struct {
	ID    string   `json:"id"`
	Holds int64    `json:"holds"`
	Meta  []string `json:"meta,omitempty"`
}

// cell returns s for a table cell: quoted, with escapes, if it holds a
// control character (a newline or tab in a lock name would break the table).
func cell(s string) string {
	if strings.ContainsFunc(s, unicode.IsControl) {
		return strconv.Quote(s)
	}
	return s
}

// foreign says what the key of in holds when it is not a lock dlock wrote
// — a value another program put under the prefix — or returns "". A
// string cannot be told from a plain lock's token: it counts as a lock. A
// hash without a reentrant lock's owner is foreign, and so is a sorted set
// without expiry (a semaphore's key always expires at its last permit's
// deadline). dlock does not take, extend or release such a key.
func foreign(in dlock.Info) string {
	switch {
	case !in.Held || in.Type == "string":
		return ""
	case in.Type == "hash":
		if len(in.Owners) == 0 {
			return "a hash without a reentrant lock's owner"
		}
		return ""
	case in.Type == "zset":
		if in.TTL < 0 {
			return "a sorted set without expiry"
		}
		return ""
	}
	return "a " + in.Type
}

// jsonOf is the JSON object of in.
func jsonOf(in dlock.Info) infoJSON {
	j := infoJSON{Name: in.Name, Key: in.Key, Held: in.Held, Type: in.Type, Foreign: foreign(in) != "",
		Token: in.Token, Meta: in.Meta, Queued: in.Queued, Fence: in.Fence, InDelay: in.InDelay}
	if in.Held {
		ms := int64(-1)
		if in.TTL >= 0 {
			ms = in.TTL.Milliseconds()
		}
		j.TTLMS = &ms
	}
	for _, o := range in.Owners {
		j.Owners = append(j.Owners, ownerJSON{o.ID, o.Holds, o.Meta})
	}
	for _, p := range in.Permits {
		j.Permits = append(j.Permits, permitJSON{p.Token, max(p.Count, 1), p.TTL.Milliseconds(), p.Meta})
	}
	for _, h := range in.RWHolds {
		j.RWHolds = append(j.RWHolds, rwHoldJSON{h.Token, h.TTL.Milliseconds(), h.Write, h.Meta})
	}
	return j
}

// row is one lock in a table, each cell ready to print.
type row struct {
	name, held, ttl, queued, fence, meta, holder string
}

// rowOf is the row of in: a foreign key is HELD "foreign", and its HOLDER
// says what it holds.
func rowOf(in dlock.Info) row {
	r := row{name: cell(in.Name), held: "no", ttl: "-", queued: strconv.Itoa(in.Queued),
		fence: strconv.FormatInt(in.Fence, 10), meta: metaColumn(in.Meta)}
	switch {
	case in.Held && in.TTL < 0:
		r.held, r.ttl = "yes", "none"
	case in.Held:
		r.held, r.ttl = "yes", in.TTL.Round(time.Millisecond).String()
	}
	if in.InDelay {
		r.held = "delay" // held by no live holder: see --lock-delay
	}
	if why := foreign(in); why != "" {
		r.held, r.holder = "foreign", "not a dlock lock: "+why
		return r
	}
	token := in.Token
	for _, o := range in.Owners { // a reentrant lock: owner ×holds
		token = strings.TrimSpace(fmt.Sprintf("%s %s×%d", token, o.ID, o.Holds))
	}
	if len(in.Permits) > 0 { // a semaphore: its holds' tokens, ×n for a hold of n permits
		tokens, n := make([]string, len(in.Permits)), 0
		for i, p := range in.Permits {
			tokens[i] = p.Token
			if p.Count > 1 {
				tokens[i] += "×" + strconv.Itoa(p.Count)
			}
			n += max(p.Count, 1)
		}
		token = fmt.Sprintf("%s: %s", plural(n, "permit"), strings.Join(tokens, " "))
	}
	if len(in.RWHolds) > 0 { // a read-write lock: its write, or its reads
		token = rwHolders(in.RWHolds)
	}
	r.holder = cmp.Or(cell(token), "-")
	return r
}

const infoHeader = "NAME\tHELD\tTTL\tQUEUED\tFENCE\tMETA\tHOLDER"

func (r row) String() string {
	return strings.Join([]string{r.name, r.held, r.ttl, r.queued, r.fence, r.meta, r.holder}, "\t")
}

func printInfos(w io.Writer, infos []dlock.Info, asJSON bool) int {
	if asJSON {
		enc := json.NewEncoder(w)
		for _, in := range infos {
			enc.Encode(jsonOf(in))
		}
		return exitOK
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, infoHeader)
	for _, in := range infos {
		fmt.Fprintln(tw, rowOf(in))
	}
	if len(infos) == 0 {
		fmt.Fprintln(tw, noRows)
	}
	tw.Flush()
	return exitOK
}

// noRows is the row of a table without locks.
const noRows = "(none)"

// plural returns "1 noun" or "n nouns".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// rwHolders describes a read-write lock's holds for the table: "write:
// <token>", or "<n> reads: <token> …".
func rwHolders(hs []dlock.RWHold) string {
	tokens := make([]string, len(hs))
	write := false
	for i, h := range hs {
		tokens[i], write = h.Token, write || h.Write
	}
	switch {
	case write && len(hs) == 1:
		return "write: " + tokens[0]
	}
	return plural(len(hs), "read") + ": " + strings.Join(tokens, " ")
}

// metaColumn shows holder metadata in a column: "-" for none, quoted if it
// holds a space or a quote, which would blur the columns.
func metaColumn(meta string) string {
	switch {
	case meta == "":
		return "-"
	case strings.ContainsAny(meta, " \t\"") || !strconv.CanBackquote(meta):
		return strconv.Quote(meta)
	}
	return meta
}
