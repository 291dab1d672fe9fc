package script

import (
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockio/dlock/internal/redistest"
)

// Every script, with the lib functions withLib gave it, compiles on a real
// server, and every lib function it calls is defined in it.
func TestScriptsLoadWithTheirLibUnderTheirDigests(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	calls := regexp.MustCompile(`\b(\w+)\(`)
	defined := map[string]bool{}
	for _, name := range libNames() {
		defined[name] = true
	}
	for _, s := range All() {
		name, src := s.Name(), s.Source()
		if h, err := rdb.ScriptLoad(t.Context(), src).Result(); err != nil {
			t.Errorf("%s: SCRIPT LOAD = %v", name, err)
		} else if h != s.Hash() {
			t.Errorf("%s: the server's digest is %s, digests.go has %q: run go generate ./internal/script", name, h, s.Hash())
		}
		for _, m := range calls.FindAllStringSubmatch(src, -1) {
			if defined[m[1]] && !strings.Contains(src, "local function "+m[1]+"(") {
				t.Errorf("%s calls %s but its text does not define it", name, m[1])
			}
		}
	}
}

// Every lease that ends leaves its marker for the revocation window,
// whatever happens to the lock after: a re-sent release reports what the
// first copy did and a late acquire is refused, however many leases came
// and went since.
func TestMarkersOutliveLaterLeases(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	ctx := t.Context()
	token := func(i int) string { return fmt.Sprintf("%022d", i) } // 22 characters, as dlock's
	marker := func(i int) string { return "l:r:" + token(i) }
	acquire := func(i int) (int, error) {
		return Named("acquire").Run(ctx, rdb, []string{"l", marker(i)}, token(i), 60000).Int()
	}
	release := func(i int) int {
		n, err := Named("release").Run(ctx, rdb, []string{"l", "l:w", marker(i)}, token(i), "PUBLISH", 60000).Int()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	for i := range 20 {
		if n, err := acquire(i); err != nil || n != 0 {
			t.Fatalf("acquire %d = %d, %v", i, n, err)
		}
		if release(i) != 1 {
			t.Fatalf("release %d = 0", i)
		}
	}
	if n := rdb.Exists(ctx, "l").Val(); n != 0 {
		t.Errorf("lock key after the last release: EXISTS = %d, want 0", n)
	}
	for _, i := range []int{0, 10, 19} {
		if release(i) != 1 {
			t.Errorf("re-sent release of lease %d = 0, want 1", i)
		}
		if _, err := acquire(i); err == nil || !strings.HasPrefix(err.Error(), "REVOKED") {
			t.Errorf("late acquire of lease %d = %v, want REVOKED", i, err)
		}
	}
	if n, err := acquire(100); err != nil || n != 0 {
		t.Fatalf("acquire 100 = %d, %v", n, err)
	}
	if n := release(50); n != 0 { // the undo of an attempt while 100 holds the lock
		t.Errorf("release of a lease that never held the lock = %d, want 0", n)
	}
	release(100)
	if _, err := acquire(50); err == nil || !strings.HasPrefix(err.Error(), "REVOKED") {
		t.Errorf("late acquire of the undone lease after 100 released = %v, want REVOKED", err)
	}
	if d := rdb.PTTL(ctx, marker(50)).Val(); d <= 0 || d > time.Minute {
		t.Errorf("the undone lease's marker lives %v, want the revocation window", d)
	}
}

// A release with no marker window (a lease none of whose requests can land
// later) writes no marker, and announces itself only when a waiter's
// attempt set the wake key: PUBLISH is counted in the server's command
// statistics.
func TestReleaseMarksAndAnnouncesOnlyWhenNeeded(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	ctx := t.Context()
	acquire := func(tok string, waits int) []any {
		t.Helper()
		keys := []string{"l", "l:r:" + tok, "l:w"}
		v, err := Named("acquire").Run(ctx, rdb, keys[:2+waits], tok, 60000).Result()
		if err != nil {
			t.Fatal(err)
		}
		if r, ok := v.([]any); ok {
			return r
		}
		return nil
	}
	release := func(tok string) int64 { // a clean lease's: no window
		t.Helper()
		n, err := Named("release").Run(ctx, rdb, []string{"l", "l:w", "l:r:" + tok}, tok, "PUBLISH").Int64()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	publishes := func() string {
		for _, line := range strings.Split(rdb.Info(ctx, "commandstats").Val(), "\n") {
			if strings.HasPrefix(line, "cmdstat_publish:") {
				return strings.Fields(strings.ReplaceAll(line, ",", " "))[0]
			}
		}
		return "cmdstat_publish:calls=0"
	}
	rdb.ConfigResetStat(ctx)
	if acquire("a", 0) != nil || acquire("b", 0) == nil { // b tries only
		t.Fatal("a should hold the lock, b be refused")
	}
	if rdb.Exists(ctx, "l:w").Val() != 0 {
		t.Error("a try that does not wait set the wake key")
	}
	if release("a") != 1 {
		t.Fatal("release of a = 0")
	}
	if rdb.Exists(ctx, "l:r:a").Val() != 0 {
		t.Error("a release without a marker window wrote a marker")
	}
	if got := publishes(); got != "cmdstat_publish:calls=0" {
		t.Errorf("a release nobody waited for published: %s", got)
	}
	acquire("c", 0)
	if r := acquire("d", 1); r == nil {
		t.Fatal("d should be refused")
	} else if d := rdb.PTTL(ctx, "l:w").Val(); d <= 0 || d > time.Minute {
		t.Errorf("the wake key lives %v, want the holder's remaining lease", d)
	}
	if release("c") != 1 || rdb.Exists(ctx, "l:w").Val() != 0 {
		t.Error("the release with a waiter did not take the wake key")
	}
	if got := publishes(); got != "cmdstat_publish:calls=1" {
		t.Errorf("the release with a waiter published %s, want once", got)
	}
	if release("c") != 0 {
		t.Error("a second release without a marker says the lease was still held")
	}
}

// A script's common path, above its libHere line, calls none of the lib
// functions: they are defined below it.
func TestNoSharedFunctionAboveLibHere(t *testing.T) {
	t.Parallel()
	for _, s := range All() {
		head, _, split := strings.Cut(read(s.Name()+".lua"), libHere)
		if !split {
			continue
		}
		inHead := calledIn(head)
		for _, name := range libNames() {
			if inHead[name] {
				t.Errorf("%s.lua calls %s above the line that defines it", s.Name(), name)
			}
		}
	}
}

// Each lib function calls only lib functions defined above it, in its own
// file or in a lib file read before (lib.lua first, then lib_*.lua by
// name), and none is defined twice: withLib picks a script's functions
// from the last up, so a call to one further down would leave it out.
func TestLibFunctionsCallOnlyThoseDefinedAbove(t *testing.T) {
	t.Parallel()
	names := libNames()
	if libFiles, _ := fs.Glob(files, "lib_*.lua"); len(libFiles) == 0 || len(names) < 20 {
		t.Fatalf("lib files %v, functions %v", libFiles, names)
	}
	defined := map[string]bool{}
	for _, c := range libChunks {
		m := libFunc.FindStringSubmatch(c)
		if m == nil {
			continue
		}
		if defined[m[1]] {
			t.Errorf("%s is defined twice in the lib files", m[1])
		}
		for called := range calledIn(c) {
			if called != m[1] && slices.Contains(names, called) && !defined[called] {
				t.Errorf("%s calls %s, which is defined below it or in a lib file read after", m[1], called)
			}
		}
		defined[m[1]] = true
	}
}

// libNames returns the names of the lib functions, in the order withLib
// reads them.
func libNames() (names []string) {
	for _, c := range libChunks {
		if m := libFunc.FindStringSubmatch(c); m != nil {
			names = append(names, m[1])
		}
	}
	return names
}

// Every shared function a script's text defines is called in it: a name
// that ends another's (serve_queue in rw_serve_queue) brings no closure the script
// builds on each run and never calls.
func TestScriptDefinesOnlyTheSharedFunctionsItCalls(t *testing.T) {
	t.Parallel()
	for _, s := range All() {
		src := s.Source()
		for _, m := range libFunc.FindAllStringSubmatch(src, -1) {
			called := regexp.MustCompile(`[^\w]`+m[1]+`\(`).FindAllString(src, -1)
			if len(called) < 2 { // (one is its definition)
				t.Errorf("a script defines %s and never calls it:\n%s", m[1], src[:min(len(src), 120)])
			}
		}
	}
}

// Each Redis type's file registers, under its type's name, the functions
// types.lua describes, and no script names a type a kind keeps (but in a
// Lua type() test): the scripts look the key's type up in the table, so a
// kind on a new type adds its file and edits none of them. A script that
// looks a type up gets every type's file, below its libHere line; one that
// does not (a lease's acquire, extend or release), none.
func TestEachRedisTypeOwnsItsFunctions(t *testing.T) {
	t.Parallel()
	described := regexp.MustCompile(`(?m)^--   (\w+)\(key`)
	var want []string
	for _, m := range described.FindAllStringSubmatch(read("types.lua"), -1) {
		want = append(want, m[1])
	}
	slices.Sort(want)
	typeFiles, _ := fs.Glob(files, "type_*.lua")
	if len(typeFiles) == 0 || len(want) == 0 {
		t.Fatalf("type files %v, functions described in types.lua %v", typeFiles, want)
	}
	registered := regexp.MustCompile(`(?m)^function types\.\w+\.(\w+)\(`)
	var typs []string
	for _, file := range typeFiles {
		typ := strings.TrimSuffix(strings.TrimPrefix(file, "type_"), ".lua")
		typs = append(typs, typ)
		text := read(file)
		if !strings.Contains(text, "\ntypes."+typ+" = {}\n") {
			t.Errorf("%s does not register types.%s", file, typ)
		}
		var got []string
		for _, m := range registered.FindAllStringSubmatch(text, -1) {
			got = append(got, m[1])
		}
		if slices.Sort(got); !slices.Equal(got, want) {
			t.Errorf("%s registers %v, types.lua describes %v", file, got, want)
		}
	}
	luaType := regexp.MustCompile(`type\(\w+\) [=~]= '\w+'`)
	for _, s := range All() {
		text := read(s.Name() + ".lua")
		for _, typ := range typs {
			if strings.Contains(luaType.ReplaceAllString(text, ""), "'"+typ+"'") {
				t.Errorf("%s.lua names the type '%s': look it up in types", s.Name(), typ)
			}
		}
		uses := strings.Contains(text, "types[")
		if head, _, split := strings.Cut(text, libHere); split && strings.Contains(head, "types[") {
			t.Errorf("%s.lua looks a type up above its libHere line, where types is not defined yet", s.Name())
		}
		for _, typ := range typs {
			if got := strings.Contains(s.Source(), "\ntypes."+typ+" = {}\n"); got != uses {
				t.Errorf("%s: looks a type up %v, has types.%s %v", s.Name(), uses, typ, got)
			}
			for _, fn := range want { // (only the functions it calls: each costs every call a closure)
				calls := uses && strings.Contains(text, "]."+fn+"(")
				if got := strings.Contains(s.Source(), "\nfunction types."+typ+"."+fn+"("); got != calls {
					t.Errorf("%s: calls %s %v, has types.%s.%s %v", s.Name(), fn, calls, typ, fn, got)
				}
			}
		}
	}
}

// A waiter that meets a lease in its last millisecond (PTTL 0) sets no wake
// key: the key lives no longer than the holder's lease, never the whole
// wake window (a key left for a minute after everyone is gone).
func TestWakeKeyNotSetForALeaseEndingNow(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	ctx := t.Context()
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; i < 20000 && time.Now().Before(deadline); i++ {
		if err := rdb.Set(ctx, "l", "holder", time.Millisecond).Err(); err != nil {
			t.Fatal(err)
		}
		reply, err := Named("acquire").Run(ctx, rdb, []string{"l", "l:r:w", "l:w"}, "waiter", 1000).Result()
		if err != nil {
			t.Fatal(err)
		}
		v, ok := reply.([]any)
		if !ok || v[0] != int64(0) {
			rdb.Del(ctx, "l", "l:w")
			continue // (the lease had 1 ms left, or was gone: try again)
		}
		if d := rdb.PTTL(ctx, "l:w").Val(); d > time.Millisecond {
			t.Fatalf("wake key lives %v behind a lease with PTTL 0, want none", d)
		}
		return
	}
	t.Skip("no attempt met a lease with PTTL 0 in 10 s")
}

// A force release deletes a reentrant lock whose holding it names (its
// owner and fence), tells a free key from a changed holding, and leaves a
// key that is no dlock lock (another program's set, a hash without an
// owner) with a WRONGTYPE error that names the key's type.
func TestForceReleaseRefusesAKeyThatIsNoDlockLock(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	ctx := t.Context()
	force := func(key, holding string) (int64, error) {
		return ForceRelease.Run(ctx, rdb, []string{key}, holding, key+":ch", "PUBLISH", 60000).Int64()
	}
	rdb.HSet(ctx, "reentrant", "owner", "o", "fence", "7")
	if n, err := force("reentrant", "o 8"); n != 0 || err != nil {
		t.Errorf("force release of another holding of a reentrant lock = %d, %v; want 0", n, err)
	}
	if n, err := force("reentrant", "o 7"); n != 1 || err != nil || rdb.Exists(ctx, "reentrant").Val() != 0 {
		t.Errorf("force release of a reentrant lock's holding = %d, %v; want 1, the key deleted", n, err)
	}
	if n, err := force("reentrant", "o 7"); n != -1 || err != nil {
		t.Errorf("force release of a free key = %d, %v; want -1 (not 0: its holding changed)", n, err)
	}
	rdb.SAdd(ctx, "set", "x")
	rdb.HSet(ctx, "hash", "field", "x")
	for _, key := range []string{"set", "hash"} { // (each key named by its type)
		_, err := force(key, "x")
		if want := "WRONGTYPE dlock: the lock key holds a " + key + " that is not a dlock lock"; err == nil || err.Error() != want {
			t.Errorf("force release of a %s = %v, want %q", key, err, want)
		}
		if rdb.Exists(ctx, key).Val() != 1 {
			t.Errorf("force release of a %s deleted it", key)
		}
	}
}

// The scripts every kind shares read a held lock of each Redis type with
// the commands its type's functions need, and no more (a reentrant lock's
// force release reads its owner and fence with one HMGET, and its holds
// with HKEYS, marking each with a SET), counted in the
// server's command statistics without the EVAL itself.
func TestSharedScriptsReadEachTypeWithTheCommandsItNeeds(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	ctx := t.Context()
	deadline := time.Now().Add(time.Minute).UnixMilli()
	held := map[string]func(){ // the lock "l", held by the lease "tok" (a reentrant one: owner "tok", fence 7)
		"string": func() { rdb.Set(ctx, "l", "tok", time.Minute) },
		"hash":   func() { rdb.HSet(ctx, "l", "owner", "tok", "fence", "7", "h:1", deadline) },
		"zset":   func() { rdb.ZAdd(ctx, "l", redis.Z{Score: float64(deadline), Member: "tok"}) },
	}
	holding := map[string]string{"string": "tok", "hash": "tok 7", "zset": "tok"} // (as Inspect reads it)
	commands := func() (n int) {
		for _, line := range strings.Split(rdb.Info(ctx, "commandstats").Val(), "\r\n") {
			name, rest, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":calls=")
			if cmd, _, _ := strings.Cut(name, "|"); ok && name != line && !slices.Contains([]string{"eval", "evalsha", "config", "info"}, cmd) {
				calls, _, _ := strings.Cut(rest, ",")
				c, _ := strconv.Atoi(calls)
				n += c
			}
		}
		return n
	}
	for _, tc := range []struct {
		s               *Script
		keys            []string
		args            func(typ string) []any
		str, hash, zset int
	}{
		{Inspect, []string{"l", "l:fence", "l:q", "l:w", "l:v"}, func(string) []any { return nil }, 7, 7, 7},
		{ForceRelease, []string{"l"}, func(typ string) []any { return []any{holding[typ], "l:ch", "PUBLISH", 60000} }, 5, 8, 6}, // (PTTL: the markers outlive the leases; a hold's marker read before it is marked)
		{Fence, []string{"l", "l:fence", "l:r:tok"}, func(typ string) []any { return []any{"tok", 1000, typ, ""} }, 3, 4, 5},
		{RaiseFence, []string{"l", "l:fence", "l:r:tok"}, func(typ string) []any { return []any{5, "tok", 1000, typ, ""} }, 4, 4, 5},
		{Named("fence_current"), []string{"l", "l:fence"}, func(typ string) []any { return []any{"tok", 7, typ} }, 3, 3, 4},
	} {
		for typ, want := range map[string]int{"string": tc.str, "hash": tc.hash, "zset": tc.zset} {
			rdb.FlushAll(ctx)
			held[typ]()
			rdb.ConfigResetStat(ctx)
			if err := tc.s.Run(ctx, rdb, tc.keys, tc.args(typ)...).Err(); err != nil {
				t.Fatalf("%s on a %s: %v", tc.s.Name(), typ, err)
			}
			if got := commands(); got != want {
				t.Errorf("%s on a held %s ran %d commands, want %d", tc.s.Name(), typ, got, want)
			}
		}
	}
}

// A force release sets ended the markers of the leases it is given, and of
// every hold a reentrant lock has when it runs (one taken after its caller
// read them too), but leaves '1' where a lease was released since the
// caller read it: a re-sent copy of that release reads it as done.
func TestForceReleaseMarksTheLeasesItEndsButNotOneReleasedSince(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	ctx := t.Context()
	rdb.HSet(ctx, "{l}", "owner", "o", "fence", "7", "h:read", "99999999999999", "h:since", "99999999999999")
	rdb.Set(ctx, "{l}:r:released", "1", time.Minute)
	keys := []string{"{l}", "{l}:r:read", "{l}:r:released"}
	if n, err := ForceRelease.Run(ctx, rdb, keys, "o 7", "{l}:ch", "PUBLISH", 60000).Int64(); n != 1 || err != nil {
		t.Fatalf("force release of the reentrant lock = %d, %v; want 1", n, err)
	}
	for key, want := range map[string]string{"{l}:r:read": "0", "{l}:r:since": "0", "{l}:r:released": "1"} {
		if v, err := rdb.Get(ctx, key).Result(); v != want || err != nil {
			t.Errorf("%s after the force = %q, %v; want %q", key, v, err, want)
		}
	}
}

// A force release sets the markers it sets for as long as the lock's
// longest lease could have lived (the key's TTL) and a minute beyond: a
// copy of a lease's request may still land any time within its TTL. A
// plain lock of three minutes; a reentrant lock of five, one of whose
// holds was taken after its caller read them.
func TestForceReleaseMarksTheLeasesForTheirTTLAndAMinute(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	ctx := t.Context()
	rdb.Set(ctx, "{s}", "tok", 3*time.Minute)
	rdb.HSet(ctx, "{h}", "owner", "o", "fence", "7", "h:read", "99999999999999", "h:since", "99999999999999")
	rdb.PExpire(ctx, "{h}", 5*time.Minute)
	for _, c := range []struct {
		keys    []string
		holding string
		ttl     time.Duration
	}{
		{[]string{"{s}", "{s}:r:tok"}, "tok", 3 * time.Minute},
		{[]string{"{h}", "{h}:r:read"}, "o 7", 5 * time.Minute},
	} {
		if n, err := ForceRelease.Run(ctx, rdb, c.keys, c.holding, "ch", "PUBLISH", 60000).Int64(); n != 1 || err != nil {
			t.Fatalf("force release of %s = %d, %v; want 1", c.keys[0], n, err)
		}
		markers := c.keys[1:]
		if c.keys[0] == "{h}" {
			markers = append(markers, "{h}:r:since")
		}
		for _, m := range markers {
			if left := rdb.PTTL(ctx, m).Val(); left < c.ttl+50*time.Second || left > c.ttl+time.Minute {
				t.Errorf("%s lives %v after the force; want the lock's TTL, %v, and a minute", m, left, c.ttl)
			}
		}
	}
}
