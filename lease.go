package dlock

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"
)

// This file holds what one acquisition asks for: the per-call options
// (LockOption), and the holder metadata that the lease's token carries.

// LockOption configures one call; an invalid one fails it with [ErrInvalid].
type LockOption interface {
	applyLease(*lease)
}

// LeaseOption is given to New as a default, or to a call as an override.
type LeaseOption struct {
	set func(*lease)
}

func (l LeaseOption) applyLease(p *lease) {
	if l.set == nil {
		p.invalid("a zero LeaseOption is not an option: make one with LeaseTTL, MaxWait and the like")
		return
	}
	l.set(p)
}

func (l LeaseOption) applyOption(o *options) {
	l.applyLease(&o.lease)
	o.invalidIf(o.lease.firstInvalid != "", "%s", o.lease.firstInvalid) // (New fails: the Client's lease is never used)
}

// lease is what one acquisition asks for: the Client's defaults, overridden
// by the call's LockOptions.
type lease struct {
	ttl     time.Duration // the lease time
	wait    time.Duration // how long Acquire may wait; < 0: as long as its ctx allows
	maxHold time.Duration // how long the lease may be held; 0: no limit
	delay   time.Duration // the lock-delay: Redis keeps the lease this long past its validity
	watch   bool          // WatchLoss: the watchdog checks at once when the lease may have ended
	dlCheck time.Duration // DeadlockCheck: how long a waiter that holds leases waits before it looks for a deadlock; 0: never
	meta    string        // the holder metadata
	suffix  string        // what the token carries of it: "." and meta escaped, or ""

	waitSet bool   // MaxWait was given for this call
	metaSet bool   // HolderMeta was given for this call
	resume  string // Resume's token: take over that lease instead of a new one
	// waitAll is, for a part of an AcquireAll with a wait bound, that bound:
	// wait is what is left of it (partWait).
	waitAll time.Duration

	firstInvalid // the call fails with it, wrapping ErrInvalid
}

// badOption is an option that fails the call it is given to (or New) with
// the text of format and args, as the caller wrote the option.
func badOption(format string, args ...any) LeaseOption {
	return LeaseOption{func(p *lease) { p.invalid(format, args...) }}
}

// asked is the lease time Redis is asked for to give a validity of hold:
// hold and the lock-delay, or the largest Duration if that overflows (as
// long as Redis can keep it).
func (p *lease) asked(hold time.Duration) time.Duration {
	if hold > math.MaxInt64-p.delay {
		return math.MaxInt64
	}
	return hold + p.delay
}

// LeaseTTL sets the lease time (default [DefaultTTL]): at least [MinTTL], above
// the drift margin and, over a quorum, the node timeout.
func LeaseTTL(ttl time.Duration) LeaseOption {
	if ttl < MinTTL {
		return badOption("LeaseTTL(%v): the TTL must be at least %v", ttl, MinTTL)
	}
	return LeaseOption{func(p *lease) { p.ttl = ttl }}
}

// MaxWait bounds the wait (AcquireAll's as a whole), then [ErrNotAcquired]; 0
// makes one attempt. [ErrInvalid]: d < 0, or d > 0 on a Try call.
func MaxWait(d time.Duration) LeaseOption {
	if d < 0 {
		return badOption("MaxWait(%v): the wait must not be negative", d)
	}
	return LeaseOption{func(p *lease) { p.wait, p.waitSet = d, true }}
}

// HolderMeta sets the holder metadata, readable by all (default "hostname:pid";
// "": none): UTF-8, ≤ [MaxMetaLen] bytes, no control characters.
func HolderMeta(meta string) LeaseOption {
	if why := badMeta(meta); why != "" {
		return badOption("HolderMeta(%q): %s", meta, why)
	}
	suffix := metaSuffix(meta)
	return LeaseOption{func(p *lease) { p.meta, p.suffix, p.metaSet = meta, suffix, true }}
}

// Resume takes over the live lease of token (a [Lock.Token]) with a new fence
// (a leadership keeps its term's); [ErrNotHeld] if it ended. See
// docs/resume.md.
func Resume(token string) LockOption {
	if why := notToken(token); why != "" {
		return badOption("Resume(%q): not a lease token: %s", token, why)
	}
	return LeaseOption{func(p *lease) { p.resume = token }}
}

