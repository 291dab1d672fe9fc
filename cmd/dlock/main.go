// Command dlock runs commands under distributed locks kept in Redis,
// inspects and clears locks, and runs the batch-dispatch demo.
//
//	dlock run [flags] NAME -- CMD [ARG...]   hold NAME while CMD runs (a distributed flock;
//	                                         with -n N, at most N at once)
//	dlock inspect [--json] NAME...           show holder, remaining TTL and fence
//	dlock list [--json] [PATTERN]            list held locks (SCAN, never KEYS)
//	dlock watch [flags] PATTERN              a live view of the matching locks
//	dlock release --force NAME               delete a lock whoever holds it
//	dlock demo [flags]                       the batch-dispatch scenario, with and without a lock
//	dlock demo seckill [flags]               a flash sale: lock versus one Lua script
//
// Redis is given by --redis URL or the REDIS_URL environment variable
// (redis://, rediss:// or unix:// URLs; redis+sentinel://…?master_name=NAME
// for Sentinel, redis+cluster:// for a Cluster); a password can stay out of
// argv in REDIS_URL, REDIS_PASSWORD or the file REDIS_PASSWORD_FILE names.
//
// Exit codes: 0 success (or, for run, the command's own status); 2 usage
// error; 3 bad configuration (such as a malformed URL, a database index
// the server does not have, or a name held as a lock and asked for as a
// semaphore, or the reverse); 4 Redis unreachable or failing (for a
// quorum: too many nodes failed to reach a majority); 5 lock not acquired
// (held by another holder); 6 lock lost, or its --max-hold reached, while
// the command ran (it was terminated); 126 command not executable; 127
// command not found; 128+N interrupted by signal N while waiting for the
// lock, or during a watch (130 for SIGINT, 143 for SIGTERM).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// Exit codes.
const (
	exitOK          = 0
	exitFailure     = 1
	exitUsage       = 2
	exitConfig      = 3
	exitRedis       = 4
	exitNotAcquired = 5
	exitLost        = 6
	exitNoExec      = 126
	exitNotFound    = 127
	// exitInterrupted is the code of a wait interrupted by SIGINT: 128+2, as
	// a shell reports a command killed by it. SIGTERM gives 143 (128+15);
	// a cancelled context without a signal, 130.
	exitInterrupted = 130
)

// version is set at build time with -ldflags "-X main.version=…"; when it
// is not, versionString reads what the Go toolchain recorded in the binary.
var version = ""

