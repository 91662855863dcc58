package dlock

import (
	"errors"
	"fmt"
)

var (
	// ErrNotAcquired is returned by TryAcquire when the lock is held by
	// someone else, and by Acquire when its context ended while waiting (the
	// context's error is wrapped too, so errors.Is(err, context.DeadlineExceeded)
	// also holds). It is also returned when a Redlock quorum could not be
	// reached; the per-node failures are wrapped as *NodeError.
	ErrNotAcquired = errors.New("dlock: lock not acquired")

	// ErrNotHeld is returned by Extend and Release when the caller no longer
	// owns the lock: it expired, was taken by another owner, was deleted, or
	// its ownership could no longer be guaranteed (Lost had fired).
	ErrNotHeld = errors.New("dlock: lock not held")

	// ErrLockLost is returned by Do, joined with the function's own error,
	// when the lock was lost while the function ran. It is also the cause of
	// the cancellation of the context Do passes to the function
	// (context.Cause).
	ErrLockLost = errors.New("dlock: lock lost while held")

	// ErrClosed is returned (wrapped in ErrNotAcquired) by Acquire, TryAcquire
	// and Do on a Locker that has been closed, including calls that were
	// waiting when Close was called.
	ErrClosed = errors.New("dlock: locker closed")

	// ErrInvalid is wrapped by every error about a bad argument: an empty key,
	// a TTL that is not positive or too short, a nil function, no clients.
	ErrInvalid = errors.New("dlock: invalid argument")
)

// NodeError is the failure of one Redis node in a round. It is wrapped in the
// error of an operation that could not reach a quorum; find it with
// errors.As.
type NodeError struct {
	// Addr is the node's address ("host:port"), or "node N" when the client
	// does not expose one.
	Addr string
	// Err is what went wrong, for example a network error, or
	// context.DeadlineExceeded when the node did not answer in time.
	Err error
}

func (e *NodeError) Error() string { return "node " + e.Addr + ": " + e.Err.Error() }

// Unwrap returns the node's error.
func (e *NodeError) Unwrap() error { return e.Err }

// errDoReturned is the cause with which Do cancels its function's context
// when the function returns, before the lock is released.
var errDoReturned = errors.New("dlock: Do's function returned; the lock is being released")

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}
