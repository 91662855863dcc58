package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"

	"github.com/dlock-dev/dlock"
)

// requestSignals are the signals that dlock run --on-request may send.
var requestSignals = map[string]syscall.Signal{
	"INT": syscall.SIGINT, "TERM": syscall.SIGTERM, "HUP": syscall.SIGHUP,
	"QUIT": syscall.SIGQUIT, "USR1": syscall.SIGUSR1, "USR2": syscall.SIGUSR2,
}

// parseRequestSignal reads --on-request's value: a name with or without
// SIG, in any case; "" is none (0).
func parseRequestSignal(name string) (syscall.Signal, bool) {
	if name == "" {
		return 0, true
	}
	s, ok := requestSignals[strings.TrimPrefix(strings.ToUpper(name), "SIG")]
	return s, ok
}

// askedC is the channel on which supervise hears a release request for
// lock: nil (never ready) without --on-request, so that dlock run does not
// listen for requests unless asked to.
func askedC(lock *dlock.Lock, sig syscall.Signal) <-chan struct{} {
	if sig == 0 {
		return nil
	}
	return lock.Asked()
}

// passRequest sends sig to the command once a release request came.
func (ch *child) passRequest(lock *dlock.Lock, sig syscall.Signal) {
	why := ""
	if r := lock.AskedReason(); r != "" {
		why = fmt.Sprintf(" (%q)", r)
	}
	ch.c.notef("%s asked to release %q%s: sending %s to the command", lock.AskedBy(), lock.Key(), why, signalName(sig))
	_ = syscall.Kill(ch.target, sig)
}

// request is dlock request.
func (c *cli) request(ctx context.Context, args []string) int {
	fs := newFlagSet("request")
	var rf redisFlags
	rf.register(fs, c)
	reason := fs.String("reason", "", "why the holder is asked to let go")
	key, code := c.keyArg(fs, args)
	if code >= 0 {
		return code
	}
	if len(*reason) > dlock.MaxMetadata {
		return c.usageError("request", "--reason is %d bytes, longer than %d", len(*reason), dlock.MaxMetadata)
	}
	t, code := c.open(ctx, "request", &rf)
	if t == nil {
		return code
	}
	defer t.Close()
	if code := c.inspected(t); code >= 0 {
		return code
	}
	c.debugf("asking the holders of %q on %s to release it", key, t.describe())
	err := t.locker.RequestRelease(ctx, key, *reason)
	switch {
	case err == nil:
		if !c.quiet {
			fmt.Fprintf(c.stdout, "dlock: asked the holder(s) of %q to release it\n", key)
		}
		return exitOK
	case errors.Is(err, dlock.ErrNotHeld):
		if !c.quiet {
			fmt.Fprintf(c.stdout, "dlock: lock %q is not held; nobody was asked\n", key)
		}
		return exitNotHeld
	case errors.Is(err, dlock.ErrInvalid) && !errors.Is(err, dlock.ErrMisconfigured):
		return c.usageError("request", "%s", errText(err))
	}
	if code := c.redisFailure(t, err); code >= 0 {
		return code
	}
	c.errorf("release request for %q: %s", key, errText(err))
	return exitFailure
}