// versionString returns dlock's version: the one set at build time, the
// module version `go install …@vX` records, or for a build from a checkout
// the commit it was built from (with "+dirty" for uncommitted changes).
func versionString() string {
	if version != "" {
		return version
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	if v := info.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev, dirty string
	for _, s := range info.Settings {
		switch {
		case s.Key == "vcs.revision" && len(s.Value) >= 12:
			rev = s.Value[:12]
		case s.Key == "vcs.modified" && s.Value == "true":
			dirty = "+dirty"
		}
	}
	if rev == "" {
		return "devel"
	}
	return "devel-" + rev + dirty
}

func main() {
	// dlock reports Redis errors itself, on one line; go-redis would also
	// log each failed dial on stderr.
	redis.SetLogger(quietLogger{})
	ctx, stop := interruptible(context.Background())
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// interruptible returns a context that SIGINT or SIGTERM cancels, like
// signal.NotifyContext, with an interruption naming the signal as its
// cause: an interrupted wait exits 128+N, as a shell reports a command the
// signal killed, and not as a lock held by someone else.
func interruptible(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		select {
		case s := <-sigs:
			cancel(interruption{s.(syscall.Signal)})
		case <-ctx.Done():
		}
	}()
	return ctx, func() {
		signal.Stop(sigs)
		cancel(context.Canceled)
	}
}

// quietLogger discards go-redis's internal log.
type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// interruption is the cause of a context cancelled by a signal.
type interruption struct{ sig syscall.Signal }

func (i interruption) Error() string { return "interrupted by " + signalName(i.sig) }

// interrupted is the error of an operation that stopped because ctx was
// cancelled: it exits 128+N for signal N, else exitInterrupted.
func interrupted(ctx context.Context, format string, args ...any) error {
	code, by := exitInterrupted, ""
	if i, ok := errors.AsType[interruption](context.Cause(ctx)); ok {
		code, by = 128+int(i.sig), " by "+signalName(i.sig)
	}
	return fail(code, "interrupted%s %s", by, fmt.Sprintf(format, args...))
}

func signalName(sig syscall.Signal) string {
	switch sig {
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGHUP:
		return "SIGHUP"
	case syscall.SIGKILL:
		return "SIGKILL"
	}
	return sig.String()
}

const usage = `usage: dlock COMMAND [flags] [args]

commands:
  run [flags] NAME -- CMD [ARG...]   hold the lock NAME while CMD runs (-n N: at most N at once)
  inspect [--json] NAME...           show a lock's holder, remaining TTL and fence
  list [--json] [PATTERN]            list held locks whose names match PATTERN
  watch [flags] PATTERN              a live view of those locks, refreshed every second
  acquire [flags] NAME               take NAME, print its token, leave the lease to its TTL
  extend --token T [flags] NAME      extend the lease of token T ('dlock acquire')
  release --token T NAME             end the lease of token T
  release --force NAME               delete a lock whoever holds it (operators only)
  demo [flags]                       run the batch-dispatch demo
  demo seckill [flags]               run the flash-sale demo
  version                            print the version

Redis comes from --redis URL or $REDIS_URL: redis:// (rediss:// for TLS),
unix://, redis+sentinel://HOST:PORT?master_name=NAME[&addr=HOST:PORT...] for
Sentinel, redis+cluster://HOST:PORT[?addr=HOST:PORT...] for a Cluster;
$REDIS_PASSWORD, or the file $REDIS_PASSWORD_FILE names, supplies a password
the URL lacks (keep it out of argv).
Run 'dlock COMMAND -h' for a command's flags.

exit codes: 0 ok (run: the command's status), 2 usage, 3 configuration,
4 Redis unreachable (or too many quorum nodes failing), 5 not acquired (held
by another holder), 6 lock lost, 126/127 command not runnable, 130 (143 for
SIGTERM) interrupted (while waiting for the lock, or a watch)
`

// run is the whole program, callable in-process from tests.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	cmd, rest := args[0], args[1:]
	if wantsHelp(rest) {
		stderr = stdout
	}
	switch cmd {
	case "run":
		return cmdRun(ctx, rest, stdout, stderr)
	case "inspect":
		return cmdInspect(ctx, rest, stdout, stderr)
	case "list":
		return cmdList(ctx, rest, stdout, stderr)
	case "watch":
		return cmdWatch(ctx, rest, stdout, stderr)
	case "release":
		return cmdRelease(ctx, rest, stdout, stderr)
	case "acquire":
		return cmdAcquire(ctx, rest, stdout, stderr)
	case "extend":
		return cmdExtend(ctx, rest, stdout, stderr)
	case "demo":
		return cmdDemo(ctx, rest, stdout, stderr)
	case demoSchedulerCmd:
		return cmdScheduler(ctx, rest, stdout, stderr)
	case runGuardianCmd:
		return cmdRunGuardian(rest, stderr)
	case "version", "--version", "-version":
		fmt.Fprintf(stdout, "dlock %s (%s)\n", versionString(), runtime.Version())
		return exitOK
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	}
	fmt.Fprintf(stderr, "dlock: unknown command %q (try 'dlock help')\n", cmd)
	return exitUsage
}

// cliError is an error with the exit code it maps to.
type cliError struct {
	code int
	err  error
}

func (e *cliError) Error() string { return e.err.Error() }
func (e *cliError) Unwrap() error { return e.err }

func fail(code int, format string, args ...any) error {
	return &cliError{code: code, err: fmt.Errorf(format, args...)}
}

