// Package script holds dlock's Lua scripts. Each runs atomically on one
// Redis node; each file's header states its KEYS, ARGV and reply.
package script

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed lib.lua
	lib string // the prelude of the scripts that write a lock (lib.lua)
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
)

// The scripts, run with EVALSHA and a fallback to EVAL when the server's
// script cache does not have them (redis.Script.Run). Those that write a
// lock start with the prelude, lib.lua.
var (
	Acquire = redis.NewScript(lib + acquireSrc)
	Release = redis.NewScript(lib + releaseSrc)
	Extend  = redis.NewScript(lib + extendSrc)
	Inspect = redis.NewScript(inspectSrc)
	Guard   = redis.NewScript(guardSrc)

	ForceRelease = redis.NewScript(forceReleaseSrc)
	AcquireFair  = redis.NewScript(lib + acquireFairSrc)
	ReleaseFair  = redis.NewScript(lib + releaseFairSrc)

	AcquireReentrant = redis.NewScript(lib + acquireReentrantSrc)
	ReleaseReentrant = redis.NewScript(lib + releaseReentrantSrc)
	ExtendReentrant  = redis.NewScript(lib + extendReentrantSrc)
	RaiseFence       = redis.NewScript(raiseFenceSrc)
)
