// Command dlock runs commands under distributed locks kept in Redis,
// inspects and clears locks, and runs the batch-dispatch demo.
//
//	dlock run [flags] NAME -- CMD [ARG...]   hold NAME while CMD runs (a distributed flock)
//	dlock inspect [--json] NAME...           show holder, remaining TTL and fence
//	dlock list [--json] [PATTERN]            list held locks (SCAN, never KEYS)
//	dlock release --force NAME               delete a lock whoever holds it
//	dlock demo [flags]                       the batch-dispatch scenario, with and without a lock
//	dlock demo seckill [flags]               a flash sale: lock versus one Lua script
//
// Redis is given by --redis URL or the REDIS_URL environment variable
// (redis://, rediss:// or unix:// URLs); a password can stay out of argv in
// REDIS_URL or REDIS_PASSWORD.
//
// Exit codes: 0 success (or, for run, the command's own status); 2 usage
// error; 3 bad configuration (such as a malformed URL); 4 Redis unreachable
// or failing; 5 lock not acquired; 6 lock lost while the command ran (it was
// terminated); 126 command not executable; 127 command not found.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
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
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `usage: dlock COMMAND [flags] [args]

commands:
  run [flags] NAME -- CMD [ARG...]   hold the lock NAME while CMD runs
  inspect [--json] NAME...           show a lock's holder, remaining TTL and fence
  list [--json] [PATTERN]            list held locks whose names match PATTERN
  release --force NAME               delete a lock whoever holds it (operators only)
  demo [flags]                       run the batch-dispatch demo
  demo seckill [flags]               run the flash-sale demo
  version                            print the version

Redis comes from --redis URL or $REDIS_URL (redis://, rediss://, unix://);
$REDIS_PASSWORD supplies a password the URL lacks.
Run 'dlock COMMAND -h' for a command's flags.

exit codes: 0 ok (run: the command's status), 2 usage, 3 configuration,
4 Redis unreachable, 5 not acquired, 6 lock lost, 126/127 command not runnable
`

// run is the whole program, callable in-process from tests.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "run":
		return cmdRun(ctx, rest, stdout, stderr)
	case "inspect":
		return cmdInspect(ctx, rest, stdout, stderr)
	case "list":
		return cmdList(ctx, rest, stdout, stderr)
	case "release":
		return cmdRelease(ctx, rest, stdout, stderr)
	case "demo":
		return cmdDemo(ctx, rest, stdout, stderr)
	case demoSchedulerCmd:
		return cmdScheduler(ctx, rest, stdout, stderr)
	case "version", "--version", "-version":
		fmt.Fprintf(stdout, "dlock %s\n", version)
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
func parse(fs *flag.FlagSet, args []string) int {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage // the flag package has printed the error and usage
	}
	return -1
}

// urlList is a repeatable --redis flag.
type urlList []string

func (u *urlList) String() string     { return strings.Join(*u, ",") }
func (u *urlList) Set(v string) error { *u = append(*u, v); return nil }
