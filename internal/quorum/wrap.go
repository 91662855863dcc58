package quorum

import (
	"context"
	"time"

	"github.com/dlock-dev/dlock/internal/node"
)

// WrapConn, when not nil, wraps each node.Conn through which a Node sends
// its commands (the node's, its workers' and each bounded copy's), given
// the Node (its Client, or its Addr for another family's client). It is a
// seam for the history checker's command-level faults (internal/history):
// no user can reach it. It is set once, before any Node is made (a package
// init of the test binary), and never changed: it is read without a lock.
var WrapConn func(n *Node, c node.Conn) node.Conn

// wrap is c through WrapConn, or c when there is none.
func (n *Node) wrap(c node.Conn) node.Conn {
	if WrapConn == nil {
		return c
	}
	return WrapConn(n, c)
}

// roundDeadlineKey is the key of a round's deadline in the context of its
// calls, set only while WrapConn is (see RoundDeadline).
type roundDeadlineKey struct{}

// RoundDeadline is the deadline of the Fanout round that a command's ctx
// belongs to: a round's calls run on a context that ends at that deadline
// but does not report it (see roundContexts), so that a wrapper (WrapConn)
// can tell an answer that came after it, which the round did not count.
// Set only while WrapConn is: it costs the rounds nothing otherwise.
func RoundDeadline(ctx context.Context) (time.Time, bool) {
	d, ok := ctx.Value(roundDeadlineKey{}).(time.Time)
	return d, ok
}
