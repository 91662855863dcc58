package dlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-dev/dlock/internal/keys"
	"github.com/dlock-dev/dlock/internal/node"
	"github.com/dlock-dev/dlock/internal/quorum"
	"github.com/dlock-dev/dlock/internal/script"
)

// Status is what the nodes say about a lock, as returned by Locker.Status.
// It is a snapshot for people and monitoring; it proves nothing about
// ownership (use Acquire for that).
type Status struct {
	Key string
	// Held is true when a quorum of nodes holds the key (by an owner, or
	// reserved for a woken waiter).
	Held bool
	// TTL is the shortest remaining TTL among the nodes that hold the key.
	TTL time.Duration
	// Fence is the largest fence among the nodes (see NodeStatus.Fence):
	// at least the fence of the latest acquisition, if it was confirmed (on
	// a quorum, a node outside the holder's quorum may count higher).
	Fence uint64
	// Waiters is the largest number of waiting processes registered on a node.
	Waiters int64
	// Queue is who waits, in queue order (the next to be woken first),
	// from the node that has the most: of the first MaxQueue
	// registrations, those whose lease is live (a process that died
	// leaves its registration until its lease ends: Waiters counts it,
	// Queue does not). The waiting calls of one Locker for one key
	// register once (a Locker queues its own calls), with the metadata of
	// the call first in its local queue when the registration was
	// written: Queue names processes, not calls.
	Queue []Waiter
	// Metadata is the holder's metadata (WithMetadata), from the first node
	// that has it; "" when there is none.
	Metadata string
	// Limit is a semaphore's limit (WithLimit) while it has holders, from
	// the first node that has one; 0 for a lock, or a key nobody holds.
	Limit int
	// Permits are a semaphore's holders, or the shared holders
	// (WithShared), from the node that has the most.
	Permits []Permit
	// Shared is true when the holders are shared holds (WithShared), on
	// the first node that has holders: Permits lists them.
	Shared bool
	// Writers is the largest number, on a node, of exclusive acquisitions
	// that wait and stop new shared holds from starting (see WithShared).
	Writers int64
	// Asked is a pending release request (RequestRelease) for a current
	// holder, from the first node that has one; nil when there is none.
	Asked *Request
	// Nodes has one entry per node, in the order of the clients.
	Nodes []NodeStatus
}

// Permit is one holder of a semaphore (WithLimit), as Status reports it.
type Permit struct {
	// Metadata is the holder's metadata (WithMetadata), or "".
	Metadata string
	// TTL is how long the permit has left unless it is renewed.
	TTL time.Duration
	// Fence is the permit's fence, for a holder with metadata (stored
	// with it); 0 otherwise.
	Fence uint64
}

// MaxQueue is the number of registrations Status reads of a lock's
// waiting queue: Status.Queue names at most that many waiters.
const MaxQueue = 100

// Waiter is one waiting acquisition (Acquire, AcquireAll, Campaign), as
// Status reports it.
type Waiter struct {
	// Metadata is the waiter's metadata (WithMetadata), or "". A waiter
	// gives it when it registers, at no cost when it has none.
	Metadata string
	// Since is when the waiter first registered, on the node's clock (a
	// waiter that registers again, after a restart or an eviction of the
	// node's keys, keeps it). Its place in the queue follows it, except
	// for a candidate that RequestLeadership put first: its Since is then
	// just before the one that was first.
	Since time.Time
	// Shared is true for a shared acquisition's waiter (WithShared).
	Shared bool
}

// NodeStatus is one node's view of a lock.
type NodeStatus struct {
	Addr string
	// Held is true when the key exists: held by an owner, or reserved.
	Held bool
	// Reserved is true when the key is reserved for a woken waiter, which
	// takes it within moments.
	Reserved bool
	// TTL is the key's remaining TTL (0 when not held, -1 when it has none).
	TTL time.Duration
	// Fence is the node's fence counter, or the fence of a holder with
	// metadata (stored with it: a leader's term) where that is larger. The
	// counter lives as long as the key has a holder; one lost meanwhile (an
	// eviction) is restored by the holder's next renewal (within TTL/3),
	// and until then only a holder with metadata is reported.
	Fence uint64
	// Waiters is the number of waiting processes registered on the node.
	Waiters int64
	// Queue is who waits on the node, in queue order (see Status.Queue).
	Queue []Waiter
	// Metadata is the holder's metadata on the node, or "".
	Metadata string
	// Limit, Permits and Shared describe a semaphore, or shared holds, on
	// the node; Writers counts the waiting exclusive acquisitions (see
	// Status).
	Limit   int
	Permits []Permit
	Shared  bool
	Writers int64
	// Asked is a release request kept on the node for a current holder,
	// or nil.
	Asked *Request
	// Err is the node's failure when it could not be asked (wrap it in a
	// *NodeError to name the node); the other fields are then zero.
	Err error

	token string // the key's value (for Leader)
	// holderFence is the fence of the lock's holder, as it was granted
	// (the holder's entry in prefix{K}:meta; 0 if there is none), for
	// Leader.
	holderFence uint64
	// transitions is an election's count of terms (see
	// Leader.Transitions), 0 if none.
	transitions uint64
}

