package dlock

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
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

// LockOption configures one acquisition and the lease it takes, in place of
// what the Client's options set for every lease. Per-call options are named
// without the With of the Client's options (LeaseTTL beside WithTTL,
// MaxHold beside WithMaxHold), so that the two kinds never mix up: a
// LockOption is not an Option, and the compiler says so.
//
// The calls that take them:
//   - Client.Acquire, Client.TryAcquire and Client.Do (and so Locker's);
//   - RWLocker.Acquire, RWLocker.TryAcquire and RWLocker.Do, for a read or
//     a write hold of a read-write lock;
//   - Semaphore.Acquire, Semaphore.TryAcquire and Semaphore.Do, for a
//     permit;
//   - Client.AcquireAll, Client.TryAcquireAll and Client.DoAll, for every
//     part of a multi-lock (MaxWait bounds the whole acquisition);
//   - Election.Campaign and Election.Do, for the leader's lease, except
//     HolderMeta: the campaign's value is the leader's metadata.
//
// TryAcquire and TryAcquireAll never wait: they refuse MaxWait(d) for a
// d > 0. An invalid option, and one that does not apply to the call, fail
// the call with an error wrapping ErrInvalid before anything is sent to
// Redis.
type LockOption func(*lease)

// lease is what one acquisition asks for: the Client's options, overridden
// by the call's LockOptions.
type lease struct {
	ttl     time.Duration // the lease time
	wait    time.Duration // how long Acquire may wait; < 0: as long as its ctx allows
	maxHold time.Duration // how long the lease may be held; 0: no limit
	meta    string        // the holder metadata
	suffix  string        // what the token carries of it: "." and meta escaped, or ""

	ttlSet bool // LeaseTTL was given
	// waitAll is, for a part of an AcquireAll with MaxWait(d > 0), that d:
	// wait is what is left of it (partWait).
	waitAll time.Duration
	err     string // the first invalid option, as the caller wrote it
}

func (p *lease) invalid(format string, args ...any) {
	if p.err == "" {
		p.err = fmt.Sprintf(format, args...)
	}
}

// LeaseTTL sets the lease time of this acquisition, in place of the
// Client's (WithTTL): Redis's expiry of the lease, and the period of its
// watchdog, which extends it every ttl/3 (an Extend changes it, as for any
// lease). A TTL below MinTTL, or not above the drift margin (WithDrift), is
// refused (ErrInvalid); over a quorum (NewRedlock) so is a TTL not above
// the per-node timeout, which stays the Client's (WithNodeTimeout). A
// reentrant hold taken with it is a lease of its own with this TTL; it
// never shortens the lock's key below what another hold was promised.
func LeaseTTL(ttl time.Duration) LockOption {
	return func(p *lease) {
		if ttl < MinTTL {
			p.invalid("LeaseTTL(%v): the TTL must be at least %v", ttl, MinTTL)
			return
		}
		p.ttl, p.ttlSet = ttl, true
	}
}

// MaxWait bounds how long Client.Acquire (and Client.Do) may wait for the
// lock, on top of its context: once d has passed without the lock, the call
// returns an error wrapping ErrNotAcquired — and, if the context ended
// first, matching ctx.Err() too; a wait that ran out while the context
// lives does not match the context's errors. However short d is, the call
// makes one attempt (bounded by its context only); MaxWait(0) makes one
// attempt exactly as TryAcquire does (it never queues, and in fair mode
// never jumps the queue). A negative d is refused (ErrInvalid), and so is a d > 0 on
// TryAcquire, which never waits. Without it, Acquire waits as long as its
// context allows. On AcquireAll (and DoAll) it bounds the whole
// acquisition, every part and round together (the part whose attempt is in
// flight when d passes finishes that attempt, as above).
func MaxWait(d time.Duration) LockOption {
	return func(p *lease) {
		if d < 0 {
			p.invalid("MaxWait(%v): the wait must not be negative", d)
			return
		}
		p.wait = d
	}
}

// partWait makes a part of an AcquireAll wait at most left: what is left
// of all, the MaxWait of the whole acquisition.
func partWait(left, all time.Duration) LockOption {
	return func(p *lease) { p.wait, p.waitAll = left, all }
}

// HolderMeta sets the holder metadata of this lease, in place of the
// Client's (WithHolderMeta): a short text that says who holds the lock.
// "" gives the lease none. See WithHolderMeta for what it may hold and where
// it shows.
func HolderMeta(meta string) LockOption {
	return func(p *lease) {
		if why := badMeta(meta); why != "" {
			p.invalid("HolderMeta(%q): %s", meta, why)
			return
		}
		p.meta, p.suffix = meta, metaSuffix(meta)
	}
}

