package main

// The guardian keeps the command of `dlock run` under the lock whatever
// happens to dlock itself.
//
// dlock does not start CMD itself. It re-executes its own binary
// (/proc/self/exe, so the very same version runs even if the file was
// replaced) as a guardian, in a process group of its own, and the guardian
// starts CMD in a new process group. The guardian does nothing but watch:
//
//   - dlock holds the write end of a pipe, the lifeline, whose read end is
//     the guardian's fd 3. When dlock dies, however it dies (kill -9
//     included), the kernel closes the write end and the guardian reads EOF.
//     It then sends CMD's whole process group SIGTERM (and SIGCONT, in case
//     it is stopped) and SIGKILL at the kill deadline: --grace from then, but
//     never later than --margin before the end of the lease, after which
//     another dlock could hold the lock. Pdeathsig would reach CMD's leader
//     only, not the processes it started.
//   - Over the lifeline, dlock also sends the end of the lease, on the
//     system-wide monotonic clock, each time an extension moves it. Should
//     the lease come within --margin of its end with no word from dlock
//     (dlock stopped with SIGSTOP, frozen, or its extensions failing), the
//     guardian stops CMD's group with SIGSTOP, and continues it if a later
//     deadline arrives. So no work is done unprotected even when dlock is
//     alive but cannot extend. A deadline of 0 means dlock found the lock
//     lost and runs the loss path itself (SIGTERM, SIGKILL after --grace);
//     the guardian then enforces no deadline but SIGKILLs the group at that
//     path's end if dlock dies during it.
//   - The guardian reports CMD's process ID (its group ID) to dlock on a
//     second pipe, its fd 4, or why CMD could not be started. dlock
//     forwards signals to the group itself, stops it on SIGTSTP (see
//     supervise), and gets CMD's exit status as the guardian's.
//
// The guardian never writes to the terminal (it is in a background process
// group, where a write could stop it with SIGTTOU), and it ignores SIGINT,
// SIGTERM and SIGHUP: it must outlive dlock to do its work. If the guardian
// is killed all the same, dlock SIGKILLs CMD's group; CMD's leader gets
// SIGKILL from Pdeathsig if both die.

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"github.com/dlockio/dlock"
)

// runGuardianCmd is the hidden command of the guardian process.
const runGuardianCmd = "run-guardian"

// The guardian's inherited descriptors.
const (
	lifelineFD = 3 // read end: lease deadlines from dlock; EOF when dlock dies
	reportFD   = 4 // write end: "pid N" or "fail CODE MESSAGE", one line
)

// monoNow returns CLOCK_MONOTONIC in nanoseconds: the clock dlock and its
// guardian share, unlike the process-relative monotonic readings of Go's
// time.Time, and one that no change of the wall clock moves.
func monoNow() int64 {
	var ts syscall.Timespec
	// CLOCK_MONOTONIC is 1 on Linux.
	if _, _, errno := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, 1, uintptr(unsafe.Pointer(&ts)), 0); errno != 0 {
		panic("clock_gettime(CLOCK_MONOTONIC): " + errno.Error())
	}
	return ts.Nano()
}

// guardian is dlock's side of a running guardian process.
type guardian struct {
	pgid   int        // CMD's process group
	life   *os.File   // the lifeline's write end
	sent   time.Time  // the validity last sent
	lostIt bool       // the lock was lost: no more deadlines
	exited chan error // the guardian's Wait
}