// notToken says why s is not a lease token (see leaseToken): a kind's mark
// if any, 22 base64url characters, then the metadata part, escaped (see
// metaSuffix), of metadata HolderMeta accepts; "" if it is one.
func notToken(s string) string {
	random, suffix, dot := strings.Cut(strings.TrimPrefix(s, markOf(s)), string(metaSep))
	switch {
	case len(random) != 22 || strings.ContainsFunc(random, func(r rune) bool { return !strings.ContainsRune(base64URL, r) }), dot && suffix == "":
		return "a kind's mark if any (\"e:\"), 22 base64url characters, then '.' and the metadata if any"
	case strings.ContainsFunc(suffix, func(r rune) bool { return r <= ' ' || r >= 0x7f || r == '{' || r == '}' }):
		return "its metadata part holds a character a token never does"
	}
	if why := badMeta(metaOf(s)); why != "" {
		return "its metadata " + why
	}
	return ""
}

// MaxHold caps how long a lease is held (default 0: none; per call 0 lifts the
// Client's; else ≥ [MinTTL]); at the cap it is lost ([ErrMaxHold]) and
// released.
func MaxHold(d time.Duration) LeaseOption {
	if d < 0 || (d > 0 && d < MinTTL) {
		return badOption("MaxHold(%v): the max hold must be 0 (none) or at least %v", d, MinTTL)
	}
	return LeaseOption{func(p *lease) { p.maxHold = d }}
}

// LockDelay keeps a lease in Redis d past its validity (default 0): time for a
// holder that crashed or hung to stop. A release frees it. [ErrInvalid]: d < 0.
func LockDelay(d time.Duration) LeaseOption {
	if d < 0 {
		return badOption("LockDelay(%v): the delay must not be negative", d)
	}
	return LeaseOption{func(p *lease) { p.delay = d }}
}

// WatchLoss(true) checks the lease when a message says it may have ended
// (docs/guarantees.md); the acquisition returns once the lock's channel is
// subscribed, waiting min(TTL/3, 1s) at most. Default false; [ErrInvalid]
// without the watchdog.
func WatchLoss(on bool) LeaseOption {
	return LeaseOption{func(p *lease) { p.watch = on }}
}

const watchNeedsDog = "WatchLoss(true): the watchdog makes the checks, and WithAutoExtend(false) turned it off"

// leaseFor returns what an acquisition (op, see kind.acquireOp) of name
// asks for, with opts applied to the Client's defaults; try is set for
// TryAcquire. It returns an error wrapping ErrInvalid for an invalid option
// or one that does not apply.
func (c *Client) leaseFor(op, name string, opts []LockOption, try bool) (lease, error) {
	p := c.opts.lease
	for i, opt := range opts {
		if opt == nil {
			p.invalid("option %d is nil", i+1)
			continue
		}
		opt.applyLease(&p)
	}
	switch {
	case p.firstInvalid != "":
	case try && p.waitSet && p.wait > 0:
		p.invalid("MaxWait(%v): TryAcquire and TryDo make one attempt and never wait; use Acquire or Do", p.wait)
	// (The Client's own TTL passed the next two checks in New.)
	case c.opts.driftFor(p.ttl) >= p.ttl:
		p.invalid("LeaseTTL(%v): the TTL must be above the drift margin (%v)", p.ttl, c.opts.driftFor(p.ttl))
	case p.ttl <= c.opts.nodeTimeout: // (0 but over a quorum)
		p.invalid("LeaseTTL(%v): over a quorum the TTL must be above the per-node timeout (%v)", p.ttl, c.opts.nodeTimeout)
	case p.watch && !c.opts.autoExtend:
		p.invalid("%s", watchNeedsDog)
	case p.resume != "" && p.metaSet && p.suffix != suffixOf(p.resume):
		p.invalid("Resume: the metadata is the token's (%q), not %q", metaOf(p.resume), p.meta)
	case p.resume != "":
		p.meta, p.suffix = metaOf(p.resume), suffixOf(p.resume)
	}
	if p.firstInvalid != "" {
		return lease{}, fmt.Errorf("%w: %s %q: %s", ErrInvalid, op, name, p.firstInvalid)
	}
	return p, nil
}

// MaxMetaLen is the longest holder metadata accepted ([HolderMeta]), in bytes.
const MaxMetaLen = 128

// metaSep separates a token's random part from its metadata. The random
// part is base64url (A–Z, a–z, 0–9, '-', '_'), so the first '.' is it.
const metaSep = '.'

// badMeta says what is wrong with the holder metadata meta, or returns "".
func badMeta(meta string) string {
	i := strings.IndexFunc(meta, unicode.IsControl)
	switch {
	case len(meta) > MaxMetaLen:
		return fmt.Sprintf("is %d bytes, longer than %d", len(meta), MaxMetaLen)
	case !utf8.ValidString(meta):
		return "is not valid UTF-8"
	case i >= 0:
		r, _ := utf8.DecodeRuneInString(meta[i:])
		return fmt.Sprintf("holds the control character %U", r)
	}
	return ""
}

