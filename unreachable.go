package dlock

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/dlock-dev/dlock/internal/quorum"
)

// An Acquire whose context has no deadline waits for as long as its nodes
// do not answer, as documented; a newcomer whose address is wrong would
// see nothing at all. So, unless WithLogger logs the nodes' failures
// already, the first such wait of a Locker is told through slog.Default
// (the logger every program has), naming the node, the cause and the fix;
// once, until an acquisition round hears from every node again.

// noteNodes follows an acquisition attempt of an Acquire call (k and res
// its outcome, ctx the call's): it logs the first wait for nodes that do
// not answer (see above), and forgets it once an attempt succeeds or every
// node answered.
func (l *Locker) noteNodes(ctx context.Context, key string, k *Lock, res *attemptResult) {
	switch {
	case l.logsNodes:
		return
	case k != nil || len(res.errs) == 0:
		if l.toldUnreachable.Load() {
			l.toldUnreachable.Store(false)
		}
		return
	case res.class() != ErrUnavailable || res.final(ctx):
		return
	}
	if _, bounded := ctx.Deadline(); bounded || !l.toldUnreachable.CompareAndSwap(false, true) {
		return
	}
	var ne *NodeError
	if !errors.As(res.errs[0], &ne) {
		return
	}
	node := l.nodes[0]
	for _, n := range l.nodes {
		if n.Addr == ne.Addr {
			node = n
		}
	}
	cause := ne.Err
	if errors.Is(cause, context.DeadlineExceeded) {
		cause = probe(node.Addr, cause)
	}
	slog.Default().LogAttrs(ctx, slog.LevelWarn,
		"dlock: Acquire is waiting for Redis, which does not answer; it tries again until its context ends (give it a deadline to get the error instead); logged once",
		slog.String("key", key), slog.String("node", ne.Addr), slog.Any("error", cause),
		slog.String("fix", unreachableFix(node, cause)))
}

// probe tells why a node gave no answer in time, when a dial says more
// than the deadline (newer go-redis clients retry a refused dial until the
// call's deadline, so that the call ends with the deadline alone): a TCP
// dial of addr, bounded, whose error is returned if it has one; else err.
// Once per outage (see noteNodes).
func probe(addr string, err error) error {
	if dialErr := dialCause(addr, probeTimeout); dialErr != nil {
		return dialErr
	}
	return err
}

// dialCause dials addr over TCP, within timeout, and returns the dial's
// error, or nil when it connected (the connection is closed at once) or
// addr is not a TCP address (a Unix socket, a Cluster's or Sentinel's
// name).
func dialCause(addr string, timeout time.Duration) error {
	// Only a HOST:PORT: a Cluster's node is named "cluster(ADDR,...)",
	// which SplitHostPort would cut at its last colon.
	if _, port, splitErr := net.SplitHostPort(addr); splitErr != nil || strings.Trim(port, "0123456789") != "" || port == "" {
		return nil
	}
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return err
	}
	_ = c.Close()
	return nil
}

// probeTimeout bounds probe's dial.
const probeTimeout = 500 * time.Millisecond

// nameCauses names the cause of the node failures in err that are a
// deadline alone, so that an ErrUnavailable error says "connection
// refused" rather than "context deadline exceeded" whatever the client's
// retries (see probe): for each *NodeError in err whose Err is a deadline,
// a TCP dial of its address, all at once, each within the node timeout of
// ttl and probeTimeout; a dial that fails becomes the node's Err, with the
// deadline (an *unansweredError: it matches both, and the NodeError stays
// transient). It runs only on the way out of a call that failed with
// ErrUnavailable (nothing on the everyday path), and costs a dial per such
// node (a refused one returns at once; one that gets no answer at all
// waits its bound and changes nothing). It changes the NodeErrors of err
// in place, and so the message of a round's error (outcome.wrap's, made
// when asked for): err must be the caller's alone. It returns err.
func (l *Locker) nameCauses(err error, ttl time.Duration) error {
	if err == nil || !errors.Is(err, ErrUnavailable) {
		return err
	}
	var bare []*NodeError
	eachNodeError(err, func(ne *NodeError) {
		if errors.Is(ne.Err, context.DeadlineExceeded) {
			bare = append(bare, ne)
		}
	})
	timeout := min(probeTimeout, l.nodeTimeout(ttl))
	var wg sync.WaitGroup
	for _, ne := range bare {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if cause := dialCause(ne.Addr, timeout); cause != nil {
				ne.Err = &unansweredError{deadline: ne.Err, cause: cause}
			}
		}()
	}
	wg.Wait()
	return err
}

// eachNodeError calls f with every *NodeError in err's tree.
func eachNodeError(err error, f func(*NodeError)) {
	switch e := err.(type) {
	case *NodeError:
		f(e)
	case interface{ Unwrap() []error }:
		for _, e := range e.Unwrap() {
			eachNodeError(e, f)
		}
	case interface{ Unwrap() error }:
		eachNodeError(e.Unwrap(), f)
	}
}

// unansweredError is a node's failure that was a deadline alone, with the
// cause that a dial of its address found (see nameCauses).
type unansweredError struct{ deadline, cause error }

func (e *unansweredError) Error() string   { return "no answer in time: " + e.cause.Error() }
func (e *unansweredError) Unwrap() []error { return []error{e.cause, e.deadline} }

// unreachableFix says what to check when node fails with err, an error
// that waiting may fix (see permanent).
func unreachableFix(node *quorum.Node, err error) string {
	var dns *net.DNSError
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "nothing listens at " + node.Addr + ": check the client's address and port, and that redis-server runs there"
	case errors.As(err, &dns):
		return "the host name does not resolve: check the client's address"
	case errors.Is(err, context.DeadlineExceeded) && node.TLS:
		return "no answer in time: the server is down, frozen or unreachable, or its port does not speak TLS (the client has a TLSConfig: leave it out for a plain-text port)"
	case errors.Is(err, context.DeadlineExceeded):
		return "no answer in time: the server is down, frozen, or unreachable (a firewall that drops packets)"
	case !node.TLS && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)):
		return "the server closed the connection: if its port speaks TLS, set TLSConfig in the client's options"
	}
	return "check the client's address, and that the server is up and answering"
}
