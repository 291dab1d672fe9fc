// Package script holds dlock's Lua scripts. Each runs atomically on one
// Redis node; each file's header states its KEYS, ARGV and reply.
package script

import (
	"context"
	"embed"
	"io/fs"
	"maps"
	"regexp"
	"slices"
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
	arg             any // hash as a command argument, converted once
}

// Hash returns the script's SHA-1 digest, in hex.
func (s *Script) Hash() string { return s.hash }

// Arg returns the digest as a command argument, made once: an EVALSHA
// allocates nothing for it.
func (s *Script) Arg() any { return s.arg }

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
func All() []*Script { return slices.Collect(maps.Values(all)) }

// Named returns the script of the file name.lua. The code that runs a
// script names it once, in a package variable: a name without a file
// panics as the program starts.
func Named(name string) *Script {
	s := all[name]
	if s == nil {
		panic("script: no file " + name + ".lua")
	}
	return s
}

// files are the scripts' texts, and the libraries they draw on (withLib):
// lib.lua, the functions every family of scripts shares, and lib_*.lua, a
// family's own, each script getting those it calls; and types.lua with the
// type files (type_*.lua), each Redis type's functions in a table, of which
// a script that names it gets those it calls.
//
//go:embed *.lua
var files embed.FS

// libChunks are the chunks of the lib files: lib.lua's, then each
// lib_*.lua's, in order of name. A function may call only those above it:
// in its own file, or in a file read before.
var libChunks = chunksOf("lib*.lua") // (lib.lua sorts first: '.' before '_')

// typeChunks are the chunks of every type file, in order of name: its
// table first, then its functions (see typeFunc).
var typeChunks = chunksOf("type_*.lua")

// chunksOf returns the chunks, the parts separated by blank lines, of the
// files whose names match pattern, in order of name.
func chunksOf(pattern string) (chunks []string) {
	names, _ := fs.Glob(files, pattern) // (in order of name)
	for _, name := range names {
		chunks = append(chunks, strings.Split(strings.TrimSpace(read(name)), "\n\n")...)
	}
	return chunks
}

// typeFunc finds the function of a type that a chunk of a type file defines.
var typeFunc = regexp.MustCompile(`(?m)^function types\.\w+\.(\w+)\(`)

// all are the package's scripts by name, one for each file but the
// libraries (lib*.lua, types.lua, type_*.lua). Each is run with EVALSHA;
// the backend loads those a lease needs into a server's script cache
// before the first call that needs them, and again when a call finds them
// missing (see internal/backend/scripts.go).
var all = func() map[string]*Script {
	entries, _ := files.ReadDir(".") // (it is there: embedded)
	m := map[string]*Script{}
	for _, e := range entries {
		if name, ok := strings.CutSuffix(e.Name(), ".lua"); ok && !strings.HasPrefix(name, "lib") && !strings.HasPrefix(name, "type") {
			m[name] = withLib(name)
		}
	}
	return m
}()

// The scripts more than one kind of lease runs, or the engine, or the
// root package (Guard: on the resource's Redis, not the lock's). A kind's
// own scripts are named in its file of internal/backend.
var (
	Inspect      = Named("inspect")
	Guard        = Named("guard")
	ForceRelease = Named("force_release")
	RaiseFence   = Named("raise_fence")
	Fence        = Named("fence")
	// How long a lock's server has been up (a release of unknown outcome).
	Uptime = Named("uptime")
	// A message on a lock's channel (Client.RequestRelease).
	Announce = Named("announce")
)

// libHere is the line of a script after which the lib functions it calls
// are defined: the part above it, its common path, runs before any of them
// is made (see withLib).
const libHere = "-- (the shared functions are defined here)\n"

// withLib returns the script of the file name.lua with the lib functions
// it calls (libChunks), and only those, defined before it, or at its
// libHere line, followed by the types table if it looks a type up in it
// (types[), with the types' functions it calls:
// Redis runs a script's whole text on every call, so each function
// defined costs every call that reaches its definition a closure, and a
// common path that returns above libHere costs none.
func withLib(name string) *Script {
	src := read(name + ".lua")
	head, tail, split := strings.Cut(src, libHere)
	if !split {
		head, tail = "", src
	}
	// A function is needed if the script, its types or a needed function
	// calls it; each is defined after those it calls.
	var defs string // the needed functions' chunks
	needed := calledIn(src)
	if strings.Contains(src, "types[") { // types.lua, and the types' tables and the functions it calls
		types := []string{read("types.lua")}
		for _, c := range typeChunks {
			if m := typeFunc.FindStringSubmatch(c); m == nil || needed[m[1]] {
				types = append(types, c)
			}
		}
		tail = strings.Join(types, "\n") + "\n" + tail
		maps.Copy(needed, calledIn(tail))
	}
	for i := len(libChunks) - 1; i >= 0; i-- {
		m := libFunc.FindStringSubmatch(libChunks[i])
		if m == nil || !needed[m[1]] {
			continue
		}
		defs = libChunks[i] + "\n\n" + defs
		maps.Copy(needed, calledIn(libChunks[i]))
	}
	return &Script{name: name, src: head + defs + tail, hash: digests[name], arg: digests[name]}
}

// read returns the text of the package's file name.
func read(name string) string {
	b, _ := files.ReadFile(name) // (it is there: embedded)
	return string(b)
}

// calledIn returns the names of the functions the Lua text calls: each
// name( not preceded by a letter, digit or '_' (rw_serve_queue( calls
// rw_serve_queue, not serve_queue).
func calledIn(text string) map[string]bool {
	names := map[string]bool{}
	for _, m := range call.FindAllStringSubmatch(text, -1) {
		names[m[1]] = true
	}
	return names
}

// call finds a function call in Lua text: its name is the longest run of
// name characters before the '('.
var call = regexp.MustCompile(`(\w+)\(`)

// libFunc finds the function a chunk of a lib file defines.
var libFunc = regexp.MustCompile(`(?m)^local function (\w+)\(`)
