package quorum

import "github.com/dlock-dev/dlock/internal/node"

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
