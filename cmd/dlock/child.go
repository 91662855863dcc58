package main

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/dlock-dev/dlock"
)

// fromTerminal reports whether s is one that a terminal sends to its
// foreground job (Ctrl-C, Ctrl-\, a hangup).
func fromTerminal(s os.Signal) bool {
	return s == syscall.SIGINT || s == syscall.SIGQUIT || s == syscall.SIGHUP
}

// waitDelay bounds how long dlock waits, after the command exited, for
// output that still flows through pipes it copies (only when its own
// stdout or stderr is not a file, as in tests): a leftover grandchild may
// hold them open.
const waitDelay = time.Second

// child is the command that dlock run supervises: how it is started (with
// a guard where one is needed), signalled, stopped and waited for. Its
// methods are called from one goroutine, supervise's.
type child struct {
	c    *cli
	argv []string
	cmd  *exec.Cmd // the command, or the guard that runs it
	// interactive: the command stays in dlock's process group, with the
	// terminal (see newChild).
	interactive bool
	// target is what dlock signals: the command's process group, or, in
	// dlock's own group, the command itself. Set by start.
	target int
	tstp   chan os.Signal // SIGTSTP, caught in terminal mode (see catchStop)
	exited chan struct{}  // closed once the command has exited
	// The guard's pipe (see wrapInGuard); close closes both ends.
	guardR, guardW *os.File
	// terminate's state: SIGTERM was sent; SIGKILL is due at killAt, when
	// killC fires.
	terminated bool
	killTimer  *time.Timer
	killC      <-chan time.Time
	killAt     time.Time
}

// newChild prepares argv to run under lock, on dlock's streams and with the
// lock's DLOCK_KEY, DLOCK_TOKEN and DLOCK_FENCE.
func newChild(c *cli, lock *dlock.Lock, argv []string) *child {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = c.stdin, c.stdout, c.stderr
	cmd.Env = append(withoutDlockEnv(os.Environ()),
		"DLOCK_KEY="+lock.Key(),
		"DLOCK_TOKEN="+lock.Token(),
		"DLOCK_FENCE="+strconv.FormatUint(lock.Fence(), 10))
	// With a terminal on stdin the command stays in dlock's process group,
	// which the shell made the terminal's foreground job, as flock(1) does:
	// it can read the terminal, and the terminal's signals (Ctrl-C, Ctrl-Z,
	// a hangup) reach it and dlock together, so that Ctrl-Z stops the job
	// and fg resumes it. Otherwise it gets a process group of its own, and
	// dlock signals the whole group.
	f, _ := c.stdin.(*os.File)
	interactive := f != nil && isTTY(f)
	cmd.SysProcAttr = commandAttr(!interactive)
	cmd.WaitDelay = waitDelay
	return &child{c: c, argv: argv, cmd: cmd, interactive: interactive, exited: make(chan struct{})}
}

// start starts the command and passes on the signals from sigs that came
// while it started. It returns -1 once the command runs; else it reports
// why it does not and returns the exit status to end with.
func (ch *child) start(sigs <-chan os.Signal) int {
	if code := ch.wrapInGuard(); code >= 0 {
		return code
	}
	ch.catchStop()
	started := ch.fork()
	// Signals that come while the command starts are passed on once it
	// runs: in terminal mode, one from the terminal reached dlock's group
	// before the command was in it (if it was, the command gets it twice).
	var err error
	stopped := false
	var early []os.Signal
waitStart:
	for {
		select {
		case err = <-started:
			break waitStart
		case s := <-sigs:
			early = append(early, s)
		case <-ch.tstp:
			stopped = true
			_ = syscall.Kill(0, syscall.SIGCONT)
		}
	}
	if stopped && err == nil {
		// The user's Ctrl-Z, now that the command can get it too (and
		// dlock, through tstp, in supervise).
		_ = syscall.Kill(0, syscall.SIGTSTP)
	}
	if err != nil {
		ch.c.errorf("cannot run %s: %s", ch.argv[0], errText(err))
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
			return exitNotFound
		}
		return exitCannotExec
	}
	ch.target = -ch.cmd.Process.Pid
	if ch.interactive {
		ch.target = ch.cmd.Process.Pid
		ch.c.debugf("running %s (pid %d, with the terminal)", ch.argv[0], ch.target)
	} else {
		ch.c.debugf("running %s (process group %d)", ch.argv[0], -ch.target)
	}
	for _, s := range early {
		ch.c.debugf("forwarding %s, which came as the command started", signalName(s))
		_ = syscall.Kill(ch.target, s.(syscall.Signal))
	}
	return -1
}

// wrapInGuard has the guard run the command where it needs one. It returns
// -1, or, when the guard cannot be set up, exitCannotExec.
func (ch *child) wrapInGuard() int {
	// Without a parent-death signal, a guard in the command's group kills
	// it when dlock dies (see guard.go). Not with the terminal: the user
	// sees that job.
	if ch.interactive || !guarded() {
		return -1
	}
	self, err := os.Executable()
	if err != nil {
		ch.c.errorf("cannot find dlock's own binary to guard the command: %s", err)
		return exitCannotExec
	}
	r, w, err := os.Pipe()
	if err != nil {
		ch.c.errorf("cannot guard the command: %s", err)
		return exitCannotExec
	}
	ch.guardR, ch.guardW = r, w // closed by close
	cmd := ch.cmd
	guard := exec.Command(self, append([]string{guardCommand, "--"}, ch.argv...)...)
	guard.Stdin, guard.Stdout, guard.Stderr, guard.Env = cmd.Stdin, cmd.Stdout, cmd.Stderr, cmd.Env
	// Its own group, which it kills; no parent-death signal, which
	// would kill the guard before it could act.
	guard.SysProcAttr, guard.WaitDelay = &syscall.SysProcAttr{Setpgid: true}, cmd.WaitDelay
	guard.ExtraFiles = []*os.File{r} // fd 3 (guardFD)
	ch.cmd = guard
	return -1
}