// Status reports the state of the lock named key on every node, waiting at
// most the node timeout for each (ctx can shorten that). It returns an error
// wrapping ErrInvalid for an invalid key or Locker option, and an error
// wrapping ErrUnavailable (or ErrMisconfigured, when every node answered
// with a permanent error) when no node answered; per-node failures are in
// NodeStatus.Err.
func (l *Locker) Status(ctx context.Context, key string) (Status, error) {
	if err := l.checkKey(key); err != nil {
		return Status{}, err
	}
	nm := l.names(key)
	st := Status{Key: key, Nodes: make([]NodeStatus, len(l.nodes))}
	results, missing := quorum.Fanout(ctx, l.nodes, l.nodeTimeout(DefaultTTL),
		quorum.RunFunc[NodeStatus](func(ctx context.Context, _ int, c node.Conn) (NodeStatus, error) {
			return readNodeStatus(ctx, c, nm)
		}),
		func([]quorum.Result[NodeStatus], int) bool { return false }, nil)
	// One answer is enough for a status.
	o := l.newOutcome(key, 1)
	for _, r := range results {
		ns := r.Val
		ns.Addr = l.nodes[r.Node].Addr
		if r.Err != nil {
			ns.Err = r.Err
			o.failed(l, r.Node, r.Err)
		} else {
			o.confirmed()
		}
		st.Nodes[r.Node] = ns
	}
	for _, m := range missing {
		st.Nodes[m.Node] = NodeStatus{Addr: l.nodes[m.Node].Addr, Err: m.Err}
	}
	o.missed(l, missing)
	l.merge(&st)
	if class := o.class(ErrNotAcquired); class != nil {
		return st, l.nameCauses(o.wrap(class, fmt.Sprintf("status %q: no node answered", key)), DefaultTTL)
	}
	return st, nil
}

// merge makes st from its nodes' answers (st.Nodes, of which those with Err
// say nothing): Held when a quorum holds the key, and the rest as add says.
func (l *Locker) merge(st *Status) {
	held := 0
	for _, ns := range st.Nodes {
		if ns.Err == nil && st.add(ns) {
			held++
		}
	}
	st.Held = held >= l.quorumFor(st.Limit)
}

// add merges the answer of a node into the status (the shortest TTL of the
// nodes that hold the key, the largest fence and count of waiters, the
// first metadata and limit, the longest lists of permits and of waiters),
// and reports
// whether the node holds the key.
func (st *Status) add(ns NodeStatus) (held bool) {
	if ns.Held {
		if st.TTL == 0 || (ns.TTL > 0 && ns.TTL < st.TTL) {
			st.TTL = ns.TTL
		}
	}
	st.Fence = max(st.Fence, ns.Fence)
	st.Waiters = max(st.Waiters, ns.Waiters)
	if len(ns.Queue) > len(st.Queue) {
		st.Queue = ns.Queue
	}
	st.Writers = max(st.Writers, ns.Writers)
	if st.Metadata == "" {
		st.Metadata = ns.Metadata
	}
	if st.Limit == 0 {
		st.Limit = ns.Limit
	}
	if st.Asked == nil {
		st.Asked = ns.Asked
	}
	if len(ns.Permits) > len(st.Permits) {
		st.Permits = ns.Permits
	}
	if ns.Held && !st.Shared && st.Limit == 0 {
		st.Shared = ns.Shared
	}
	return ns.Held
}

