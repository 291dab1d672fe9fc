package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/dlockio/dlock"
)

// dlock acquire, extend and release --token: a lease across the steps of
// a shell script. acquire prints the lease's token and leaves the lease
// to its TTL; the others resume it by that token (dlock.Resume).

const acquireHelp = `acquire [flags] NAME

Takes the lock NAME, prints its lease token on stdout and exits, leaving the
lease to end at --ttl: nothing extends it after dlock exits. A later step
passes the token to 'dlock extend' and 'dlock release --token', perhaps from
another process or machine:

  token=$(dlock acquire --ttl 30m nightly) || exit 0
  ...
  dlock release --token "$token" nightly

-n N, --read and --write take a permit of a semaphore or a hold of a
read-write lock instead, as 'dlock run' does; extend and release must be
given the same flag.

exit status: 0 held (the token is printed); 5 not acquired (held by another
holder); 2 usage; 3 configuration; 4 Redis unreachable; 130 (143 for
SIGTERM) if interrupted while waiting`

const extendHelp = `extend --token TOKEN [flags] NAME

Sets the lease of TOKEN (printed by 'dlock acquire') on NAME to end --ttl
from now, shorter or longer. Pass the -n, --read or --write that acquired it.

exit status: 0 extended; 6 the lease has ended (released, expired, or not
this name's); 2 usage; 3 configuration; 4 Redis unreachable`

// leaseFlags are the flags that say what kind of hold a lease is.
type leaseFlags struct {
	permits     *int
	read, write *bool
}

func kindFlags(fs *flag.FlagSet) leaseFlags {
	return leaseFlags{
		permits: fs.Int("n", 1, "a permit of the semaphore NAME of `N` permits (1: the lock NAME)"),
		read:    fs.Bool("read", false, "a read hold of the read-write lock NAME"),
		write:   fs.Bool("write", false, "the write hold of the read-write lock NAME"),
	}
}

// holdable returns what the flags name on c: the lock name, a permit of
// its semaphore, or a hold of its read-write lock.
func (f leaseFlags) holdable(c *dlock.Client, name string) (holdable, error) {
	h := holdable{c: c, name: name}
	var err error
	switch {
	case *f.permits < 1:
		return h, fmt.Errorf("-n %d: must be at least 1", *f.permits)
	case *f.read && *f.write || (*f.read || *f.write) && *f.permits > 1:
		return h, errors.New("at most one of --read, --write and -n")
	case *f.permits > 1:
		h.sem, err = c.Semaphore(name, *f.permits)
	case *f.read || *f.write:
		var rw *dlock.RWMutex
		if rw, err = c.RWMutex(name); err == nil {
			h.rw = rw.Reader()
			if *f.write {
				h.rw = rw.Writer()
			}
		}
	}
	if err != nil {
		return h, errors.New(strings.TrimPrefix(err.Error(), "dlock: "))
	}
	return h, nil
}

// oneName parses args for cmd, which takes one NAME, and returns it, or
// the exit code to stop with.
func oneName(cmd string, fs *flag.FlagSet, args []string, stderr io.Writer) (string, int) {
	names, code := parseMixed(fs, args)
	switch {
	case code >= 0:
		return "", code
	case len(names) != 1:
		fmt.Fprintf(stderr, "dlock %s: expected exactly one NAME (see 'dlock %s -h')\n", cmd, cmd)
		return "", exitUsage
	}
	return names[0], -1
}

func cmdAcquire(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("acquire", stderr, acquireHelp)
	to := targetFlags(fs)
	ttl := fs.Duration("ttl", dlock.DefaultTTL, "how long the lease lasts: nothing extends it after dlock exits")
	wait := waitFlag(fs)
	meta := fs.String("meta", "", "the holder `metadata` that 'dlock inspect' shows (default hostname:pid)")
	kf := kindFlags(fs)
	name, code := oneName("acquire", fs, args, stderr)
	if code >= 0 {
		return code
	}
	metaSet := false
	fs.Visit(func(f *flag.Flag) { metaSet = metaSet || f.Name == "meta" })
	opts, err := runOptions(*ttl, 0, *meta, metaSet)
	if err != nil {
		fmt.Fprintf(stderr, "dlock acquire: %v\n", err)
		return exitUsage
	}
	c, closeFn, err := to.client(ctx, append(opts, dlock.WithAutoExtend(false))...)
	if err != nil {
		return report(stderr, err)
	}
	defer closeFn()
	h, err := kf.holdable(c, name)
	if err != nil {
		fmt.Fprintf(stderr, "dlock acquire: %v\n", err)
		return exitUsage
	}
	l, err := acquireFor(ctx, h, *wait, redactAll(redisURLs(to.urls)))
	if err != nil {
		return report(stderr, err)
	}
	fmt.Fprintln(stdout, l.Token())
	return exitOK
}

