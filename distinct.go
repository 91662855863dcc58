package dlock

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/internal/node"
	"github.com/dlock-dev/dlock/internal/quorum"
	"github.com/dlock-dev/dlock/internal/serverinfo"
)

// A Redlock's nodes must be independent servers: a quorum of clients of one
// server is one point of failure, which one crash, or one restart without
// its data, defeats. NewRedlock refuses what it can tell from the clients
// (sameAddress); what only the servers can tell, two addresses of one
// server (127.0.0.1:P and localhost:P, a proxy in front of it), is found
// by serverIDs at the first acquisition rounds.

// sameServerError is the refusal of a Redlock whose clients reach one
// server twice. It matches ErrMisconfigured, and ErrInvalid too when
// NewRedlock could tell from the clients (arg).
type sameServerError struct {
	msg string
	arg bool
}

func (e *sameServerError) Error() string { return e.msg }

// Is matches ErrMisconfigured, and ErrInvalid for NewRedlock's refusal.
func (e *sameServerError) Is(target error) bool {
	return target == ErrMisconfigured || (e.arg && target == ErrInvalid)
}

func sameServer(arg bool, format string, args ...any) error {
	return &sameServerError{msg: ErrMisconfigured.Error() + ": " + fmt.Sprintf(format, args...) + ": a Redlock needs independent servers", arg: arg}
}

// sameAddress returns NewRedlock's error for clients of which two are one
// client object, or two *redis.Client of one address (or two Cluster
// clients that share a seed address), or nil.
func sameAddress(clients []redis.UniversalClient) error {
	seen := make(map[string]int, len(clients))
	objects := make(map[redis.UniversalClient]int, len(clients))
	for i, c := range clients {
		addrs := addressesOf(c)
		if j, dup := objects[c]; dup {
			name := fmt.Sprintf("#%d", j)
			if len(addrs) > 0 {
				name = addrs[0]
			}
			return sameServer(true, "clients %d and %d are the same client, of %s", j, i, name)
		}
		objects[c] = i
		for _, a := range addrs {
			if j, dup := seen[a]; dup && j != i {
				return sameServer(true, "clients %d and %d both reach %s", j, i, a)
			}
			seen[a] = i
		}
	}
	return nil
}

// addressesOf is the addresses a client dials, as its options give them: a
// *redis.Client's one address, a Cluster client's seeds; none for a
// Sentinel-managed client (its master is found when it dials) or another
// kind of client.
func addressesOf(c redis.UniversalClient) []string {
	switch c := c.(type) {
	case *redis.Client:
		if a := c.Options().Addr; a != "FailoverClient" { // go-redis' name of a Sentinel client
			return []string{a}
		}
	case *redis.ClusterClient:
		return c.Options().Addrs
	}
	return nil
}

// serverIDs learns, once per node, the run id of the server the node
// reaches (INFO server, sent with the node's first acquisition rounds
// until one is answered), and refuses the Locker for good once two nodes
// share one. A node whose INFO is refused (an ACL user without +info), and
// a Cluster client (whose INFO would reach any of its masters), are not
// checked. It costs one INFO per node over the Locker's life; the check is
// a load of an atomic counter once every node is known.
type serverIDs struct {
	left atomic.Int32 // nodes not known yet: 0 once every node is
	// failed is set, with err, once two nodes share a run id.
	failed atomic.Bool

	mu     sync.Mutex
	nodes  []*quorum.Node
	ids    []string // per node: its run id, "" while unknown or not checked
	asking []bool   // per node: an INFO is under way
	known  []bool   // per node: answered (or not to be checked)
	err    error
}

// newServerIDs returns the check of nodes, or nil for a single node.
func newServerIDs(nodes []*quorum.Node) *serverIDs {
	if len(nodes) < 2 {
		return nil
	}
	s := &serverIDs{nodes: nodes, ids: make([]string, len(nodes)), asking: make([]bool, len(nodes)), known: make([]bool, len(nodes))}
	left := 0
	for i, n := range nodes {
		s.known[i] = n.Cluster
		if !n.Cluster {
			left++
		}
	}
	s.left.Store(int32(left))
	return s
}

// refusal is the error of a Locker two of whose nodes were found to reach
// one server, or nil.
func (s *serverIDs) refusal() error {
	if s == nil || !s.failed.Load() {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// ask sends INFO server to node i with c, if its run id is still to be
// learnt and no INFO to it is under way, on a goroutine of its own so that
// it goes out with the round's command (see quorum's batcher). It returns
// the function that waits for the answer (bounded by ctx, as the round's
// command is) and records it, or one that does nothing when there is
// nothing to ask.
func (s *serverIDs) ask(ctx context.Context, i int, c node.Conn) (wait func()) {
	if s == nil || s.left.Load() == 0 {
		return nothingAsked
	}
	s.mu.Lock()
	if s.known[i] || s.asking[i] {
		s.mu.Unlock()
		return nothingAsked
	}
	s.asking[i] = true
	s.mu.Unlock()
	answer := make(chan node.Result, 1)
	go func() {
		v, err := c.Do(ctx, "info", "server")
		answer <- node.Result{Val: v, Err: err}
	}()
	return func() { s.record(i, <-answer) }
}

func nothingAsked() {}

// record records node i's answer to INFO: its run id, or a refusal (not
// checked then); a failure to answer leaves it to be asked again.
func (s *serverIDs) record(i int, r node.Result) {
	info, err := node.String(r.Val), r.Err
	s.mu.Lock()
	defer s.mu.Unlock()
	s.asking[i] = false
	if err != nil && !quorum.IsReply(err) {
		return
	}
	s.known[i] = true
	s.left.Add(-1)
	if err != nil {
		return
	}
	s.ids[i] = serverinfo.RunID(info)
	if j, k, ok := serverinfo.Repeated(s.ids); ok && s.err == nil {
		s.err = sameServer(false, "nodes %s and %s are the same Redis server (run id %s)", s.nodes[j].Addr, s.nodes[k].Addr, s.ids[j])
		s.failed.Store(true)
	}
}