// readNodeStatus reads the status of a lock on one node, in one pipeline:
// its holder (a lock's token, or a semaphore's permits), TTL, counter,
// waiters, metadata and limit, and the server's time, read by time.lua on
// the key's own master (a keyless TIME would go to any master of a
// Cluster, which may be down while the key's master answers). A node that
// no longer has time.lua (a restart, SCRIPT FLUSH) is sent the script once
// more, with EVAL. It fails with the node's error when a read failed, or
// when the lock's key is of a type dlock never writes; nothing is written.
func readNodeStatus(ctx context.Context, c node.Conn, nm *keys.Names) (NodeStatus, error) {
	return statusFrom(ctx, c, nm, c.DoMulti(ctx, statusCommands(nm)...))
}

// readNodeStatuses reads the status of the locks of nms on one node, as
// readNodeStatus does, in one pipeline. It fails with the node's error when
// the node did not answer; a lock whose reads Redis refused, or whose key
// is of a type dlock never writes, has that error in its NodeStatus.Err.
func readNodeStatuses(ctx context.Context, c node.Conn, nms []*keys.Names) ([]NodeStatus, error) {
	const n = readNow + 1 // commands per lock
	cmds := make([][]any, 0, len(nms)*n)
	for _, nm := range nms {
		cmds = append(cmds, statusCommands(nm)...)
	}
	rs := c.DoMulti(ctx, cmds...)
	out := make([]NodeStatus, len(nms))
	for j, nm := range nms {
		ns, err := statusFrom(ctx, c, nm, rs[j*n:(j+1)*n])
		if err != nil && !node.IsReply(err) && !isBadReply(err) {
			return nil, err // a transport's error, or ctx's end
		}
		out[j], out[j].Err = ns, err
	}
	return out, nil
}

// isBadReply reports whether err is a reply dlock cannot read.
func isBadReply(err error) bool {
	var r *script.ReplyError
	return errors.As(err, &r)
}

// statusCommands are the commands that read the status of the lock of nm
// on one node (see readNodeStatus), indexed by the read* constants.
func statusCommands(nm *keys.Names) [][]any {
	return [][]any{
		{"get", nm.Lock()},
		{"pttl", nm.Lock()},
		{"get", nm.Fence()},
		{"zcard", nm.Waiters()},
		{"hgetall", nm.Meta()},
		{"zrange", nm.Lock(), 0, -1, "withscores"}, // a semaphore
		{"get", nm.Limit()},
		{"hgetall", nm.Leases()},  // and the writers' intents' ends
		{"hgetall", nm.Asked()},   // the release requests kept
		{"hget", nm.Terms(), "n"}, // an election's count of terms
		{"zrange", nm.Waiters(), 0, MaxQueue - 1, "withscores"},
		script.TimeCommand(nm.TimeKeys()),
	}
}

// statusFrom is the status of the lock of nm on one node from the replies
// rs of statusCommands (c sends time.lua again where the node lacked it).
func statusFrom(ctx context.Context, c node.Conn, nm *keys.Names, rs []node.Result) (NodeStatus, error) {
	r := statusReads(rs)
	if err := r.err(); err != nil {
		return NodeStatus{}, err
	}
	if node.HasErrorPrefix(r[readNow].Err, "NOSCRIPT") {
		r[readNow].Val, r[readNow].Err = c.Do(ctx, script.Time.Eval(script.TimeCommand(nm.TimeKeys()))...)
	}
	nowMS, err := serverMS(r[readNow])
	if err != nil {
		return NodeStatus{}, err
	}
	return r.status(nowMS), nil
}

// statusReads are the replies of readNodeStatus's commands, indexed by
// the read* constants, in the order it sends them.
type statusReads []node.Result

const (
	readGet = iota
	readPTTL
	readFence
	readWaiters
	readMeta
	readPermits
	readLimit
	readLeases
	readAsked
	readTerms
	readQueue
	readNow // time.lua's
)

// err is the first read's error if it makes the status unreadable:
// time.lua's own (see readNodeStatus) and WRONGTYPE (GET or ZRANGE answers
// it, whichever the lock's key is not) do not, unless GET and ZRANGE both
// answer WRONGTYPE (a lock's key of another type).
func (r statusReads) err() error {
	for i, x := range r[:readNow] {
		switch {
		case x.Err == nil:
		case (i == readGet || i == readPermits) && node.HasErrorPrefix(x.Err, "WRONGTYPE") &&
			!(node.HasErrorPrefix(r[readGet].Err, "WRONGTYPE") && node.HasErrorPrefix(r[readPermits].Err, "WRONGTYPE")):
		default:
			return x.Err
		}
	}
	return nil
}

