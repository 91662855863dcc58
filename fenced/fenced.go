// Package fenced stores values in Redis behind a fence check: a write
// carries the writer's fencing token (a dlock [Lock.Fence]), and is done
// only if that fence is not smaller than the largest fence the resource
// has seen, atomically, in one Lua script. A writer that lost its lock
// without knowing it (a GC or VM pause past its lease, a partition) and
// comes back with its old fence is refused with [ErrStale], and the value
// the newer holder wrote is kept.
//
// A fence is only a number; it protects data only where storage checks it.
// This package is that check for data kept in Redis. For a SQL database the
// same check is a condition in the UPDATE (see the module
// github.com/dlock-dev/dlock/extra/dlocksql).
//
// # Layout
//
// A resource NAME is one Redis hash, PREFIX+NAME ("fenced:" by default, see
// [WithPrefix]), with the fields "value" and "fence" (the largest fence
// accepted so far, a decimal string). Every call touches that one key, so
// any name works on a Redis Cluster (one slot), braces included. The hash
// never expires and a [Store.Delete] keeps its fence: forgetting the fence
// would let a stale writer in again.
//
// # What the guarantee needs
//
//   - Every writer of a resource writes through a Store (the same prefix),
//     or through a script that does the same check on the same hash. A
//     plain HSET, or an expiry or eviction of the hash, bypasses the check.
//   - The fences come from one lock key: every writer of the resource holds
//     the same dlock key when it writes. Fences of different keys are not
//     comparable.
//   - A lock, not a semaphore: the holders of [WithLimit]'s permits hold at
//     once, and their fences order them but do not exclude each other.
//   - The fences the resource has seen are not lost: a Redis restart
//     without persistence takes them back, and lets an older writer in.
//     Run the Redis with persistence (appendonly yes; appendfsync always
//     for the strictest guarantee). A failover to a replica that missed
//     the last writes loses them, their fences with them: a window that
//     this package does not close (it sends no WAIT).
//
// [Lock.Fence]: https://pkg.go.dev/github.com/dlock-dev/dlock#Lock.Fence
// [WithLimit]: https://pkg.go.dev/github.com/dlock-dev/dlock#WithLimit
package fenced

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

var (
	// ErrStale is wrapped by the error of a write refused because the
	// resource has seen a larger fence: the writer's lock was lost and
	// another process has held it since. The error is a [*StaleError]; see
	// there for what it says about an earlier try of the same call.
	ErrStale = errors.New("fenced: stale fence")
	// ErrNotFound is returned by [Store.Get] (wrapped) when the resource has
	// no value: it was never written, or deleted. It is not redis.Nil, since
	// a deleted resource still exists in Redis, with its fence.
	ErrNotFound = errors.New("fenced: no value")
	// ErrInvalid is wrapped by the error about a bad argument (an empty
	// name, a fence of 0); nothing was sent to Redis then.
	ErrInvalid = errors.New("fenced: invalid argument")
)

// StaleError is the error of a write refused because the resource has seen
// a larger fence. It matches [ErrStale] with errors.Is.
//
// It says that the call's last try wrote nothing, not that the call wrote
// nothing. go-redis retries a command whose reply was lost (a broken
// connection, a read timeout; see MaxRetries): if the first try ran in
// Redis and a newer holder then wrote or claimed the resource with a larger
// fence, the retry is refused, and the call returns a StaleError although
// its first try wrote (the newer holder may have read that value). So a
// StaleError is no cue to undo, or to compensate as if the write had never
// happened: it means the lock was lost and a newer holder owns the
// resource; stop working under this lock.
type StaleError struct {
	// Key is the resource's name, as given (without the prefix).
	Key string
	// Fence is the fence of the refused write.
	Fence uint64
	// Seen is the largest fence the resource had seen when the write was
	// refused: larger than Fence for a Store, which accepts an equal one
	// (at least Fence for a check that refuses an equal one, such as
	// Add in extra/dlocksql, where Seen equal to Fence is the writer's
	// own earlier write).
	Seen uint64
}

func (e *StaleError) Error() string {
	return fmt.Sprintf("fenced: stale fence %d for %q: the resource has seen fence %d", e.Fence, e.Key, e.Seen)
}

// Is reports whether target is ErrStale.
func (e *StaleError) Is(target error) bool { return target == ErrStale }

