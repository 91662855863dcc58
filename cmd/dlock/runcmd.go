package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"runtime"
	"slices"
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

// forwarded are the signals dlock passes on to the command's process group.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP,
	syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

// waitDelay bounds how long dlock waits, after the command exited, for
// output that still flows through pipes it copies (only when its own
// stdout or stderr is not a file, as in tests): a leftover grandchild may
// hold them open.
const waitDelay = time.Second

// run is dlock run: acquire, supervise the command, release.
func (c *cli) run(ctx context.Context, args []string) int {
	fset := newFlagSet("run")
	var rf redisFlags
	rf.register(fset, c)
	ttl := fset.Duration("ttl", dlock.DefaultTTL, "lease length")
	wait := fset.Duration("wait", 0, "how long to wait")
	grace := fset.Duration("kill-grace", 5*time.Second, "TERM to KILL")
	metadata := fset.String("metadata", "", "who holds the lock (default: host, pid and command)")
	limit := fset.Int("limit", 1, "how many copies may run at once across the fleet")
	if code := c.parseFlags(fset, args); code >= 0 {
		return code
	}
	rest := fset.Args()
	if len(rest) == 0 {
		return c.usageError("run", "missing KEY: dlock run [flags] KEY -- COMMAND [ARG]...")
	}
	if i := len(args) - len(rest); rest[0] == "--" || (i > 0 && args[i-1] == "--") {
		// "dlock run -- nice date": the flag package took the -- away, but
		// what follows it is the command, not KEY.
		return c.usageError("run", "missing KEY before --: dlock run [flags] KEY -- COMMAND [ARG]...")
	}
	key, rest := rest[0], rest[1:]
	switch {
	case len(rest) > 0 && rest[0] == "--":
		rest = rest[1:]
	case len(rest) > 0 && strings.HasPrefix(rest[0], "-"):
		// Flags between KEY and --: accepted, since -- marks where the
		// command begins.
		dashes := slices.Index(rest, "--")
		if dashes < 0 {
			return c.usageError("run", "flag %s after KEY with no -- before the command: dlock run [flags] KEY -- COMMAND [ARG]...", rest[0])
		}
		if code := c.parseFlags(fset, rest[:dashes]); code >= 0 {
			return code
		}
		if fset.NArg() > 0 {
			return c.usageError("run", "unexpected %q before --: one KEY only", fset.Arg(0))
		}
		rest = rest[dashes+1:]
	}
	if len(rest) == 0 {
		return c.usageError("run", "missing COMMAND after KEY %q: dlock run [flags] KEY -- COMMAND [ARG]...", key)
	}
	switch {
	case *ttl < dlock.MinTTL:
		return c.usageError("run", "--ttl %s is too short: the minimum is %s", *ttl, dlock.MinTTL)
	case *ttl%time.Millisecond != 0:
		return c.usageError("run", "--ttl %s is not a whole number of milliseconds", *ttl)
	case *wait < 0:
		return c.usageError("run", "--wait %s is negative", *wait)
	case *grace < 0:
		return c.usageError("run", "--kill-grace %s is negative", *grace)
	case *limit < 1:
		return c.usageError("run", "--limit %d: at least one copy must be allowed to run", *limit)
	}
	if most := maxGrace(*ttl); *grace > most {
		if flagSet(fset, "kill-grace") {
			return c.usageError("run", "--kill-grace %s does not fit --ttl %s: at most %s, so that a renewal still within its time does not stop the command",
				*grace, *ttl, most)
		}
		*grace = most // the default, cut to fit a short TTL
	}
	t, code := c.open(ctx, "run", &rf)
	if t == nil {
		return code
	}
	defer t.Close()

	// Signals are caught from here on: one that arrives while waiting for
	// the lock ends the wait, and the command does not run.
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)

	if *metadata == "" {
		*metadata = defaultMetadata(rest)
	}
	if len(*metadata) > dlock.MaxMetadata {
		return c.usageError("run", "--metadata is %d bytes, longer than %d", len(*metadata), dlock.MaxMetadata)
	}
	lock, code := c.acquire(ctx, t, key, *ttl, *wait, sigs, dlock.WithTTL(*ttl), dlock.WithMetadata(*metadata), dlock.WithLimit(*limit))
	if lock == nil {
		return code
	}
	c.debugf("acquired %q on %s (fence %d, ttl %s)", key, t.describe(), lock.Fence(), *ttl)
	status, lost := c.supervise(ctx, lock, rest, *grace, sigs)

	err := lock.Release(context.WithoutCancel(ctx))
	switch {
	case lost:
		return exitLockLost
	case errors.Is(err, dlock.ErrNotHeld):
		// Lost after the command had ended: its work was done under the lock.
		c.warnf("lock %q had expired or been taken by the time the command ended", key)
	case err != nil:
		c.warnf("could not confirm the release of %q; it expires within %s: %s", key, *ttl, errText(err))
	default:
		c.debugf("released %q", key)
	}
	return status
}

