package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"time"

	"github.com/dlock-dev/dlock"
)

// The shell form of Lock.Detach and Locker.Adopt: acquire leaves a lock
// held for its TTL with no process renewing it, extend and release act on
// it by its token.

// shapeFlags are --limit and --shared, as dlock run takes them.
type shapeFlags struct {
	limit  *int
	shared *bool
}

func (s *shapeFlags) register(fs *flag.FlagSet) {
	s.limit = fs.Int("limit", 1, "a permit of a semaphore of N")
	s.shared = fs.Bool("shared", false, "a shared hold")
}

// options are the lock options of the shape, or the exit status of a usage
// error (else -1).
func (s *shapeFlags) options(c *cli, fs *flag.FlagSet, t *target) ([]dlock.LockOption, int) {
	switch {
	case *s.limit < 1:
		return nil, c.usageError(fs.Name(), "--limit %d: at least one holder must be allowed", *s.limit)
	case *s.shared && flagSet(fs, "limit"):
		return nil, c.usageError(fs.Name(), "--shared and --limit do not combine: shared holders have no limit")
	case *s.shared:
		if t != nil {
			t.limit, t.shared = 0, true
		}
		return []dlock.LockOption{dlock.WithShared()}, -1
	}
	if t != nil {
		t.limit = *s.limit
	}
	return []dlock.LockOption{dlock.WithLimit(*s.limit)}, -1
}

// checkTTL reports a --ttl the library refuses, as a usage error.
func (c *cli) checkTTL(sub string, ttl time.Duration) int {
	switch {
	case ttl < dlock.MinTTL:
		return c.usageError(sub, "--ttl %s is too short: the minimum is %s", ttl, dlock.MinTTL)
	case ttl%time.Millisecond != 0:
		return c.usageError(sub, "--ttl %s is not a whole number of milliseconds", ttl)
	}
	return -1
}

// acquireCmd is dlock acquire: take the lock, print "TOKEN FENCE", and
// leave it held for its TTL, renewed by nobody.
func (c *cli) acquireCmd(ctx context.Context, args []string) int {
	fs := newFlagSet("acquire")
	var rf redisFlags
	rf.register(fs, c)
	ttl := fs.Duration("ttl", dlock.DefaultTTL, "how long the lock stays held")
	wait := fs.Duration("wait", 0, "how long to wait")
	metadata := fs.String("metadata", "", "who holds the lock")
	var shape shapeFlags
	shape.register(fs)
	key, code := c.keyArg(fs, args)
	if code >= 0 {
		return code
	}
	if code := c.checkTTL("acquire", *ttl); code >= 0 {
		return code
	}
	switch {
	case *wait < 0:
		return c.usageError("acquire", "--wait %s is negative", *wait)
	case len(*metadata) > dlock.MaxMetadata:
		return c.usageError("acquire", "--metadata is %d bytes, longer than %d", len(*metadata), dlock.MaxMetadata)
	}
	if _, code := shape.options(c, fs, nil); code >= 0 {
		return code
	}
	t, code := c.open(ctx, "acquire", &rf)
	if t == nil {
		return code
	}
	defer t.Close()
	opts, _ := shape.options(c, fs, t)
	opts = append(opts, dlock.WithTTL(*ttl), dlock.WithAutoRenew(false))
	if *metadata != "" {
		opts = append(opts, dlock.WithMetadata(*metadata))
	}
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)
	lock, code := c.acquire(ctx, t, key, *ttl, *wait, sigs, opts...)
	if lock == nil {
		return code
	}
	// Detached, the lock is no longer the Locker's: closing it (t.Close)
	// leaves the key held until its TTL runs out.
	h := lock.Detach()
	fmt.Fprintf(c.stdout, "%s %d\n", h.Token, h.Fence)
	c.debugf("acquired %q on %s (fence %d), held for %s unless released: nothing renews it", key, t.describe(), h.Fence, *ttl)
	return exitOK
}