// report prints err on one line and returns its exit code.
func report(stderr io.Writer, err error) int {
	msg := strings.ReplaceAll(err.Error(), "\n", "; ")
	msg = strings.TrimPrefix(msg, "dlock: ")
	fmt.Fprintf(stderr, "dlock: %s\n", msg)
	var ce *cliError
	if errors.As(err, &ce) {
		return ce.code
	}
	return exitFailure
}

// reportDemo reports err as report does, unless ctx was cancelled (Ctrl-C,
// SIGTERM): then the demo was interrupted, whatever step noticed it.
func reportDemo(ctx context.Context, stderr io.Writer, err error) int {
	if ctx.Err() != nil {
		err = interrupted(ctx, "(the demo stopped)")
	}
	return report(stderr, err)
}

// wantsHelp reports whether a command's flags (before a "--") ask for its
// help: it goes to stdout then, as asked-for output, and not to stderr.
func wantsHelp(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-h", "-help", "--help":
			return true
		}
	}
	return false
}

// newFlagSet returns a flag set that reports errors instead of exiting.
func newFlagSet(name string, stderr io.Writer, help string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: dlock %s\n\nflags:\n", help)
		fs.PrintDefaults()
	}
	return fs
}

// parse parses flags; it returns the exit code to stop with, or -1 to go on.
// Asked-for help prints the usage; an error, one line that says where the
// help is (the flag package would print the whole usage after it).
func parse(fs *flag.FlagSet, args []string) int {
	usage, out := fs.Usage, fs.Output()
	fs.Usage = func() {}
	fs.SetOutput(io.Discard)
	unwrap := explainDurations(fs)
	err := fs.Parse(args)
	unwrap()
	fs.Usage = usage
	fs.SetOutput(out)
	switch {
	case err == nil:
		return -1
	case errors.Is(err, flag.ErrHelp):
		usage()
		return exitOK
	}
	fmt.Fprintf(out, "dlock %s: %v (see 'dlock %s -h')\n", fs.Name(), err, fs.Name())
	return exitUsage
}

// explainDurations makes fs's duration flags refuse a value that is not a
// duration with the unit it lacks (the flag package says only "parse
// error"), until the func it returns puts them back, for the help's
// listing of their type.
func explainDurations(fs *flag.FlagSet) (unwrap func()) {
	var wrapped []*flag.Flag
	fs.VisitAll(func(f *flag.Flag) {
		if g, ok := f.Value.(flag.Getter); ok {
			if _, ok := g.Get().(time.Duration); ok {
				f.Value = durationFlag{g}
				wrapped = append(wrapped, f)
			}
		}
	})
	return func() {
		for _, f := range wrapped {
			f.Value = f.Value.(durationFlag).Getter
		}
	}
}

// durationFlag is a duration flag whose refusal says what a duration is.
type durationFlag struct{ flag.Getter }

func (d durationFlag) Set(s string) error {
	if _, err := time.ParseDuration(s); err != nil {
		return fmt.Errorf("%s: a duration is a number with a unit, such as 10s, 500ms or 2m", strings.TrimPrefix(err.Error(), "time: "))
	}
	return d.Getter.Set(s)
}

// parseMixed parses flags that may come before or after the arguments
// (dlock inspect NAME --json); "--" ends the flags. It returns the
// arguments, and the exit code to stop with, or -1 to go on.
func parseMixed(fs *flag.FlagSet, args []string) ([]string, int) {
	var positional []string
	for {
		if code := parse(fs, args); code >= 0 {
			return nil, code
		}
		consumed := len(args) - fs.NArg()
		if consumed > 0 && args[consumed-1] == "--" { // the flags ended here
			return append(positional, fs.Args()...), -1
		}
		if fs.NArg() == 0 {
			return positional, -1
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// urlList is a repeatable --redis flag.
type urlList []string

func (u *urlList) String() string     { return strings.Join(*u, ",") }
func (u *urlList) Set(v string) error { *u = append(*u, v); return nil }