// startGuardian starts the guardian, which starts argv with env added to
// dlock's environment. If argv could not be started, it returns nil and
// the exit code to end with, having said why on stderr.
func startGuardian(l *dlock.Lock, argv, env []string, grace, margin time.Duration, stdout, stderr io.Writer) (*guardian, int) {
	self := "/proc/self/exe"
	if _, err := os.Stat(self); err != nil {
		if self, err = os.Executable(); err != nil {
			fmt.Fprintf(stderr, "dlock: cannot find the dlock executable to start its guardian: %v\n", err)
			return nil, exitFailure
		}
	}
	lifeR, lifeW, err := os.Pipe()
	if err != nil {
		fmt.Fprintf(stderr, "dlock: guardian pipe: %v\n", err)
		return nil, exitFailure
	}
	repR, repW, err := os.Pipe()
	if err != nil {
		lifeR.Close()
		lifeW.Close()
		fmt.Fprintf(stderr, "dlock: guardian pipe: %v\n", err)
		return nil, exitFailure
	}
	defer repR.Close()
	g := &guardian{life: lifeW, exited: make(chan error, 1)}
	g.beat(l) // the first deadline, waiting in the pipe before the guardian starts CMD

	cmd := exec.Command(self, append([]string{runGuardianCmd, "--grace", grace.String(), "--margin", margin.String(), "--"}, argv...)...)
	cmd.Args[0] = os.Args[0]
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	cmd.ExtraFiles = []*os.File{lifeR, repW} // fds 3 and 4
	// Its own process group: the terminal's signals are for dlock, which
	// passes them on, and a kill of dlock's whole job leaves the guardian.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	lifeR.Close()
	repW.Close()
	if err != nil {
		lifeW.Close()
		fmt.Fprintf(stderr, "dlock: cannot start the guardian process: %v\n", err)
		return nil, exitFailure
	}
	go func() { g.exited <- cmd.Wait() }()

	line, _ := bufio.NewReader(repR).ReadString('\n')
	verb, rest, _ := strings.Cut(strings.TrimSuffix(line, "\n"), " ")
	switch verb {
	case "pid":
		if g.pgid, err = strconv.Atoi(rest); err == nil && g.pgid > 0 {
			return g, 0
		}
	case "fail":
		codeStr, msg, _ := strings.Cut(rest, " ")
		fmt.Fprintf(stderr, "dlock: %s\n", msg)
		lifeW.Close()
		<-g.exited
		if code, err := strconv.Atoi(codeStr); err == nil {
			return nil, code
		}
		return nil, exitFailure
	}
	// The guardian died before it said anything, or said nonsense.
	lifeW.Close()
	cmd.Process.Kill()
	err = <-g.exited
	fmt.Fprintf(stderr, "dlock: the guardian process failed (%v) before CMD ran\n", err)
	return nil, exitFailure
}

// signal sends sig to CMD's process group.
func (g *guardian) signal(sig syscall.Signal) { syscall.Kill(-g.pgid, sig) }

// beat sends the guardian the lease's end if an extension moved it.
func (g *guardian) beat(l *dlock.Lock) {
	if g.lostIt {
		return
	}
	vu := l.ValidUntil()
	if vu.Equal(g.sent) {
		return
	}
	g.sent = vu
	g.send(max(monoNow()+int64(time.Until(vu)), 1))
}

// lost tells the guardian that dlock found the lock lost and terminates
// CMD itself; no more deadlines follow.
func (g *guardian) lost() {
	if !g.lostIt {
		g.lostIt = true
		g.send(0)
	}
}

// send writes one message on the lifeline. It never blocks the supervisor
// for long: a guardian that does not read is dead or stopped, and then the
// message does not matter.
func (g *guardian) send(v int64) {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(v))
	g.life.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	g.life.Write(b[:])
}

// close closes the lifeline, once the guardian has exited.
func (g *guardian) close() { g.life.Close() }

// readDeadline reads one lifeline message.
func readDeadline(r io.Reader) (int64, error) {
	var b [8]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return 0, err
	}
	return int64(binary.LittleEndian.Uint64(b[:])), nil
}

// isPipe reports whether fd is an open pipe.
func isPipe(fd int) bool {
	var st syscall.Stat_t
	return syscall.Fstat(fd, &st) == nil && st.Mode&syscall.S_IFMT == syscall.S_IFIFO
}