//go:embed write.lua
var writeSrc string

// writeScript runs with EVALSHA, and EVAL when the server answers NOSCRIPT
// (after a restart or a SCRIPT FLUSH): redis.Script.Run.
var writeScript = redis.NewScript(writeSrc)

// DefaultPrefix is the prefix of a Store's keys unless [WithPrefix] sets
// another.
const DefaultPrefix = "fenced:"

// Store is a set of fenced resources in one Redis deployment. It is safe for
// concurrent use and holds no state apart from its client: any number of
// Stores (in any number of processes) with the same prefix share the
// resources.
//
// Each call is one command, bounded in time as the client's commands are:
// by ctx when the client has ContextTimeoutEnabled, otherwise by its read
// and write timeouts. A call whose reply did not come (a timeout, a broken
// connection) may or may not have been done: see [Store.Set]. go-redis
// itself retries a command that failed on a network error (MaxRetries), so
// a write may run twice (which is why an equal fence is accepted), and the
// error of a call is that of its last try: see [StaleError].
type Store struct {
	client redis.UniversalClient
	prefix string
}

// Option configures a [Store].
type Option func(*Store)

// WithPrefix sets the prefix of the Store's keys (default [DefaultPrefix]);
// "" uses the names as they are. Stores that share resources must use the
// same prefix.
func WithPrefix(prefix string) Option {
	return func(s *Store) { s.prefix = prefix }
}