// tokenCmd is dlock extend --token and dlock release --token: Adopt the
// hold, then leave it held for --ttl (extend) or release it.
func (c *cli) tokenCmd(ctx context.Context, t *target, sub, key, token string, ttl time.Duration, opts []dlock.LockOption) int {
	opts = append(opts, dlock.WithTTL(ttl), dlock.WithAutoRenew(false))
	lock, err := t.locker.Adopt(ctx, key, token, opts...)
	if code := c.inspected(t); code >= 0 {
		if lock != nil && sub == "release" {
			_ = lock.Release(context.WithoutCancel(ctx))
		} else if lock != nil {
			lock.Detach()
		}
		return code
	}
	switch {
	case errors.Is(err, dlock.ErrNotHeld):
		c.errorf("%q is not held by token %s: it expired, was released, or was taken or deleted (dlock release --force)%s", key, token, shapeText(t))
		return exitLockLost
	case errors.Is(err, dlock.ErrInvalid):
		return c.usageError(sub, "%s", errText(err))
	case err != nil:
		if code := c.redisFailure(t, err); code >= 0 {
			return code
		}
		c.errorf("%s %q: %s", sub, key, errText(err))
		return exitFailure
	}
	if sub == "extend" {
		lock.Detach()
		c.debugf("extended %q on %s: held for %s from now (fence %d)", key, t.describe(), ttl, lock.Fence())
		return exitOK
	}
	if err := lock.Release(context.WithoutCancel(ctx)); err != nil {
		if errors.Is(err, dlock.ErrNotHeld) {
			c.errorf("%q was gone before its release: %s", key, errText(err))
			return exitLockLost
		}
		if code := c.redisFailure(t, err); code >= 0 {
			return code
		}
		c.errorf("release %q: %s", key, errText(err))
		return exitFailure
	}
	c.debugf("released %q on %s", key, t.describe())
	return exitOK
}

// shapeText reminds that the shape must be acquire's, when it was given.
func shapeText(t *target) string {
	switch {
	case t.shared:
		return " (or is not a shared hold: acquire had no --shared)"
	case t.limit > 1:
		return fmt.Sprintf(" (or is not a permit of a semaphore of %d: acquire had another --limit)", t.limit)
	}
	return " (or was acquired with --limit or --shared: give the same here)"
}

// extendCmd is dlock extend --token T [--ttl D] KEY.
func (c *cli) extendCmd(ctx context.Context, args []string) int {
	fs := newFlagSet("extend")
	var rf redisFlags
	rf.register(fs, c)
	ttl := fs.Duration("ttl", dlock.DefaultTTL, "how long the lock stays held from now")
	token := fs.String("token", "", "the token dlock acquire printed")
	var shape shapeFlags
	shape.register(fs)
	key, code := c.keyArg(fs, args)
	if code >= 0 {
		return code
	}
	if *token == "" {
		return c.usageError("extend", "--token is required: the token that dlock acquire printed")
	}
	if code := c.checkTTL("extend", *ttl); code >= 0 {
		return code
	}
	return c.withToken(ctx, fs, &rf, &shape, "extend", key, *token, *ttl)
}

// withToken opens the target and runs tokenCmd.
func (c *cli) withToken(ctx context.Context, fs *flag.FlagSet, rf *redisFlags, shape *shapeFlags, sub, key, token string, ttl time.Duration) int {
	if _, code := shape.options(c, fs, nil); code >= 0 {
		return code
	}
	t, code := c.open(ctx, sub, rf)
	if t == nil {
		return code
	}
	defer t.Close()
	opts, _ := shape.options(c, fs, t)
	return c.tokenCmd(ctx, t, sub, key, token, ttl, opts)
}

// releaseTTL is the TTL a release --token sets before it releases (it
// adopts the hold first): what is left behind if the release itself cannot
// be confirmed.
const releaseTTL = 5 * time.Second
