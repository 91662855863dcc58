package dlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
)

// AcquireAll acquires the locks named keys, every one or none, waiting as
// Acquire does until ctx ends. It returns one *Lock per key, in the order
// given, each renewed, released and lost on its own (as a lock acquired
// alone is; release them all when done). opts apply to every lock
// (WithShared too: shared holds of every key).
//
// Two calls naming the same keys in different orders never deadlock: the
// keys are taken in one order, the byte order of their names, whatever the
// order given. AcquireAll first tries every key at once (one round trip for
// all, on a Cluster too, where the keys may live on different nodes). It
// keeps the keys it got that come before the first one it did not get, in
// that order, releases the others at once, and then waits for the rest one
// at a time, in order: while it waits for a key, it holds the keys before
// it, renewed, for as long as it waits (until ctx ends, if the key stays
// held). Over NewRedlock each key needs its own quorum.
//
// On failure it returns nil and the error of the key it could not get
// (ErrNotAcquired, wrapping ctx's error, when ctx ended first;
// ErrUnavailable, ErrMisconfigured, ErrClosed, as Acquire), joined with
// the error of any release that could not be confirmed; the locks it had
// taken are released before it returns, not left to their TTL (a node
// that did not answer the release is cleaned up in the background, as for
// a lock). A lock taken first that is lost while AcquireAll waits for the
// others ends the wait at once and fails the call the same way (the other
// locks released), with an error wrapping ErrLockLost.
// No keys, an empty key, a key named twice or an invalid option is an
// error wrapping ErrInvalid.
func (l *Locker) AcquireAll(ctx context.Context, keys []string, opts ...LockOption) ([]*Lock, error) {
	order, err := l.keyOrder(keys, opts)
	if err != nil {
		return nil, err
	}
	locks := make([]*Lock, len(keys))
	tries := l.tryAll(ctx, keys, opts)
	// Keep the prefix of the order that was granted; give back the rest.
	next := 0
	for next < len(order) && tries[order[next]].k != nil {
		next++
	}
	var extra []*Lock
	for _, i := range order[next:] {
		if k := tries[i].k; k != nil {
			extra = append(extra, k)
		} else if final(ctx, tries[i].err) {
			return nil, giveBackAll(ctx, takenIn(tries, order), tries[i].err)
		}
	}
	if err := releaseAll(ctx, extra); err != nil {
		return nil, giveBackAll(ctx, takenIn(tries, order[:next]), err)
	}
	// The wait ends as soon as a lock already taken is lost.
	wctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	lostErr := fmt.Errorf("%w: a lock of %q was lost while AcquireAll waited for the others", ErrLockLost, keys)
	hold := func(i int, k *Lock) {
		locks[i] = k
		k.onLost(func(error) { stop(lostErr) })
	}
	for _, i := range order[:next] {
		hold(i, tries[i].k)
	}
	for _, i := range order[next:] {
		k, err := l.Acquire(wctx, keys[i], opts...)
		if k != nil {
			hold(i, k)
		}
		switch lost := ctx.Err() == nil && errors.Is(context.Cause(wctx), ErrLockLost); {
		case lost && l.isClosed():
			err = closedErr(keys[i]) // Close took the locks back
		case lost:
			err = lostErr // a lost lock ended the wait, or came with the grant
		}
		if err != nil {
			return nil, giveBackAll(ctx, nonNil(locks), err)
		}
	}
	return locks, nil
}

// keyOrder checks AcquireAll's arguments and returns the indexes of keys
// in the order they are taken: by name, in byte order.
func (l *Locker) keyOrder(keys []string, opts []LockOption) ([]int, error) {
	if len(keys) == 0 {
		return nil, invalid("AcquireAll needs at least one key")
	}
	if _, err := l.lockConfig(keys[0], opts); err != nil {
		return nil, err
	}
	order := make([]int, len(keys))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		switch {
		case keys[a] < keys[b]:
			return -1
		case keys[a] > keys[b]:
			return 1
		}
		return 0
	})
	for j, i := range order {
		if keys[i] == "" {
			return nil, invalid("key %d must not be empty", i)
		}
		if j > 0 && keys[order[j-1]] == keys[i] {
			return nil, invalid("key %q is named twice", keys[i])
		}
	}
	return order, nil
}

// try is the outcome of TryAcquire for one key.
type try struct {
	k   *Lock
	err error
}

// tryAll makes one attempt on every key at once.
func (l *Locker) tryAll(ctx context.Context, keys []string, opts []LockOption) []try {
	tries := make([]try, len(keys))
	atOnce(len(keys), func(i int) { tries[i].k, tries[i].err = l.TryAcquire(ctx, keys[i], opts...) })
	return tries
}

// final reports whether a failed first attempt ends AcquireAll: waiting
// cannot change it (as for Acquire: misconfigured, closed, invalid, or
// ctx ended; a node's own timeout is not one: Acquire tries again).
func final(ctx context.Context, err error) bool {
	return ctx.Err() != nil || errors.Is(err, ErrMisconfigured) || errors.Is(err, ErrClosed) || errors.Is(err, ErrInvalid)
}

// takenIn returns the locks of tries at the indexes in order that were
// granted.
func takenIn(tries []try, order []int) []*Lock {
	var ks []*Lock
	for _, i := range order {
		if tries[i].k != nil {
			ks = append(ks, tries[i].k)
		}
	}
	return ks
}

func nonNil(locks []*Lock) []*Lock {
	var ks []*Lock
	for _, k := range locks {
		if k != nil {
			ks = append(ks, k)
		}
	}
	return ks
}

// giveBackAll releases locks, all at once, and returns err joined with the
// releases' errors.
func giveBackAll(ctx context.Context, locks []*Lock, err error) error {
	return errors.Join(err, releaseAll(ctx, locks))
}

// releaseAll releases locks, all at once, even when ctx has ended (each
// release is bounded by the node timeout), and returns the errors of those
// whose release was not confirmed (a lock already lost is not one).
func releaseAll(ctx context.Context, locks []*Lock) error {
	if len(locks) == 0 {
		return nil
	}
	rctx := context.WithoutCancel(ctx)
	errs := make([]error, len(locks))
	atOnce(len(locks), func(i int) {
		if err := locks[i].Release(rctx); err != nil && !errors.Is(err, ErrNotHeld) {
			errs[i] = err
		}
	})
	return errors.Join(errs...)
}