// serverMS reads time.lua's reply (TIME's: seconds and microseconds) as
// Unix milliseconds.
func serverMS(now node.Result) (int64, error) {
	if now.Err != nil {
		return 0, now.Err
	}
	if arr, ok := now.Val.([]any); ok && len(arr) == 2 {
		sec, serr := script.ParseUint(arr[0])
		usec, uerr := script.ParseUint(arr[1])
		if serr == nil && uerr == nil {
			return int64(sec)*1000 + int64(usec)/1000, nil
		}
	}
	return 0, script.BadReply("unexpected time reply %v", now.Val)
}

// status is the node's status from the reads, nowMS the server's time.
func (r statusReads) status(nowMS int64) NodeStatus {
	var ns NodeStatus
	meta := node.StringMap(r[readMeta].Val)
	limit := node.String(r[readLimit].Val)
	permits := node.ScoredMembers(r[readPermits].Val)
	if len(permits) > 0 {
		ns.addPermits(permits, meta, nowMS)
		ns.Limit, _ = strconv.Atoi(limit)
		ns.Shared = limit == "0"
	}
	leases := node.StringMap(r[readLeases].Val)
	for f, end := range leases {
		if e, _ := strconv.ParseInt(end, 10, 64); strings.HasPrefix(f, "i:") && e > nowMS {
			ns.Writers++
		}
	}
	ns.Queue = queue(node.ScoredMembers(r[readQueue].Val), leases, nowMS)
	if v, ok := r[readGet].Val.(string); ok && r[readGet].Err == nil {
		ns.Held = true
		ns.Reserved = len(v) > 0 && v[0] == '~'
		ns.token = v
		ns.TTL = -1
		if ms, ok := node.Int(r[readPTTL].Val); ok && ms >= 0 {
			ns.TTL = time.Duration(ms) * time.Millisecond
		}
		ns.Metadata = meta[v]
		ns.holderFence, _ = strconv.ParseUint(meta["f:"+v], 10, 64)
	}
	if f, err := strconv.ParseUint(node.String(r[readFence].Val), 10, 64); err == nil {
		ns.Fence = f
	}
	ns.Fence = max(ns.Fence, ns.holderFence)
	ns.Waiters, _ = node.Int(r[readWaiters].Val)
	ns.Asked = pending(node.StringMap(r[readAsked].Val), ns.token, permits, nowMS)
	ns.transitions, _ = strconv.ParseUint(node.String(r[readTerms].Val), 10, 64)
	return ns
}

// queue is the waiters of the waiting set's first members zs (member →
// queue position: the server's time in µs at its first registration) whose
// lease (in leases, end in server ms) is live at nowMS, with their metadata
// ("m:" .. member in leases, see queue.lua).
func queue(zs []node.Scored, leases map[string]string, nowMS int64) []Waiter {
	var q []Waiter
	for _, z := range zs {
		if end, _ := strconv.ParseInt(leases[z.Member], 10, 64); end <= nowMS {
			continue
		}
		q = append(q, Waiter{Metadata: leases["m:"+z.Member], Since: time.UnixMicro(int64(z.Score)),
			Shared: sharedMember(z.Member)})
	}
	return q
}

// pending is the release request kept in asked for a current holder (the
// lock's token, or a live permit), or nil.
func pending(asked map[string]string, token string, permits []node.Scored, nowMS int64) *Request {
	if len(asked) == 0 {
		return nil
	}
	holders := []string{token}
	for _, z := range permits {
		if int64(z.Score) > nowMS {
			holders = append(holders, z.Member)
		}
	}
	for _, h := range holders {
		if v, ok := asked[h]; ok && h != "" {
			if req, ok := parseRequest(v); ok {
				return &req
			}
		}
	}
	return nil
}