// cmdRunGuardian is the guardian process; see the top of this file.
func cmdRunGuardian(args []string, stderr io.Writer) int {
	fs := newFlagSet(runGuardianCmd, stderr, runGuardianCmd+" --grace D --margin D -- CMD [ARG...]\n\nThe guardian process of dlock run; it is not meant to be run by hand.")
	grace := fs.Duration("grace", 10*time.Second, "SIGTERM to SIGKILL if dlock dies")
	margin := fs.Duration("margin", time.Second, "act this long before the lease ends")
	if code := parse(fs, args); code >= 0 {
		return code
	}
	argv := fs.Args()
	if len(argv) == 0 || !isPipe(lifelineFD) || !isPipe(reportFD) {
		fmt.Fprintln(stderr, "dlock: run-guardian is started by dlock run, not by hand")
		return exitUsage
	}
	// Neither pipe goes on to CMD: a copy of the lifeline there would be
	// harmless, but the report pipe would never see EOF.
	syscall.CloseOnExec(lifelineFD)
	syscall.CloseOnExec(reportFD)
	life := os.NewFile(lifelineFD, "lifeline")
	report := os.NewFile(reportFD, "report")
	// It outlives dlock on purpose: main already turns SIGINT and SIGTERM
	// into the cancellation of a context that the guardian does not use.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGHUP)

	leaseEnd, err := readDeadline(life)
	if err != nil {
		return exitFailure // dlock is already gone: start nothing
	}
	// CMD's processes that their parent left are the guardian's to reap
	// (PR_SET_CHILD_SUBREAPER), not init's, which may never reap them (a
	// container whose first process is dlock): a dead one must not keep
	// the group, and so the lock, alive.
	syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		code := exitNoExec
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			code = exitNotFound
		}
		msg := strings.ReplaceAll(fmt.Sprintf("cannot run %q: %v", argv[0], err), "\n", "; ")
		fmt.Fprintf(report, "fail %d %s\n", code, msg)
		return code
	}
	pgid := cmd.Process.Pid
	fmt.Fprintf(report, "pid %d\n", pgid)
	report.Close()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	msgs := make(chan int64)
	gone := make(chan struct{}) // closed when dlock has died
	go func() {
		defer close(gone)
		for {
			v, err := readDeadline(life)
			if err != nil {
				return
			}
			msgs <- v
		}
	}()

	var (
		lostAt  int64 // when dlock said the lock was lost; 0 if it has not
		stopped bool  // we stopped the group at the lease's end
		timer   = time.NewTimer(time.Hour)
		code    int              // CMD's exit code, once its leader exited
		poll    <-chan time.Time // while the group outlives its leader
	)
	arm := func() {
		timer.Stop()
		if leaseEnd > 0 {
			timer.Reset(time.Duration(leaseEnd - int64(*margin) - monoNow()))
		}
	}
	arm()
	for {
		select {
		case err := <-exited:
			// The leader exited. A job it left in the background is in
			// its group, which runs under the lock until it has all
			// exited: dlock releases the lock when the guardian exits.
			code, exited = exitCode(err), nil
			if groupGone(pgid, true) {
				return code
			}
			poll = time.Tick(10 * time.Millisecond)
		case <-poll:
			if groupGone(pgid, true) {
				return code
			}
		case v := <-msgs:
			if v == 0 {
				leaseEnd, lostAt = 0, monoNow()
			} else {
				leaseEnd = v
			}
			arm()
			if stopped && (v == 0 || v-int64(*margin) > monoNow()) {
				syscall.Kill(-pgid, syscall.SIGCONT)
				stopped = false
			}
		case <-timer.C:
			// No extension reached us and the lease is about to end:
			// dlock is stopped or frozen, or cannot reach Redis.
			syscall.Kill(-pgid, syscall.SIGSTOP)
			stopped = true
		case <-gone:
			killAt := monoNow() + int64(*grace)
			if leaseEnd > 0 {
				killAt = min(killAt, leaseEnd-int64(*margin))
			}
			if lostAt > 0 {
				killAt = min(killAt, lostAt+int64(*grace))
			}
			return terminate(pgid, exited, killAt)
		}
	}
}

// prSetChildSubreaper is prctl's PR_SET_CHILD_SUBREAPER.
const prSetChildSubreaper = 36

// groupGone reports whether no process of the group pgid is left. With
// reap, once the leader is reaped (by its exec.Cmd), it first reaps the
// group's members that ended as the guardian's children (see
// prSetChildSubreaper).
func groupGone(pgid int, reap bool) bool {
	for reap {
		var ws syscall.WaitStatus
		if pid, err := syscall.Wait4(-pgid, &ws, syscall.WNOHANG, nil); pid <= 0 || err != nil {
			break
		}
	}
	return syscall.Kill(-pgid, 0) == syscall.ESRCH
}

// terminate ends CMD's process group once dlock has died: SIGTERM (and
// SIGCONT, so that a stopped group gets it) now, SIGKILL at killAt unless
// the whole group has exited by then, and at once if killAt has passed.
// A member that died but is not reaped yet still counts, until the
// guardian reaps it (once the leader is reaped), never past killAt.
func terminate(pgid int, exited <-chan error, killAt int64) int {
	code := exitFailure
	if monoNow() < killAt {
		syscall.Kill(-pgid, syscall.SIGTERM)
		syscall.Kill(-pgid, syscall.SIGCONT)
		poll := time.NewTicker(10 * time.Millisecond)
		defer poll.Stop()
		for monoNow() < killAt && !groupGone(pgid, exited == nil) {
			select {
			case err := <-exited: // reap the leader; the rest of the group may live on
				code, exited = exitCode(err), nil
			case <-poll.C:
			}
		}
	}
	syscall.Kill(-pgid, syscall.SIGKILL)
	if exited != nil {
		select { // reap the leader, so that it does not linger as a zombie
		case err := <-exited:
			code = exitCode(err)
		case <-time.After(time.Second):
		}
	}
	return code
}