// MaxHold caps how long this lease may be held, in place of the Client's
// cap (WithMaxHold); see WithMaxHold for what happens at the cap. 0 lifts
// the Client's cap for this lease. A d between 0 and MinTTL, or negative,
// is refused (ErrInvalid). On a reentrant re-entry it caps that hold,
// which is a lease of its own: at the cap the hold ends and is released,
// and the lock stays with its owner while another hold lives.
func MaxHold(d time.Duration) LockOption {
	return func(p *lease) {
		if why := badMaxHold(d); why != "" {
			p.invalid("MaxHold(%v): %s", d, why)
			return
		}
		p.maxHold = d
	}
}

// badMaxHold says what is wrong with the max hold d, or returns "".
func badMaxHold(d time.Duration) string {
	if d < 0 || (d > 0 && d < MinTTL) {
		return fmt.Sprintf("the max hold must be 0 (none) or at least %v", MinTTL)
	}
	return ""
}

// leaseFor returns what an acquisition of name asks for, with opts applied
// to the Client's defaults; try is set for TryAcquire. It returns an error
// wrapping ErrInvalid for an invalid option or one that does not apply.
func (c *Client) leaseFor(name string, opts []LockOption, try bool) (lease, error) {
	p := c.opts.lease
	if len(opts) == 0 {
		return p, nil
	}
	for i, opt := range opts {
		if opt == nil {
			p.invalid("option %d is nil", i+1)
			continue
		}
		opt(&p)
	}
	switch {
	case p.err != "":
	case try && p.wait > 0:
		p.invalid("MaxWait(%v): TryAcquire makes one attempt and never waits; use Acquire", p.wait)
	case p.ttlSet && c.opts.driftFor(p.ttl) >= p.ttl:
		p.invalid("LeaseTTL(%v): the TTL must be above the drift margin (%v)", p.ttl, c.opts.driftFor(p.ttl))
	case p.ttlSet && c.opts.nodeTimeout > 0 && p.ttl <= c.opts.nodeTimeout:
		p.invalid("LeaseTTL(%v): over a quorum the TTL must be above the per-node timeout (%v)", p.ttl, c.opts.nodeTimeout)
	}
	if p.err != "" {
		return lease{}, fmt.Errorf("%w: acquire %q: %s", ErrInvalid, name, p.err)
	}
	return p, nil
}

// MaxMetaLen is the longest holder metadata accepted (WithHolderMeta,
// HolderMeta), in bytes. Every lease token, marker key and handover message
// of a lease carries it.
const MaxMetaLen = 128

// metaSep separates a token's random part from its metadata. The random
// part is base64url (A–Z, a–z, 0–9, '-', '_'), so the first '.' is it.
const metaSep = '.'

// badMeta says what is wrong with the holder metadata meta, or returns "".
func badMeta(meta string) string {
	switch {
	case len(meta) > MaxMetaLen:
		return fmt.Sprintf("is %d bytes, longer than %d", len(meta), MaxMetaLen)
	case !utf8.ValidString(meta):
		return "is not valid UTF-8"
	}
	for _, r := range meta {
		if unicode.IsControl(r) {
			return fmt.Sprintf("holds the control character %U", r)
		}
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
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(1 + len(meta))
	b.WriteByte(metaSep)
	for i := 0; i < len(meta); i++ {
		switch c := meta[i]; {
		case c <= ' ' || c >= 0x7f || c == '%' || c == '{' || c == '}':
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// metaOf returns the holder metadata a lease token carries: what follows
// the first '.', unescaped; "" if there is none (a token of a lease taken
// without metadata, or by a version of dlock before it).
func metaOf(token string) string {
	i := strings.IndexByte(token, metaSep)
	if i < 0 {
		return ""
	}
	s := token[i+1:]
	if !strings.Contains(s, "%") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]) {
			n, _ := strconv.ParseUint(s[i+1:i+3], 16, 8)
			b.WriteByte(byte(n))
			i += 2
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'A' <= c && c <= 'F' || 'a' <= c && c <= 'f'
}

// leaseToken returns a new lease token: 128 random bits in base64url,
// followed by suffix (see metaSuffix).
func leaseToken(suffix string) string {
	var raw [16]byte
	rand.Read(raw[:]) // never fails (crypto/rand, Go 1.24+)
	var enc [22]byte
	base64.RawURLEncoding.Encode(enc[:], raw[:])
	var b strings.Builder
	b.Grow(len(enc) + len(suffix))
	b.Write(enc[:])
	b.WriteString(suffix)
	return b.String()
}

// newToken returns a random 128-bit token without metadata.
func newToken() string { return leaseToken("") }

// defaultMeta is the holder metadata of a Client without WithHolderMeta:
// "hostname:pid", cut to MaxMetaLen and without control characters.
var defaultMeta = sync.OnceValue(func() string {
	pid := ":" + strconv.Itoa(os.Getpid())
	host, _ := os.Hostname()
	host = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return -1
		}
		return r
	}, strings.ToValidUTF8(host, "?"))
	for len(host)+len(pid) > MaxMetaLen {
		_, n := utf8.DecodeLastRuneInString(host)
		host = host[:len(host)-n]
	}
	return host + pid
})