// maxGrace is the longest --kill-grace that fits ttl. The command is
// stopped once the validity left is down to the grace (and killMargin); a
// lock's validity is TTL less the clock-drift margin (TTL/100 + 2ms) from
// the start of its last confirmed renewal; the next renewal starts TTL/3
// after that one, and the library waits for its answers for the node
// timeout (TTL/5, at most 1s; dlock run sets no other). So the grace must
// leave the renewal its whole node timeout: at most 2·TTL/3 less the drift,
// the node timeout and killMargin (18.6s for the default TTL of 30s, 404ms
// for 1s). It is positive for every TTL from dlock.MinTTL.
func maxGrace(ttl time.Duration) time.Duration {
	drift := ttl/100 + 2*time.Millisecond
	nodeTimeout := min(ttl/5, time.Second)
	return max(2*ttl/3-drift-nodeTimeout-killMargin(ttl), 0).Truncate(time.Millisecond)
}

// killMargin is how long before the end of the lock's validity the command
// gets SIGKILL when renewals go unconfirmed: the margin by which the library
// reports Lost early (TTL/20, at most 50ms), so that the command is gone by
// the time Lost says the lock may be taken.
func killMargin(ttl time.Duration) time.Duration { return min(ttl/20, 50*time.Millisecond) }

// earlier is the earlier of a and b.
func earlier(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// flagSet reports whether the flag name was given on the command line.
func flagSet(fset interface{ Visit(func(*flag.Flag)) }, name string) bool {
	set := false
	fset.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// defaultMetadata says who holds a lock taken by dlock run: the host, the
// process id of dlock, and the command's name (not its arguments, which may
// hold secrets: --metadata says more), cut to fit dlock.MaxMetadata on a
// character boundary.
func defaultMetadata(argv []string) string {
	host, _ := os.Hostname()
	s := fmt.Sprintf("host=%s pid=%d cmd=%s", host, os.Getpid(), argv[0])
	if len(s) > dlock.MaxMetadata {
		s = strings.ToValidUTF8(s[:dlock.MaxMetadata-3], "") + "..."
	}
	return s
}

// acquire takes the lock: one attempt when wait is 0, else waiting up to
// wait. It returns the lock, or nil and the exit status.
func (c *cli) acquire(ctx context.Context, t *target, key string, ttl, wait time.Duration, sigs <-chan os.Signal, opts ...dlock.LockOption) (*dlock.Lock, int) {
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		lock *dlock.Lock
		err  error
	}
	done := make(chan result, 1)
	go func() {
		var deadline time.Time
		if wait > 0 {
			deadline = time.Now().Add(wait)
		}
		// One attempt; or Acquire, which waits for a busy lock and tries
		// again on unavailable nodes until the deadline, and returns a
		// misconfiguration at once.
		var k *dlock.Lock
		var err error
		if wait > 0 {
			wctx, wcancel := context.WithDeadline(actx, deadline)
			k, err = t.locker.Acquire(wctx, key, opts...)
			wcancel()
		} else {
			k, err = t.locker.TryAcquire(actx, key, opts...)
		}
		done <- result{k, err}
	}()

	// The inspection of the URLs (see target.inspect) runs meanwhile: a
	// mistake it finds ends the wait, and the command does not run. A
	// signal ends the wait too, also one that comes once the lock is
	// acquired, while the inspection goes on.
	var r result
	var sig os.Signal
	doneC, ctxDone, inspection := (<-chan result)(done), ctx.Done(), t.inspection
	for doneC != nil || (inspection != nil && sig == nil) {
		select {
		case r = <-doneC:
			doneC = nil
			if r.lock != nil && inspection != nil {
				c.debugf("acquired %q; checking the Redis URLs before running the command", key)
			}
		case s := <-sigs:
			if sig == nil {
				sig = s
			}
			cancel()
		case <-ctxDone:
			ctxDone = nil
			if sig == nil {
				sig = syscall.SIGTERM
			}
			cancel()
		case <-inspection:
			inspection = nil
			if t.wrong != nil {
				cancel()
			}
		}
	}
	if sig != nil {
		if r.lock != nil {
			_ = r.lock.Release(context.WithoutCancel(ctx))
		}
		c.notef("%s while waiting for %q; the command did not run", signalName(sig), key)
		return nil, 128 + int(sig.(syscall.Signal))
	}
	if code := c.inspected(t); code >= 0 { // done: it does not wait
		if r.lock != nil {
			_ = r.lock.Release(context.WithoutCancel(ctx))
		}
		return nil, code
	}
	switch err := r.err; {
	case err == nil:
		return r.lock, exitOK
	case errors.Is(err, dlock.ErrInvalid) && !errors.Is(err, dlock.ErrMisconfigured):
		// (A key held with another --limit is both: the fleet's copies
		// disagree, 78, below.)
		return nil, c.usageError("run", "%s", errText(err))
	case !errors.Is(err, dlock.ErrNotAcquired):
		if code := c.redisFailure(t, err); code >= 0 {
			return nil, code
		}
		c.errorf("could not acquire %q: %s; the command did not run", key, errText(err))
		return nil, exitFailure
	case wait > 0:
		c.notef("%q is still held elsewhere after waiting %s; the command did not run", key, wait)
	default:
		c.notef("%q is held elsewhere; the command did not run", key)
		if !c.quiet {
			c.hintf("use --wait DURATION to wait for it")
		}
	}
	return nil, exitNotAcquired
}

// supervise runs the command and waits for four things at once: its exit,
// a signal to forward, the lock's validity running down to the grace
// without a confirmed renewal, and the loss of the lock. It returns the
// command's exit status, and whether the lock was lost (or could have
// expired within the grace) while it ran.
func (c *cli) supervise(ctx context.Context, lock *dlock.Lock, argv []string, grace time.Duration, sigs <-chan os.Signal) (status int, lost bool) {
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
	// Without a parent-death signal, a guard in the command's group kills
	// it when dlock dies (see guard.go). Not with the terminal: the user
	// sees that job.
	if !interactive && guarded() {
		self, err := os.Executable()
		if err != nil {
			c.errorf("cannot find dlock's own binary to guard the command: %s", err)
			return exitCannotExec, false
		}
		r, w, err := os.Pipe()
		if err != nil {
			c.errorf("cannot guard the command: %s", err)
			return exitCannotExec, false
		}
		defer r.Close()
		defer w.Close() // the guard sees EOF: after the command, or when dlock dies
		guard := exec.Command(self, append([]string{guardCommand, "--"}, argv...)...)
		guard.Stdin, guard.Stdout, guard.Stderr, guard.Env = cmd.Stdin, cmd.Stdout, cmd.Stderr, cmd.Env
		// Its own group, which it kills; no parent-death signal, which
		// would kill the guard before it could act.
		guard.SysProcAttr, guard.WaitDelay = &syscall.SysProcAttr{Setpgid: true}, cmd.WaitDelay
		guard.ExtraFiles = []*os.File{r} // fd 3 (guardFD)
		cmd = guard
	}

	// Ctrl-Z in terminal mode. Left to its default, a SIGTSTP that comes
	// while the command starts stops its child between fork and exec, while
	// the thread that forked it waits for the exec (Linux forks as vfork
	// does): dlock cannot complete its stop, and the shell never sees the
	// job stopped, nor can the user resume it. So dlock catches SIGTSTP:
	// while the command starts, it lets the child go on to exec (SIGCONT to
	// the job) and stops the job once the command runs; afterwards the
	// command stops by itself (the default) and dlock stops itself with
	// SIGSTOP, so that the shell sees the job stopped, and fg resumes both.
	var tstp chan os.Signal
	if interactive {
		tstp = make(chan os.Signal, 1)
		signal.Notify(tstp, syscall.SIGTSTP)
		defer signal.Stop(tstp)
	}

	started := make(chan error, 1)
	exited := make(chan struct{})
	go func() {
		// The parent-death signal fires when the thread that forked the
		// child ends, not the process: this goroutine keeps its thread
		// locked, and so alive, until the child has exited.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		_ = cmd.Wait() // the status is in cmd.ProcessState
		close(exited)
	}()
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
		case <-tstp:
			stopped = true
			_ = syscall.Kill(0, syscall.SIGCONT)
		}
	}
	if stopped && err == nil {
		// The user's Ctrl-Z, now that the command can get it too (and
		// dlock, through tstp, below).
		_ = syscall.Kill(0, syscall.SIGTSTP)
	}
	if err != nil {
		c.errorf("cannot run %s: %s", argv[0], errText(err))
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
			return exitNotFound, false
		}
		return exitCannotExec, false
	}
	// target is what dlock signals: the command's process group, or, in
	// dlock's own group, the command itself.
	target := -cmd.Process.Pid
	if interactive {
		target = cmd.Process.Pid
		c.debugf("running %s (pid %d, with the terminal)", argv[0], target)
	} else {
		c.debugf("running %s (process group %d)", argv[0], -target)
	}
	for _, s := range early {
		c.debugf("forwarding %s, which came as the command started", signalName(s))
		_ = syscall.Kill(target, s.(syscall.Signal))
	}

	// terminate sends SIGTERM to the group, unless it was sent already, and
	// SIGKILL at killAt (or earlier, if an earlier kill is already due).
	var killTimer *time.Timer
	var killC <-chan time.Time
	var killAt time.Time
	terminated := false
	terminate := func(at time.Time) {
		if !terminated {
			terminated = true
			_ = syscall.Kill(target, syscall.SIGTERM)
			if interactive {
				// The whole job, so that what the command started stops
				// too (dlock gets it as well, and forwards it once more
				// to the command); SIGKILL, below, reaches the command
				// only.
				_ = syscall.Kill(0, syscall.SIGTERM)
			}
		}
		if !killAt.IsZero() && !at.Before(killAt) {
			return
		}
		killAt = at
		d := time.Until(at)
		if d <= 0 {
			_ = syscall.Kill(target, syscall.SIGKILL)
			killC = nil
			return
		}
		if killTimer == nil {
			killTimer = time.NewTimer(d)
		} else {
			killTimer.Reset(d)
		}
		killC = killTimer.C
	}
	defer func() {
		if killTimer != nil {
			killTimer.Stop()
		}
	}()

	// The grace is kept while renewals go unconfirmed: risk fires when the
	// validity left is down to the grace (and killMargin); if no renewal
	// moved it meanwhile, the command gets SIGTERM then and SIGKILL at
	// killMargin before the validity ends. A confirmed renewal only moves
	// the timer on: it fires at most once per renewal.
	margin := killMargin(lock.TTL())
	riskAt := func() time.Time { return lock.ValidUntil().Add(-grace - margin) }
	risk := time.NewTimer(time.Until(riskAt()))
	defer risk.Stop()
	riskC := risk.C

	lostC, ctxDone := lock.Lost(), ctx.Done()