// metaSuffix returns what a token carries of the metadata meta: "" for
// none, else the separator and meta with every byte escaped as %XX that is
// not printable ASCII, or is '%', '{' or '}' — so that a token holds no
// space (handover messages are "<token> <fence>"), no brace (a Cluster
// hash tag) and nothing a terminal or a log line could misread.
func metaSuffix(meta string) string {
	if meta == "" {
		return ""
	}
	var b strings.Builder
	b.WriteByte(metaSep)
	for i := 0; i < len(meta); i++ {
		if c := meta[i]; c <= ' ' || c >= 0x7f || c == '%' || c == '{' || c == '}' {
			fmt.Fprintf(&b, "%%%02X", c)
		} else {
			b.WriteByte(c)
		}
	}
	return b.String()
}

// metaOf returns the holder metadata a lease token carries: what follows
// the first '.', unescaped; "" if there is none (a token of a lease taken
// without metadata, or by a version of dlock before it).
func metaOf(token string) string {
	_, s, _ := strings.Cut(token, string(metaSep))
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+3], 16, 8); err == nil {
				b.WriteByte(byte(n))
				i += 2
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// suffixOf returns what token carries of its metadata: "" or '.' and the
// escaped metadata.
func suffixOf(token string) string {
	if i := strings.IndexByte(token, metaSep); i >= 0 {
		return token[i:]
	}
	return ""
}

// leaseToken returns a new lease token: mark (a kind's, see marks; most
// have none), 128 random bits in base64url, then suffix (see metaSuffix).
func leaseToken(suffix, mark string) string {
	var raw [16]byte
	rand.Read(raw[:]) // never fails (crypto/rand, Go 1.24+)
	var enc [22]byte
	base64.RawURLEncoding.Encode(enc[:], raw[:])
	return mark + string(enc[:]) + suffix
}

// newToken returns a random 128-bit token without metadata.
func newToken() string { return leaseToken("", "") }

const base64URL = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

// marks are what a kind's lease tokens begin with where its key alone
// cannot tell the kind (a leadership's lease and a plain lock's are both a
// string holding the token), so that Resume and Leader refuse the other
// kind's: a letter and ':', which no other token begins with (base64url
// has no ':'), as a read-write lock's members are "r:" or "w:" and a
// token. A kind declares its mark where it is declared (marked), with the
// tag that versions of dlock before the marks put in the four low bits of
// its tokens' 22nd character instead: a lease such a version took may
// still be held, and the character of a new token has them 0 (it carries
// two of the random bits).
var marks = map[string]byte{}

// marked registers mark, and the tag its kind's tokens carried before, and
// returns mark. A mark that one registered already begins with, or that
// begins with one, would tell two kinds apart by nothing: it panics, as
// the package is initialized.
func marked(mark string, tag byte) string {
	for m := range marks {
		if strings.HasPrefix(mark, m) || strings.HasPrefix(m, mark) {
			panic("dlock: the token mark " + strconv.Quote(mark) + " overlaps " + strconv.Quote(m))
		}
	}
	marks[mark] = tag
	return mark
}

// markOf returns the mark s begins with, "" if none.
func markOf(s string) string {
	for m := range marks {
		if strings.HasPrefix(s, m) {
			return m
		}
	}
	return ""
}

// tokenMark returns the mark of a well-formed token (one leaseToken made,
// or one Resume accepts), or of the kind whose tag an unmarked one carries
// (see marks); "" for none; of any other string (another program's
// value), "?", no kind's.
func tokenMark(token string) string {
	if notToken(token) != "" {
		return "?"
	}
	if m := markOf(token); m != "" {
		return m
	}
	tag := byte(strings.IndexByte(base64URL, token[21]) & 0x0f)
	for m, t := range marks {
		if t == tag {
			return m
		}
	}
	if tag != 0 {
		return "?"
	}
	return ""
}

// defaultMeta is the holder metadata of a Client without HolderMeta:
// "hostname:pid", cut to MaxMetaLen and without control characters.
var defaultMeta = sync.OnceValue(func() string {
	pid := ":" + strconv.Itoa(os.Getpid())
	host, _ := os.Hostname()
	host = strings.Join(strings.FieldsFunc(strings.ToValidUTF8(host, "?"), unicode.IsControl), "") // (its control characters dropped)
	if n := MaxMetaLen - len(pid); len(host) > n {
		host = strings.ToValidUTF8(host[:n], "") // (drops a rune cut in two)
	}
	return host + pid
})
