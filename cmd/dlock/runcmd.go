package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/dlock-dev/dlock"
)

// forwarded are the signals dlock passes on to the command's process group.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP,
	syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

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
	shared := fset.Bool("shared", false, "a shared hold: runs beside other --shared holders, never beside an exclusive one")
	onRequest := fset.String("on-request", "", "the signal the command gets at a release request (dlock request)")
	if code := c.parseFlags(fset, args); code >= 0 {
		return code
	}
	key, rest, code := c.keyAndCommand(fset, args)
	if code >= 0 {
		return code
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
	case *shared && flagSet(fset, "limit"):
		return c.usageError("run", "--shared and --limit do not combine: shared holders have no limit")
	}
	askSig, ok := parseRequestSignal(*onRequest)
	if !ok {
		return c.usageError("run", "--on-request %s: not one of INT, TERM, HUP, QUIT, USR1, USR2", *onRequest)
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
	how := dlock.WithLimit(*limit)
	t.limit, t.shared = *limit, *shared
	if *shared {
		how, t.limit = dlock.WithShared(), 0
	}
	lock, code := c.acquire(ctx, t, key, *ttl, *wait, sigs, dlock.WithTTL(*ttl), dlock.WithMetadata(*metadata), how)
	if lock == nil {
		return code
	}
	c.debugf("acquired %q on %s (fence %d, ttl %s)", key, t.describe(), lock.Fence(), *ttl)
	status, lost := c.supervise(ctx, lock, rest, *grace, sigs, askSig)
	return c.released(ctx, lock, status, lost)
}

// released releases the lock once the command has ended with status, and
// returns dlock's exit status: the command's own only when something
// proves that the command ran under the lock to its end, else
// exitLockLost (lost: supervise saw the lock lost while it ran).
//
// What proves it: a release that a quorum confirmed after the command
// ended. release.lua deletes the key only where it still holds this lock's
// token, and a token once gone from a key is never written back, so the
// key held it from the acquisition to the release, the command's end
// included. A release that could not be confirmed (nodes down or slow)
// leaves the validity of the last confirmed renewal, which covered the
// command's end (Lost had not closed then: see supervise), and no sign that
// the lock was taken: the command's status, with a warning. A release
// refused (ErrNotHeld: the key expired, or was taken or deleted, as by
// dlock release --force) proves the opposite at some instant since the last
// confirmed renewal, which began before the command ended (the next one is
// due only TTL/3 later): the command may have run without the lock, whose
// validity, computed from that renewal, cannot see a deletion. Exit 76.
func (c *cli) released(ctx context.Context, lock *dlock.Lock, status int, lost bool) int {
	err := lock.Release(context.WithoutCancel(ctx))
	switch {
	case lost:
		return exitLockLost
	case errors.Is(err, dlock.ErrNotHeld):
		c.errorf("the lock %q was gone when the command ended (status %d): it expired, or was taken or deleted (dlock release --force) since its last renewal, so the command may have run without it",
			lock.Key(), status)
		return exitLockLost
	case err != nil:
		c.warnf("could not confirm the release of %q; it expires within %s: %s", lock.Key(), lock.TTL(), errText(err))
	default:
		c.debugf("released %q", lock.Key())
	}
	return status
}

// keyAndCommand splits what follows run's flags into KEY and the command
// (after --, and after any flags between KEY and --, which it parses into
// fset). It returns -1 to go on, else the exit status to end with.
func (c *cli) keyAndCommand(fset *flag.FlagSet, args []string) (key string, argv []string, code int) {
	rest := fset.Args()
	if len(rest) == 0 {
		return "", nil, c.usageError("run", "missing KEY: dlock run [flags] KEY -- COMMAND [ARG]...")
	}
	if i := len(args) - len(rest); rest[0] == "--" || (i > 0 && args[i-1] == "--") {
		// "dlock run -- nice date": the flag package took the -- away, but
		// what follows it is the command, not KEY.
		return "", nil, c.usageError("run", "missing KEY before --: dlock run [flags] KEY -- COMMAND [ARG]...")
	}
	key, rest = rest[0], rest[1:]
	switch {
	case len(rest) > 0 && rest[0] == "--":
		rest = rest[1:]
	case len(rest) > 0 && strings.HasPrefix(rest[0], "-"):
		// Flags between KEY and --: accepted, since -- marks where the
		// command begins.
		dashes := slices.Index(rest, "--")
		if dashes < 0 {
			return "", nil, c.usageError("run", "flag %s after KEY with no -- before the command: dlock run [flags] KEY -- COMMAND [ARG]...", rest[0])
		}
		if code := c.parseFlags(fset, rest[:dashes]); code >= 0 {
			return "", nil, code
		}
		if fset.NArg() > 0 {
			return "", nil, c.usageError("run", "unexpected %q before --: one KEY only", fset.Arg(0))
		}
		rest = rest[dashes+1:]
	}
	if len(rest) == 0 {
		return "", nil, c.usageError("run", "missing COMMAND after KEY %q: dlock run [flags] KEY -- COMMAND [ARG]...", key)
	}
	return key, rest, -1
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
	if r.err != nil {
		return nil, c.notAcquired(t, key, wait, r.err)
	}
	return r.lock, exitOK
}