// catchStop catches SIGTSTP in terminal mode, on tstp.
func (ch *child) catchStop() {
	// Ctrl-Z in terminal mode. Left to its default, a SIGTSTP that comes
	// while the command starts stops its child between fork and exec, while
	// the thread that forked it waits for the exec (Linux forks as vfork
	// does): dlock cannot complete its stop, and the shell never sees the
	// job stopped, nor can the user resume it. So dlock catches SIGTSTP:
	// while the command starts, it lets the child go on to exec (SIGCONT to
	// the job) and stops the job once the command runs; afterwards the
	// command stops by itself (the default) and dlock stops itself with
	// SIGSTOP, so that the shell sees the job stopped, and fg resumes both.
	if ch.interactive {
		ch.tstp = make(chan os.Signal, 1)
		signal.Notify(ch.tstp, syscall.SIGTSTP)
	}
}

// fork starts the command from a goroutine of its own, which sends Start's
// error on the channel it returns, then waits for the command and closes
// exited.
func (ch *child) fork() <-chan error {
	started := make(chan error, 1)
	go func() {
		// The parent-death signal fires when the thread that forked the
		// child ends, not the process: this goroutine keeps its thread
		// locked, and so alive, until the child has exited.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := ch.cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		_ = ch.cmd.Wait() // the status is in cmd.ProcessState
		close(ch.exited)
	}()
	return started
}

// forward passes s on to the command.
func (ch *child) forward(s os.Signal) {
	if ch.interactive && fromTerminal(s) {
		// The terminal sent it to the whole job: the command has
		// it already.
		return
	}
	ch.c.debugf("forwarding %s to the command", signalName(s))
	_ = syscall.Kill(ch.target, s.(syscall.Signal))
}

// terminate sends SIGTERM to the group, unless it was sent already, and
// SIGKILL at the time at (or earlier, if an earlier kill is already due).
func (ch *child) terminate(at time.Time) {
	if !ch.terminated {
		ch.terminated = true
		_ = syscall.Kill(ch.target, syscall.SIGTERM)
		if ch.interactive {
			// The whole job, so that what the command started stops
			// too (dlock gets it as well, and forwards it once more
			// to the command); SIGKILL, below, reaches the command
			// only.
			_ = syscall.Kill(0, syscall.SIGTERM)
		}
	}
	if !ch.killAt.IsZero() && !at.Before(ch.killAt) {
		return
	}
	ch.killAt = at
	d := time.Until(at)
	if d <= 0 {
		_ = syscall.Kill(ch.target, syscall.SIGKILL)
		ch.killC = nil
		return
	}
	if ch.killTimer == nil {
		ch.killTimer = time.NewTimer(d)
	} else {
		ch.killTimer.Reset(d)
	}
	ch.killC = ch.killTimer.C
}

// kill sends SIGKILL to the command when killC fires: the time terminate
// set has come.
func (ch *child) kill() {
	ch.killC = nil
	ch.c.debugf("sending SIGKILL to the command")
	_ = syscall.Kill(ch.target, syscall.SIGKILL)
}

// status is the exit status of the command, once exited is closed.
func (ch *child) status() int { return exitStatus(ch.cmd.ProcessState) }

// leftovers deals with what is left of the command's group once the
// command has exited: killed when the lock was lost, else reported.
func (ch *child) leftovers(lost bool) {
	// The leader has exited; what is left of its group runs without the
	// lock once it is released.
	switch {
	case ch.interactive && lost:
		_ = syscall.Kill(0, syscall.SIGTERM) // the job, what is left of it
	case ch.interactive:
	case lost:
		_ = syscall.Kill(ch.target, syscall.SIGKILL)
	case syscall.Kill(ch.target, 0) == nil:
		ch.c.warnf("the command left processes running in its process group %d; they run without the lock", -ch.target)
	}
}

// close stops the kill timer and the catching of SIGTSTP, and closes the
// guard's pipe.
func (ch *child) close() {
	if ch.killTimer != nil {
		ch.killTimer.Stop()
	}
	if ch.tstp != nil {
		signal.Stop(ch.tstp)
	}
	if ch.guardW != nil {
		_ = ch.guardW.Close() // the guard sees EOF: after the command, or when dlock dies
	}
	if ch.guardR != nil {
		_ = ch.guardR.Close()
	}
}

// exitStatus is the command's exit status as a shell reports it: 128+N when
// it was killed by signal N.
func exitStatus(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// withoutDlockEnv drops DLOCK_KEY, DLOCK_TOKEN and DLOCK_FENCE inherited from
// an enclosing dlock run, so that the command sees its own lock's.
func withoutDlockEnv(env []string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, "DLOCK_KEY=") && !strings.HasPrefix(kv, "DLOCK_TOKEN=") && !strings.HasPrefix(kv, "DLOCK_FENCE=") {
			out = append(out, kv)
		}
	}
	return out
}
