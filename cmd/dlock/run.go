package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/dlockio/dlock"
)

const runHelp = `run [flags] NAME -- CMD [ARG...]

Holds the lock NAME while CMD runs, like flock(1) across machines. The lock is
extended every ttl/3 while CMD runs. CMD gets DLOCK_NAME, DLOCK_KEY,
DLOCK_TOKEN and DLOCK_FENCE in its environment (pass DLOCK_FENCE to the
resource you protect). SIGINT, SIGTERM and SIGHUP are forwarded to CMD. If
the lock is lost while CMD runs, CMD's process group gets SIGTERM and, after
--grace, SIGKILL. CMD runs in its own process group, and gets SIGTERM if
dlock itself is killed.

exit status: CMD's (128+N if killed by signal N); 5 if the lock was not
acquired; 6 if it was lost while CMD ran; 2 usage; 3 configuration;
4 Redis unreachable; 126/127 CMD not executable/not found`

func cmdRun(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("run", stderr, runHelp)
	var redisFlag urlList
	fs.Var(&redisFlag, "redis", "Redis `URL` (default $REDIS_URL); repeat it for a quorum of independent masters (Redlock)")
	ttl := fs.Duration("ttl", dlock.DefaultTTL, "lease time; a holder that dies blocks others at most this long")
	wait := fs.Duration("wait", -1, "how long to wait for the lock: 0 tries once, negative waits until interrupted")
	grace := fs.Duration("grace", 10*time.Second, "time CMD has between SIGTERM and SIGKILL after the lock is lost")
	if code := parse(fs, args); code >= 0 {
		return code
	}
	rest := fs.Args()
	switch {
	case len(rest) == 0:
		fmt.Fprintln(stderr, "dlock run: missing NAME -- CMD (see 'dlock run -h')")
		return exitUsage
	case len(rest) < 2 || rest[1] != "--":
		fmt.Fprintln(stderr, "dlock run: expected NAME -- CMD [ARG...], with flags before NAME")
		return exitUsage
	case len(rest) < 3:
		fmt.Fprintln(stderr, "dlock run: missing CMD after --")
		return exitUsage
	case *grace < 0:
		fmt.Fprintln(stderr, "dlock run: --grace must not be negative")
		return exitUsage
	}
	name, argv := rest[0], rest[2:]

	c, closeFn, err := lockClient(ctx, redisFlag, dlock.WithTTL(*ttl))
	if err != nil {
		return report(stderr, err)
	}
	defer closeFn()

	l, err := acquireFor(ctx, c, name, *wait)
	if err != nil {
		return report(stderr, err)
	}
	release := func() error {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		return l.Release(rctx)
	}

	code, lostErr := supervise(l, argv, *grace, stdout, stderr)
	if err := release(); err != nil && lostErr == nil {
		if errors.Is(err, dlock.ErrNotHeld) {
			lostErr = err
		} else {
			fmt.Fprintf(stderr, "dlock: warning: release %q: %v (it expires within %v)\n", name, err, *ttl)
		}
	}
	if lostErr != nil {
		fmt.Fprintf(stderr, "dlock: lock %q was lost while the command ran: %v\n", name, lostErr)
		return exitLost
	}
	return code
}

// acquireFor takes name, waiting up to wait (0: once; negative: until ctx ends).
func acquireFor(ctx context.Context, c *dlock.Client, name string, wait time.Duration) (*dlock.Lock, error) {
	var (
		l   *dlock.Lock
		err error
	)
	switch {
	case wait == 0:
		l, err = c.TryAcquire(ctx, name)
	case wait > 0:
		wctx, cancel := context.WithTimeout(ctx, wait)
		defer cancel()
		l, err = c.Acquire(wctx, name)
	default:
		l, err = c.Acquire(ctx, name)
	}
	switch {
	case err == nil:
		return l, nil
	case errors.Is(err, dlock.ErrInvalid):
		return nil, &cliError{code: exitUsage, err: err}
	case errors.Is(err, dlock.ErrNotAcquired):
		return nil, fail(exitNotAcquired, "lock %q is held by another owner", name)
	}
	return nil, &cliError{code: exitRedis, err: err}
}

// supervise runs argv while l is held. It returns the exit code for the
// command's status and, if the lock was lost while it ran, why.
func supervise(l *dlock.Lock, argv []string, grace time.Duration, stdout, stderr io.Writer) (int, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(),
		"DLOCK_NAME="+l.Name(),
		"DLOCK_KEY="+l.Key(),
		"DLOCK_TOKEN="+l.Token(),
		"DLOCK_FENCE="+strconv.FormatInt(l.Fence(), 10),
	)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	// Its own process group, so that a lost lock stops everything it started;
	// and SIGTERM if dlock itself dies (no one would extend the lock then).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}

	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)

	if err := cmd.Start(); err != nil {
		fmt.Fprintf(stderr, "dlock: cannot run %q: %v\n", argv[0], err)
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			return exitNotFound, nil
		}
		return exitNoExec, nil
	}
	pgid := cmd.Process.Pid
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	var (
		lostErr error
		kill    <-chan time.Time
		lost    = l.Done()
	)
	for {
		select {
		case err := <-exited:
			return exitCode(err), lostErr
		case sig := <-sigs:
			syscall.Kill(-pgid, sig.(syscall.Signal))
		case <-lost:
			lost = nil
			if err := l.Err(); errors.Is(err, dlock.ErrNotHeld) {
				lostErr = err
				fmt.Fprintf(stderr, "dlock: lock %q lost (%v); sending SIGTERM, SIGKILL in %v\n", l.Name(), err, grace)
				syscall.Kill(-pgid, syscall.SIGTERM)
				kill = time.After(grace)
			}
		case <-kill:
			kill = nil
			syscall.Kill(-pgid, syscall.SIGKILL)
		}
	}
}

// exitCode maps the command's wait status to an exit code.
func exitCode(err error) int {
	if err == nil {
		return exitOK
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	return exitFailure
}