// notAcquired reports err, the failure of acquire to take the lock, and
// returns the exit status.
func (c *cli) notAcquired(t *target, key string, wait time.Duration, err error) int {
	switch {
	case errors.Is(err, dlock.ErrInvalid) && !errors.Is(err, dlock.ErrMisconfigured):
		// (A key held with another --limit is both: the fleet's copies
		// disagree, 78, below.)
		return c.usageError("run", "%s", errText(err))
	case !errors.Is(err, dlock.ErrNotAcquired):
		if code := c.redisFailure(t, err); code >= 0 {
			return code
		}
		c.errorf("could not acquire %q: %s; the command did not run", key, errText(err))
		return exitFailure
	case wait > 0:
		c.notef("%s after waiting %s; the command did not run", busyText(t, key, true), wait)
	default:
		c.notef("%s; the command did not run", busyText(t, key, false))
		if !c.quiet {
			c.hintf("use --wait DURATION to wait for it")
		}
	}
	return exitNotAcquired
}

// busyText says why the lock key could not be taken: held elsewhere, all
// the permits of a --limit taken, or, for --shared, an exclusive holder or
// one waiting. still: after waiting.
func busyText(t *target, key string, still bool) string {
	switch {
	case t.limit > 1 && still:
		return fmt.Sprintf("all %d permits of %q were still taken", t.limit, key)
	case t.limit > 1:
		return fmt.Sprintf("all %d permits of %q are taken", t.limit, key)
	case t.shared && still:
		return fmt.Sprintf("%q was still held, or wanted by a waiting copy, without --shared", key)
	case t.shared:
		return fmt.Sprintf("%q is held, or wanted by a waiting copy, without --shared", key)
	case still:
		return fmt.Sprintf("%q is still held elsewhere", key)
	}
	return fmt.Sprintf("%q is held elsewhere", key)
}

// supervise runs the command and waits for five things at once: its exit,
// a signal to forward, the lock's validity running down to the grace
// without a confirmed renewal, the loss of the lock, and, with
// --on-request (askSig not 0), a release request, which the command gets
// as askSig, once. It returns the
// command's exit status, and whether the lock was lost (or could have
// expired within the grace) while it ran.
func (c *cli) supervise(ctx context.Context, lock *dlock.Lock, argv []string, grace time.Duration, sigs <-chan os.Signal,
	askSig syscall.Signal) (status int, lost bool) {
	ch := newChild(c, lock, argv)
	defer ch.close()
	if code := ch.start(sigs); code >= 0 {
		return code, false
	}

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

	lostC, ctxDone, asked := lock.Lost(), ctx.Done(), askedC(lock, askSig)
loop:
	for {
		select {
		case <-ch.exited:
			break loop
		case <-riskC:
			select {
			case <-ch.exited:
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
			ch.terminate(at)
		case <-ch.tstp:
			// The command got the SIGTSTP too, and stops by default.
			_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
		case s := <-sigs:
			ch.forward(s)
		case <-asked:
			asked = nil
			ch.passRequest(lock, askSig)
		case <-ctxDone:
			ctxDone = nil
			c.debugf("stopping the command: SIGTERM now, SIGKILL in %s", grace)
			ch.terminate(time.Now().Add(grace))
		case <-lostC:
			lostC, riskC = nil, nil
			c.stopLost(ch, lock, grace, lost)
			lost = true
		case <-ch.killC:
			ch.kill()
		}
	}
	status = ch.status()
	if !lost {
		select {
		case <-lock.Lost():
			// Lost as the command ended: it may have run unprotected.
			lost = true
			c.errorf("lost the lock %q as the command ended (status %d)", lock.Key(), status)
		default:
		}
	}
	ch.leftovers(lost)
	c.debugf("the command exited with status %d", status)
	return status, lost
}

// stopLost stops the command once the lock is lost (Lost closed):
// SIGTERM, unless stopping (the validity ran down to the grace before, and
// SIGTERM was sent then), and SIGKILL after the grace, but never once the
// lock could have expired: another host may start the same job from then
// on. A lock that a quorum said is gone (ValidUntil is zero: released with
// --force, or taken by another token) has no validity left to protect:
// another host may run the job already, and killing the command at once
// would not undo that, only deny it its clean-up. It gets the whole grace.
func (c *cli) stopLost(ch *child, lock *dlock.Lock, grace time.Duration, stopping bool) {
	v := lock.ValidUntil()
	at := time.Now().Add(grace)
	if !v.IsZero() {
		at = earlier(at, v)
	}
	switch {
	case stopping:
		c.errorf("lost the lock %q while the command stopped; SIGKILL in %s",
			lock.Key(), max(time.Until(earlier(at, ch.killAt)), 0).Round(time.Millisecond))
	case v.IsZero():
		c.errorf("lost the lock %q while the command ran: it was released or taken elsewhere; stopping the command (SIGTERM now, SIGKILL in %s)",
			lock.Key(), grace)
	default:
		c.errorf("lost the lock %q while the command ran; stopping it (SIGTERM now, SIGKILL in %s)",
			lock.Key(), max(time.Until(at), 0).Round(time.Millisecond))
	}
	ch.terminate(at)
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