func cmdExtend(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("extend", stderr, extendHelp)
	to := targetFlags(fs)
	token := fs.String("token", "", "required: the lease's `token`, as 'dlock acquire' printed it")
	ttl := fs.Duration("ttl", dlock.DefaultTTL, "the lease ends this long from now")
	kf := kindFlags(fs)
	name, code := oneName("extend", fs, args, stderr)
	if code >= 0 {
		return code
	}
	if err := checkTTL(*ttl); err != nil {
		fmt.Fprintf(stderr, "dlock extend: %v\n", err)
		return exitUsage
	}
	_, closeFn, code := resumeLease(ctx, "extend", name, *token, kf, to, *ttl, stderr)
	if code >= 0 {
		return code
	}
	closeFn()
	fmt.Fprintf(stdout, "extended %q: it ends %v from now\n", name, *ttl)
	return exitOK
}

// releaseByToken is dlock release --token: the lease of token ends now.
func releaseByToken(ctx context.Context, name, token string, kf leaseFlags, to *target, stdout, stderr io.Writer) int {
	l, closeFn, code := resumeLease(ctx, "release", name, token, kf, to, dlock.MinTTL*10, stderr)
	if code >= 0 {
		return code
	}
	defer closeFn()
	if err := l.Release(context.WithoutCancel(ctx)); err != nil {
		return report(stderr, libError(err))
	}
	fmt.Fprintf(stdout, "released %q\n", name)
	return exitOK
}

// resumeLease takes over the lease of token on name (dlock.Resume),
// extending it to ttl, on a Client without a watchdog. It returns the
// Lock and what closes its Client, or the exit code to stop with.
func resumeLease(ctx context.Context, cmd, name, token string, kf leaseFlags, to *target, ttl time.Duration, stderr io.Writer) (*dlock.Lock, func(), int) {
	if token == "" {
		fmt.Fprintf(stderr, "dlock %s: missing --token (see 'dlock %s -h')\n", cmd, cmd)
		return nil, nil, exitUsage
	}
	c, closeFn, err := to.client(ctx, dlock.WithAutoExtend(false))
	if err != nil {
		return nil, nil, report(stderr, err)
	}
	h, err := kf.holdable(c, name)
	if err != nil {
		closeFn()
		fmt.Fprintf(stderr, "dlock %s: %v\n", cmd, err)
		return nil, nil, exitUsage
	}
	opts := []dlock.LockOption{dlock.Resume(token), dlock.LeaseTTL(ttl)}
	var l *dlock.Lock
	switch {
	case h.rw != nil:
		l, err = h.rw.TryAcquire(ctx, opts...)
	case h.sem != nil:
		l, err = h.sem.TryAcquire(ctx, opts...)
	default:
		l, err = c.TryAcquire(ctx, name, opts...)
	}
	switch {
	case err == nil:
		return l, closeFn, -1
	case errors.Is(err, dlock.ErrInvalid):
		err = &cliError{code: exitUsage, err: asStep(cmd, name, token, err)}
	case errors.Is(err, dlock.ErrNotHeld):
		err = fail(exitLost, "%s %q: the lease of that token has ended (released, expired, or another name's or kind's)", cmd, name)
	case errors.Is(err, dlock.ErrWrongType):
		err = &cliError{code: exitConfig, err: fmt.Errorf("%w (give the -n, --read or --write that acquired the token)", asStep(cmd, name, token, err))}
	default:
		err = &cliError{code: exitRedis, err: asStep(cmd, name, token, err)}
	}
	closeFn()
	return nil, nil, report(stderr, err)
}

// stepError is an error of a step of the CLI's, worded as the step, that
// matches the library's error it comes from.
type stepError struct {
	msg string
	err error
}

func (e *stepError) Error() string { return e.msg }
func (e *stepError) Unwrap() error { return e.err }

// asStep rewords err, the library's error of the acquisition by which
// extend or release (cmd) resumes the lease of token on name, as an error
// of cmd: the library names the call ("acquire" NAME) and its option
// (Resume(TOKEN)), neither of which the user of the command made.
func asStep(cmd, name, token string, err error) error {
	r := strings.NewReplacer(
		fmt.Sprintf("acquire %q: Resume(%q): ", name, token), fmt.Sprintf("%s %q: --token %q: ", cmd, name, token),
		fmt.Sprintf("acquire %q: ", name), fmt.Sprintf("%s %q: ", cmd, name))
	return &stepError{msg: r.Replace(err.Error()), err: err}
}