loop:
	for {
		select {
		case <-exited:
			break loop
		case <-riskC:
			select {
			case <-exited:
				break loop // it ended meanwhile: nothing to stop
			default:
			}
			v := lock.ValidUntil()
			if v.IsZero() {
				riskC = nil // a quorum said it is gone: Lost, below
				continue
			}
			if d := time.Until(riskAt()); d > 0 {
				risk.Reset(d)
				continue
			}
			riskC, lost = nil, true
			at := earlier(time.Now().Add(grace), v.Add(-margin))
			c.errorf("renewals of the lock %q went unconfirmed; it could expire in %s: stopping the command (SIGTERM now, SIGKILL in %s)",
				lock.Key(), max(time.Until(v), 0).Round(time.Millisecond), max(time.Until(at), 0).Round(time.Millisecond))
			terminate(at)
		case <-tstp:
			// The command got the SIGTSTP too, and stops by default.
			_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
		case s := <-sigs:
			if interactive && fromTerminal(s) {
				// The terminal sent it to the whole job: the command has
				// it already.
				continue
			}
			c.debugf("forwarding %s to the command", signalName(s))
			_ = syscall.Kill(target, s.(syscall.Signal))
		case <-ctxDone:
			ctxDone = nil
			c.debugf("stopping the command: SIGTERM now, SIGKILL in %s", grace)
			terminate(time.Now().Add(grace))
		case <-lostC:
			lostC, riskC = nil, nil
			// SIGKILL after the grace, but never once the lock could have
			// expired: another host may start the same job from then on.
			// A lock that a quorum said is gone (released with --force,
			// taken by another token) has no validity left: SIGKILL now.
			at := earlier(time.Now().Add(grace), lock.ValidUntil())
			switch {
			case lost:
				c.errorf("lost the lock %q while the command stopped; SIGKILL in %s",
					lock.Key(), max(time.Until(earlier(at, killAt)), 0).Round(time.Millisecond))
			default:
				c.errorf("lost the lock %q while the command ran; stopping it (SIGTERM now, SIGKILL in %s)",
					lock.Key(), max(time.Until(at), 0).Round(time.Millisecond))
			}
			lost = true
			terminate(at)
		case <-killC:
			killC = nil
			c.debugf("sending SIGKILL to the command")
			_ = syscall.Kill(target, syscall.SIGKILL)
		}
	}
	status = exitStatus(cmd.ProcessState)
	if !lost {
		select {
		case <-lock.Lost():
			// Lost as the command ended: it may have run unprotected.
			lost = true
			c.errorf("lost the lock %q as the command ended (status %d)", lock.Key(), status)
		default:
		}
	}
	// The leader has exited; what is left of its group runs without the
	// lock once it is released.
	switch {
	case interactive && lost:
		_ = syscall.Kill(0, syscall.SIGTERM) // the job, what is left of it
	case interactive:
	case lost:
		_ = syscall.Kill(target, syscall.SIGKILL)
	case syscall.Kill(target, 0) == nil:
		c.warnf("the command left processes running in its process group %d; they run without the lock", -target)
	}
	c.debugf("the command exited with status %d", status)
	return status, lost
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

// signalName is "SIGTERM" for syscall.SIGTERM.
func signalName(s os.Signal) string {
	switch s {
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGHUP:
		return "SIGHUP"
	case syscall.SIGQUIT:
		return "SIGQUIT"
	case syscall.SIGUSR1:
		return "SIGUSR1"
	case syscall.SIGUSR2:
		return "SIGUSR2"
	}
	return s.String()
}

// errText is err's message on one line, without the "dlock: " prefix of the
// library's errors, which the CLI's own messages carry already.
// The library's advice to a Go program that met MOVED through a plain
// client is left out too: the CLI's hint names --cluster instead.
func errText(err error) string {
	s := strings.ReplaceAll(strings.ReplaceAll(err.Error(), "dlock: ", ""), "\n", "; ")
	return clusterAdvice.ReplaceAllString(s, "")
}

var clusterAdvice = regexp.MustCompile(` \(the server is a node of a Redis Cluster, [^)]*\)`)
