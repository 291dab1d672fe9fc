// Package script holds dlock's Lua scripts. Each runs atomically on one
// Redis node; each file's header states its KEYS, ARGV and reply.
package script

import (
	"context"
	_ "embed"
	"regexp"
	"strings"

	"github.com/redis/go-redis/v9"
)

//go:generate go run digests_gen.go

// Script is one of dlock's scripts: its text, with the shared functions it
// calls, and its SHA-1 digest, the name EVALSHA runs it by. The digests are
// written by go generate (digests.go), never computed at run time, so that
// dlock runs where SHA-1 is not allowed (GODEBUG=fips140=only); a test
// checks each against its text.
type Script struct {
	name, src, hash string
}

// Hash returns the script's SHA-1 digest, in hex.
func (s *Script) Hash() string { return s.hash }

// Source returns the script's text, for SCRIPT LOAD and EVAL.
func (s *Script) Source() string { return s.src }

// Name returns the name of the script's file, without ".lua".
func (s *Script) Name() string { return s.name }

// Run runs the script on c with EVALSHA, and with EVAL if the server does
// not have it (as redis.Script.Run does).
func (s *Script) Run(ctx context.Context, c redis.Scripter, keys []string, args ...any) *redis.Cmd {
	r := c.EvalSha(ctx, s.hash, keys, args...)
	if redis.HasErrorPrefix(r.Err(), "NOSCRIPT") {
		return c.Eval(ctx, s.src, keys, args...)
	}
	return r
}

// All returns every script of the package.
func All() []*Script { return all }

var (
	//go:embed lib.lua
	lib string // functions the scripts share, each script gets those it calls (withLib)
	//go:embed acquire.lua
	acquireSrc string
	//go:embed release.lua
	releaseSrc string
	//go:embed extend.lua
	extendSrc string
	//go:embed inspect.lua
	inspectSrc string
	//go:embed guard.lua
	guardSrc string
	//go:embed force_release.lua
	forceReleaseSrc string
	//go:embed acquire_fair.lua
	acquireFairSrc string
	//go:embed release_fair.lua
	releaseFairSrc string
	//go:embed acquire_reentrant.lua
	acquireReentrantSrc string
	//go:embed release_reentrant.lua
	releaseReentrantSrc string
	//go:embed extend_reentrant.lua
	extendReentrantSrc string
	//go:embed raise_fence.lua
	raiseFenceSrc string
	//go:embed fence.lua
	fenceSrc string
	//go:embed hold_acquire.lua
	holdAcquireSrc string
	//go:embed hold_release.lua
	holdReleaseSrc string
	//go:embed hold_extend.lua
	holdExtendSrc string
	//go:embed proclaim.lua
	proclaimSrc string
	//go:embed hold_downgrade.lua
	holdDowngradeSrc string
	//go:embed permits.lua
	permitsSrc string
	//go:embed uptime.lua
	uptimeSrc string
	//go:embed fence_current.lua
	fenceCurrentSrc string
	//go:embed announce.lua
	announceSrc string
)

// The scripts, run with EVALSHA. The backend loads them into a server's
// script cache before the first call that needs them, and again when a
// call finds them missing (see internal/backend/scripts.go).
var (
	Acquire = withLib("acquire", acquireSrc)
	Release = withLib("release", releaseSrc)
	Extend  = withLib("extend", extendSrc)
	Inspect = withLib("inspect", inspectSrc)
	Guard   = withLib("guard", guardSrc)

	ForceRelease = withLib("force_release", forceReleaseSrc)
	AcquireFair  = withLib("acquire_fair", acquireFairSrc)
	ReleaseFair  = withLib("release_fair", releaseFairSrc)

	AcquireReentrant = withLib("acquire_reentrant", acquireReentrantSrc)
	ReleaseReentrant = withLib("release_reentrant", releaseReentrantSrc)
	ExtendReentrant  = withLib("extend_reentrant", extendReentrantSrc)
	RaiseFence       = withLib("raise_fence", raiseFenceSrc)
	Fence            = withLib("fence", fenceSrc)

	// The sorted-set kinds' holds, one family: a semaphore's permits and
	// a read-write lock's reads and writes (see lib.lua); Fence serves
	// them too.
	HoldAcquire = withLib("hold_acquire", holdAcquireSrc)
	HoldRelease = withLib("hold_release", holdReleaseSrc)
	HoldExtend  = withLib("hold_extend", holdExtendSrc)
	// A read-write lock's write hold turned into a read (RWMutex.Downgrade).
	HoldDowngrade = withLib("hold_downgrade", holdDowngradeSrc)

	// A leader's value, changed within its term (election.go).
	Proclaim = withLib("proclaim", proclaimSrc)
	// A semaphore's size kept in Redis: read, set once, grown or shrunk.
	Permits = withLib("permits", permitsSrc)
	// How long a lock's server has been up (a release of unknown outcome).
	Uptime = withLib("uptime", uptimeSrc)
	// Whether a fence is still current (Client.FenceCurrent); reads only.
	FenceCurrent = withLib("fence_current", fenceCurrentSrc)
	// A message on a lock's channel (Client.RequestRelease).
	Announce = withLib("announce", announceSrc)
)

// libHere is the line of a script after which the functions of lib.lua
// it calls are defined: the part above it, its common path, runs before
// any of them is made (see withLib).
const libHere = "-- (the shared functions are defined here)\n"

// withLib returns the script src with the functions of lib.lua it calls,
// and only those, defined before it, or at its libHere line: Redis runs a
// script's whole text on every call, so each function defined costs every
// call that reaches its definition a closure, and a common path that
// returns above libHere costs none.
func withLib(name, src string) *Script {
	head, tail, split := strings.Cut(src, libHere)
	if !split {
		head, tail = "", src
	}
	chunks := strings.Split(lib, "\n\n")
	for _, chunk := range chunks {
		if m := libFunc.FindStringSubmatch(chunk); m != nil && calls(head, m[1]) {
			early = append(early, m[1])
		}
	}
	need := make([]bool, len(chunks))
	// A function is needed if the script or a needed function calls it;
	// lib.lua defines each function after those it calls.
	text := src
	for i := len(chunks) - 1; i >= 0; i-- {
		m := libFunc.FindStringSubmatch(chunks[i])
		if m != nil && calls(text, m[1]) {
			need[i] = true
			text += chunks[i]
		}
	}
	var b strings.Builder
	b.WriteString(head)
	for i, chunk := range chunks {
		if need[i] {
			b.WriteString(chunk)
			b.WriteString("\n\n")
		}
	}
	b.WriteString(tail)
	s := &Script{name: name, src: b.String(), hash: digests[name]}
	all = append(all, s)
	return s
}

// calls reports whether the Lua text calls the function name: name( not
// preceded by a letter, digit or '_' (live_holds( calls live_holds, not holds).
// (Plain string search: it runs for every function and script when the
// package is initialised, in every process that imports it.)
func calls(text, name string) bool {
	for i := 0; ; {
		j := strings.Index(text[i:], name+"(")
		if j < 0 {
			return false
		}
		if j += i; j == 0 || !isWordByte(text[j-1]) {
			return true
		}
		i = j + 1
	}
}

// isWordByte reports whether b may be part of a Lua name.
func isWordByte(b byte) bool {
	return b == '_' || '0' <= b && b <= '9' || 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z'
}

// all are the package's scripts, in the order they are made.
var all []*Script

// early are the shared functions a script calls above its libHere line,
// where they are not defined yet (a test checks there are none).
var early []string

// libFunc finds the function a chunk of lib.lua defines.
var libFunc = regexp.MustCompile(`(?m)^local function (\w+)\(`)