// addPermits records a semaphore's permits (its sorted set, scored by
// expiry in ms on the server's clock, nowMS) with their metadata and
// fences: the live ones, not those reserved for a woken waiter.
func (ns *NodeStatus) addPermits(zs []node.Scored, meta map[string]string, nowMS int64) {
	for _, z := range zs {
		m := z.Member
		left := time.Duration(int64(z.Score)-nowMS) * time.Millisecond
		if left <= 0 || strings.HasPrefix(m, "~") {
			continue // expired, or reserved for a woken waiter
		}
		f, _ := strconv.ParseUint(meta["f:"+m], 10, 64)
		ns.Permits = append(ns.Permits, Permit{Metadata: meta[m], TTL: left, Fence: f})
		ns.holderFence = max(ns.holderFence, f)
		if ns.TTL == 0 || left < ns.TTL {
			ns.TTL = left
		}
	}
	ns.Held = len(ns.Permits) > 0
}

// checkKey reports a Locker option or a key that cannot be used.
func (l *Locker) checkKey(key string) error {
	if l.cfg.err != nil {
		return l.cfg.err
	}
	if key == "" {
		return invalid("key must not be empty")
	}
	return nil
}

// ForceRelease deletes the lock named key on every node whatever its owner,
// and wakes the next waiter: an administrator's tool for a lock whose owner
// is known to be gone. A live owner sees its lock lost at its next renewal,
// and may meanwhile still act as the owner; fencing is the defence. It
// returns how many nodes held the key, and an error if any node could not be
// reached, wrapping ErrUnavailable (or ErrMisconfigured, if a node answered
// with a permanent error) and each node's failure as *NodeError. A key that
// changes hands (or shape: shared holds, then a writer) while it runs, so
// that each holder it read was gone before its release ran there, counts as
// answered after three tries: the holders it read are gone, and the key
// holds one that acquired during the call.
func (l *Locker) ForceRelease(ctx context.Context, key string) (int, error) {
	if err := l.checkKey(key); err != nil {
		return 0, err
	}
	nm := l.names(key)
	results, missing := quorum.Fanout(ctx, l.nodes, l.nodeTimeout(DefaultTTL),
		quorum.RunFunc[int64](func(ctx context.Context, i int, c node.Conn) (int64, error) {
			return l.forceNode(ctx, i, c, nm)
		}),
		func([]quorum.Result[int64], int) bool { return false }, nil)
	deleted := 0
	// Every node must answer.
	o := l.newOutcome(key, len(l.nodes))
	for _, r := range results {
		switch {
		case r.Err != nil:
			o.failed(l, r.Node, r.Err)
		case r.Val == 1:
			deleted++
			fallthrough
		default:
			o.confirmed()
		}
	}
	o.missed(l, missing)
	if class := o.class(ErrNotAcquired); class != nil {
		return deleted, l.nameCauses(o.wrap(class, fmt.Sprintf("force release %q: %d of %d nodes answered", key, o.ok, o.n)), DefaultTTL)
	}
	return deleted, nil
}

// forceNode releases, on node i, whatever the key holds (see
// ForceRelease), as a normal release would, so that the next waiter is
// woken: 1 if it released a holder.
func (l *Locker) forceNode(ctx context.Context, i int, c node.Conn, nm *keys.Names) (int64, error) {
	for range 3 {
		v, err := c.Do(ctx, "get", nm.Lock())
		if node.HasErrorPrefix(err, "WRONGTYPE") {
			// A semaphore (or shared holds): release every permit.
			held, err := l.forcePermits(ctx, i, c, nm)
			if node.HasErrorPrefix(err, "WRONGTYPE") {
				continue // a writer took the key meanwhile: read it again
			}
			return held, err
		}
		if err != nil {
			return 0, err
		}
		if v == nil {
			return 0, nil
		}
		n, err := l.runRelease(ctx, i, c, nm, v, "", true, anyShape, false, nil)
		if err != nil || n == 1 {
			return n, err
		}
		// The holder read had released it: the key changed hands.
	}
	return 0, nil // the holders read are gone (see ForceRelease)
}

// forcePermits releases every permit of the semaphore (or shared hold)
// key on node i; WRONGTYPE if the key is no longer one.
func (l *Locker) forcePermits(ctx context.Context, i int, c node.Conn, nm *keys.Names) (int64, error) {
	ms, err := c.Do(ctx, "zrange", nm.Lock(), 0, -1)
	if err != nil {
		return 0, err
	}
	members, _ := ms.([]any)
	var held int64
	for _, m := range members {
		n, err := l.runRelease(ctx, i, c, nm, node.String(m), "", true, anyShape, false, nil)
		if err != nil {
			return held, err
		}
		held |= n
	}
	return held, nil
}