// New returns a Store on client: a standalone, Sentinel or Cluster client
// (for a Redlock, use one of its masters, or better a Redis of its own:
// the Store needs durability, not a quorum).
func New(client redis.UniversalClient, opts ...Option) *Store {
	s := &Store{client: client, prefix: DefaultPrefix}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Key returns the Redis key of the resource name: the prefix and the name.
func (s *Store) Key(name string) string { return s.prefix + name }

// Set writes value to the resource key with the caller's fence, if fence is
// not smaller than every fence the resource has seen, and records fence as
// the largest seen. Otherwise it returns a [*StaleError] (matching
// [ErrStale]) carrying the largest fence seen.
//
// ErrStale means that the last try of this call wrote nothing. An earlier
// try of the same call may have written: go-redis retries a command whose
// reply was lost, and if the first try ran and a newer holder then wrote
// or claimed with a larger fence, the retry is refused. Do not undo on
// ErrStale as if nothing had been written: the lock was lost; stop.
//
// An equal fence is accepted: it is the same holder writing again (a dlock
// fence is issued to one acquisition of a key; fences of later
// acquisitions are larger), or its retry of a write whose reply was lost.
// So a write that failed with any other error (a timeout, a closed
// connection: it may or may not have been done) can be retried with the
// same fence and value: either it was done, and the retry does it again,
// or it was not, and the retry does it, or a newer holder has written
// since, and the retry is refused as stale (whether the first attempt was
// done or not; the newer holder's write is what counts either way).
//
// The fence does not order one holder's own writes: two writes with equal
// fences are accepted in whatever order Redis runs them. A write whose call
// failed without a reply (a timeout) may still run in Redis afterwards (the
// request of one of its tries was still on the way) and then overwrite
// a later write of the same holder. So after such an error, retry that
// write (or re-read the resource with [Store.Claim]) before making another
// write to the same resource; that settles a lost reply, the usual case.
// To rule out a request delayed even past the retry (on the network, for
// as long as TCP retransmits it), make the next write under a new
// acquisition of the lock: its larger fence refuses the late one.
//
// Other errors: ErrInvalid (wrapped) for an empty key or a fence of 0 (no
// dlock fence is 0: a 0 is a fence that was never set); Redis' errors,
// wrapped, with nothing written, for a key that holds another type
// (WRONGTYPE) or a hash whose fence field was written by something else
// and is not a fence.
func (s *Store) Set(ctx context.Context, key, value string, fence uint64) error {
	_, _, err := s.write(ctx, "set", key, fence, value)
	return err
}

// Delete removes the value of the resource key under the same check as
// [Store.Set], and records fence as the largest seen. The resource's hash
// stays in Redis with its fence (a few dozen bytes): were the fence
// forgotten, a stale writer's next Set would be accepted. [Store.Get] then
// returns ErrNotFound and the fence. A Delete of a resource without a
// value is not an error.
//
// As for Set, ErrStale means that the last try of this call deleted
// nothing; an earlier try, whose reply was lost, may have (see
// [StaleError]). Nor does the fence order a Delete against the holder's
// other writes when one of them timed out (see [Store.Set]).
func (s *Store) Delete(ctx context.Context, key string, fence uint64) error {
	_, _, err := s.write(ctx, "del", key, fence, "")
	return err
}

// Claim records fence as the largest fence the resource key has seen, under
// the same check as [Store.Set], without changing its value, and returns
// the value (found is false when the resource has none). From then on
// writes with a smaller fence are refused, before the caller has written
// anything.
//
// A holder that reads, computes and writes back (a read-modify-write)
// reads with Claim, not Get: with Get, a former holder that has not yet
// seen a larger fence could write between the read and the write, and its
// write, accepted, would then be lost under the new value. After a Claim
// that cannot happen: the former holder is refused from the moment of the
// read.
//
// ErrStale means that the last try of this call claimed nothing; an earlier
// try, whose reply was lost, may have recorded fence (see [StaleError]).
// Either way a newer holder has claimed or written since: stop; a value
// read by this call would be stale.
func (s *Store) Claim(ctx context.Context, key string, fence uint64) (value string, found bool, err error) {
	return s.write(ctx, "claim", key, fence, "")
}

func (s *Store) write(ctx context.Context, op, key string, fence uint64, value string) (string, bool, error) {
	if key == "" {
		return "", false, fmt.Errorf("%w: empty key", ErrInvalid)
	}
	if fence == 0 {
		return "", false, fmt.Errorf("%w: fence 0 for %q (dlock fences start at 1)", ErrInvalid, key)
	}
	// FormatUint gives the canonical decimal form that the script expects
	// (no sign, no leading zeros).
	args := []any{op, strconv.FormatUint(fence, 10)}
	if op == "set" {
		args = append(args, value)
	}
	res, err := writeScript.Run(ctx, s.client, []string{s.prefix + key}, args...).Slice()
	if err != nil {
		return "", false, fmt.Errorf("fenced: %s %q: %w", op, key, err)
	}
	if len(res) == 0 {
		return "", false, fmt.Errorf("fenced: %s %q: empty reply", op, key)
	}
	switch ok, _ := res[0].(int64); {
	case ok == 1 && len(res) == 1:
		return "", false, nil
	case ok == 1 && len(res) == 2:
		v, isStr := res[1].(string)
		if !isStr {
			break
		}
		return v, true, nil
	case ok == 0 && len(res) == 2:
		str, _ := res[1].(string)
		seen, err := strconv.ParseUint(str, 10, 64)
		if err != nil {
			break
		}
		return "", false, &StaleError{Key: key, Fence: fence, Seen: seen}
	}
	return "", false, fmt.Errorf("fenced: %s %q: unexpected reply %v", op, key, res)
}

// Get returns the value of the resource key and the largest fence it has
// seen. When the resource has no value (never written, or deleted) the
// error wraps [ErrNotFound] and fence is the largest fence seen, 0 if none.
//
// Get reads the latest value and checks nothing: it suits readers that do
// not hold the lock. A holder about to write back what it computed from
// the value reads it with [Store.Claim].
func (s *Store) Get(ctx context.Context, key string) (value string, fence uint64, err error) {
	if key == "" {
		return "", 0, fmt.Errorf("%w: empty key", ErrInvalid)
	}
	res, err := s.client.HMGet(ctx, s.prefix+key, "value", "fence").Result()
	if err != nil {
		return "", 0, fmt.Errorf("fenced: get %q: %w", key, err)
	}
	v, hasValue := res[0].(string)
	if f, ok := res[1].(string); ok {
		if fence, err = strconv.ParseUint(f, 10, 64); err != nil || f != strconv.FormatUint(fence, 10) || fence == 0 {
			return "", 0, fmt.Errorf("fenced: get %q: the fence field holds %q, not a fence", key, f)
		}
	} else if hasValue {
		return "", 0, fmt.Errorf("fenced: get %q: a value without a fence: written by something other than a Store", key)
	}
	if !hasValue {
		return "", fence, fmt.Errorf("fenced: get %q: %w", key, ErrNotFound)
	}
	return v, fence, nil
}
