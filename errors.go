package dlock

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/dlock-dev/dlock/internal/node"
	"github.com/dlock-dev/dlock/internal/script"
)

// The three acquisition errors are disjoint: errors.Is(err, ErrNotAcquired)
// means that the lock is busy and nothing else, so that a misconfigured
// deployment never passes for a busy lock. An error of Extend and Release
// wraps ErrNotHeld, ErrUnavailable or ErrMisconfigured in the same way.
var (
	// ErrNotAcquired means that the lock is held by someone else: TryAcquire
	// found it held, or Acquire's context ended while it waited for a held
	// lock (the context's error is wrapped too, so that
	// errors.Is(err, context.DeadlineExceeded) also holds). On a quorum it
	// means that the refusals alone (with the nodes that answered with a
	// permanent error, which cannot grant either) put the quorum out of
	// reach; failures of other nodes are wrapped as *NodeError.
	ErrNotAcquired = errors.New("dlock: lock not acquired")

	// ErrUnavailable means that too few nodes answered: they are down,
	// frozen, partitioned, refusing connections, or slower than the node
	// timeout. It is transient: Acquire keeps trying until its context ends
	// (on a short backoff, from the node timeout to 1s), and then returns an
	// error that wraps ErrUnavailable, the context's error and each node's
	// failure as *NodeError.
	ErrUnavailable = errors.New("dlock: too few Redis nodes answered")

	// ErrMisconfigured means that a node answered with an error that waiting
	// cannot fix, on enough nodes that no quorum can form without them: a
	// wrong password (WRONGPASS, NOAUTH), a user without the permission
	// (NOPERM, also for the pub/sub channel that waiters listen on), a value
	// of another type at a lock key (WRONGTYPE), a key on another Cluster
	// node (MOVED, CROSSSLOT: the client is not a Cluster client), an
	// unknown command, a script error, a wrong database index, or a TLS
	// certificate that is not trusted. It is returned at once, also by
	// Acquire, wrapping each node's error as *NodeError. Two nodes of a
	// Redlock that reach one server are misconfigured too (see NewRedlock:
	// the error names both). A key held with
	// another limit (see WithLimit) is misconfigured too: the copies of a
	// fleet disagree; that error names both limits and also matches
	// ErrInvalid.
	ErrMisconfigured = errors.New("dlock: Redis refused the command (misconfigured)")

	// ErrNotHeld is returned by Extend and Release when the caller no longer
	// owns the lock: it expired, was taken by another owner, was deleted, or
	// its ownership could no longer be guaranteed (Lost had fired).
	ErrNotHeld = errors.New("dlock: lock not held")

	// ErrLockLost is returned by Do, joined with the function's own error,
	// when the lock was lost while the function ran. It is also the cause of
	// the cancellation of the context Do passes to the function
	// (context.Cause).
	ErrLockLost = errors.New("dlock: lock lost while held")

	// ErrClosed is returned by Acquire, TryAcquire and Do on a Locker that
	// has been closed, including calls that were waiting when Close was
	// called. It is none of the three acquisition errors.
	ErrClosed = errors.New("dlock: locker closed")

	// ErrInvalid is wrapped by every error about a bad argument: an empty key,
	// a TTL that is not positive or too short, a nil function, no clients.
	ErrInvalid = errors.New("dlock: invalid argument")

	// ErrNoLeader is wrapped by the error of Leader when the election has
	// no leader.
	ErrNoLeader = errors.New("dlock: no leader")
)

// NodeError is the failure of one Redis node in a round. It is wrapped in the
// error of an operation that could not reach a quorum; find it with
// errors.As.
type NodeError struct {
	// Addr is the node's address ("host:port"; "cluster(host:port,...)" for
	// a Cluster client), or "#N", its position in the list of clients, when
	// the client does not expose one.
	Addr string
	// Err is what went wrong, for example a network error, an error reply
	// of Redis, or context.DeadlineExceeded when the node did not answer in
	// time. In the error of a TryAcquire, Acquire (and so Do, Campaign and
	// AcquireAll), Status, ForceRelease or RequestRelease that failed with
	// ErrUnavailable, a node that did not answer in time has had its
	// address dialled once, after the round: when the dial failed, Err
	// matches both the deadline and the dial's error, and says it
	// ("no answer in time: dial tcp ...: connect: connection refused"),
	// whatever the client's retries (a go-redis client that retries a
	// refused dial until the call's deadline ends with the deadline alone).
	Err error
}

func (e *NodeError) Error() string { return "node " + e.Addr + ": " + e.Err.Error() }

// Unwrap returns the node's error.
func (e *NodeError) Unwrap() error { return e.Err }

// Permanent reports whether the node's error is one that waiting cannot fix
// (see ErrMisconfigured).
func (e *NodeError) Permanent() bool { return permanent(e.Err) }

// transientReplies are the error replies of Redis that a later attempt may
// not get: the server is loading, busy with a script, a replica during a
// failover, out of memory, or out of connections. Every other error reply
// is permanent.
var transientReplies = []string{"LOADING", "BUSY", "READONLY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN",
	"OOM", "NOREPLICAS", "NOSCRIPT", "ERR max number of clients"}

// permanent reports whether a node's error is one that waiting cannot fix:
// an error reply of Redis other than a transient one, a TLS certificate or
// handshake failure, a reply dlock cannot read, or a Cluster client that
// List cannot scan (errClusterScan). Network errors and
// timeouts are not: the node may answer later.
func permanent(err error) bool {
	if msg, ok := node.Reply(err); ok {
		for _, p := range transientReplies {
			if strings.HasPrefix(msg, p) {
				return false
			}
		}
		return true
	}
	var (
		verify   *tls.CertificateVerificationError
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
		header   tls.RecordHeaderError
		reply    *script.ReplyError
	)
	if errors.As(err, &verify) || errors.As(err, &unknown) || errors.As(err, &hostname) ||
		errors.As(err, &invalid) || errors.As(err, &header) || errors.As(err, &reply) || errors.Is(err, errClusterScan) {
		return true
	}
	// A TLS alert from the server: it refused the handshake, for example
	// for want of a client certificate (mutual TLS).
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "remote error"
}

// errDoReturned is the cause with which Do cancels its function's context
// when the function returns, before the lock is released.
var errDoReturned = errors.New("dlock: Do's function returned; the lock is being released")

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}
