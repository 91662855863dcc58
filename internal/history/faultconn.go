package history

// The explorer's command-level faults (explore.go): a node.Conn wrapper
// installed through internal/quorum's seam (quorum.WrapConn) on the nodes
// of the explorer's Lockers, and on no other. Each wrapped node belongs to
// one Locker slot and one node index, and its faults are drawn from a
// generator seeded by the run's seed, the slot and the node (replayable as
// far as the order of the commands is).

import (
	"context"
	"encoding"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/dlock-dev/dlock/internal/node"
	"github.com/dlock-dev/dlock/internal/quorum"
	"github.com/dlock-dev/dlock/internal/script"
)

// The kinds of command-level faults, as the summary names them.
const (
	fLost      = "reply lost after the command ran"
	fTwice     = "command run twice at once"
	fRetried   = "command run twice (a retry after a lost reply)"
	fLate      = "copy held back, delivered after later commands (and a retry answered)"
	fReset     = "connection reset after the write"
	fResetLate = "connection reset after the write, the copy delivered late"
	fCutCall   = "Locker cut off from a master for one call"
	fCutWhile  = "Locker cut off from a master for a while"
	fSlow      = "node slow by a set delay"
)

// perCommand are the faults drawn for single commands, by weight: those
// that the caller cannot see (a command run twice, or late, and answered
// as if once: nothing may excuse what they cause), drawn at all times, and
// those it sees (an error, no answer), drawn only in a storm (see
// exploreRun.storm), so that between storms every call is judged sharply.
var (
	unseen = []weighted{{fTwice, 2}, {fRetried, 2}, {fLate, 3}}
	seen   = []weighted{{fLost, 2}, {fReset, 1}, {fResetLate, 2}}
)

type weighted struct {
	kind   string
	weight int
}

// registry maps a wrapped node's key (its go-redis client, or its address:
// a proxy's of the explorer's) to its faults.
var registry sync.Map

func init() { quorum.WrapConn = wrapConn }

// wrapConn is quorum.WrapConn: the explorer's nodes get a faultConn, any
// other node its own Conn.
func wrapConn(n *quorum.Node, c node.Conn) node.Conn {
	v, ok := registry.Load(n.Addr)
	if n.Client != nil {
		if w, found := registry.Load(n.Client); found {
			v, ok = w, true
		}
	}
	if !ok {
		return c
	}
	return &faultConn{inner: c, f: v.(*nodeFaults)}
}

// nodeFaults are the faults of one node of one Locker slot.
type nodeFaults struct {
	run        *exploreRun
	slot, node int

	mu       sync.Mutex
	rnd      *rand.Rand
	rate     float64 // the chance of a per-command fault
	cutCalls int     // the next cutCalls commands are cut off
	cutUntil time.Time
	slowBy   time.Duration
	slowTill time.Time
	held     []*heldCopy
}

// heldCopy is a copy of a command held back: it is delivered once after
// more commands were answered and not before at.
type heldCopy struct {
	via   *faultConn
	cmds  [][]any
	multi bool
	after int
	at    time.Time
}

// faultConn is node.Conn through a node's faults.
type faultConn struct {
	inner node.Conn
	f     *nodeFaults
}

var _ node.Conn = (*faultConn)(nil)

func (c *faultConn) Do(ctx context.Context, args ...any) (any, error) {
	rs := c.exec(ctx, [][]any{args}, false)
	return rs[0].Val, rs[0].Err
}

func (c *faultConn) DoMulti(ctx context.Context, cmds ...[]any) []node.Result {
	return c.exec(ctx, cmds, true)
}

// DoWait (WithReplicaAck, which the explorer does not use) goes through
// without faults, its script sabotaged as any other's.
func (c *faultConn) DoWait(ctx context.Context, args []any, replicas int, timeoutMS int64) (cmd, wait node.Result) {
	return c.inner.DoWait(ctx, c.f.run.sabotaged(args), replicas, timeoutMS)
}

// send sends cmds through the inner Conn.
func (c *faultConn) send(ctx context.Context, cmds [][]any, multi bool) []node.Result {
	if multi {
		return c.inner.DoMulti(ctx, cmds...)
	}
	v, err := c.inner.Do(ctx, cmds[0]...)
	return []node.Result{{Val: v, Err: err}}
}

// exec sends cmds through the fault drawn for them, and logs the command.
func (c *faultConn) exec(ctx context.Context, cmds [][]any, multi bool) []node.Result {
	run := c.f.run
	cmds = sabotagedAll(run, cmds)
	kind := c.f.draw()
	tr := traceOf(ctx)
	if tr != nil {
		tr.sent.Add(1)
	}
	id, start := run.sent(c.f.slot)
	run.noteSent(c.f.slot, c.f.node, cmds, kind)
	rs := c.inject(ctx, kind, cmds, multi)
	bad := false
	for _, r := range rs {
		if r.Err != nil && !node.HasErrorPrefix(r.Err, "NOSCRIPT") {
			bad = true
		}
	}
	// An answer that came after the command's deadline (its round's) was
	// not an answer within the call: the library counted the node as
	// silent, whatever the reply said.
	dl, ok := quorum.RoundDeadline(ctx)
	if !ok {
		dl, ok = ctx.Deadline()
	}
	if ok && time.Now().After(dl) {
		bad = true
	}
	if tr != nil {
		if bad {
			tr.bad.Store(true)
		}
		if kind == fLate || kind == fResetLate {
			tr.late.Store(true)
		}
		tr.answer(time.Now().UnixNano())
	}
	run.answered(c.f.slot, c.f.node, id, start, keyOf(cmds[0]), scriptOf(cmds), kind, bad, c.f.until(kind))
	c.f.tick(c)
	return rs
}

// inject runs cmds under the fault kind ("" none) and returns what the
// caller sees.
func (c *faultConn) inject(ctx context.Context, kind string, cmds [][]any, multi bool) []node.Result {
	switch kind {
	case fLost:
		c.send(ctx, cmds, multi)
		return failed(len(cmds), errInjected(kind))
	case fTwice:
		twin := make(chan struct{})
		go func() {
			defer close(twin)
			c.send(detached(ctx), cmds, multi)
		}()
		rs := c.send(ctx, cmds, multi)
		<-twin
		return rs
	case fRetried:
		c.send(ctx, cmds, multi)
		return c.send(ctx, cmds, multi)
	case fLate:
		c.f.hold(c, cmds, multi)
		return c.send(ctx, cmds, multi)
	case fReset:
		if c.f.coin() {
			c.send(ctx, cmds, multi)
		} else {
			written(cmds) // written, lost with the connection
		}
		return failed(len(cmds), errInjected(kind))
	case fResetLate:
		c.f.hold(c, cmds, multi)
		return failed(len(cmds), errInjected(kind))
	case fCutCall, fCutWhile:
		return c.cut(ctx, cmds, multi)
	case fSlow:
		return c.slow(ctx, cmds, multi)
	}
	return c.send(ctx, cmds, multi)
}

// cut holds cmds until the cut heals (then sends them, as a partition that
// heals delivers what was sent) or ctx ends (then they are not sent: the
// caller sees no answer).
func (c *faultConn) cut(ctx context.Context, cmds [][]any, multi bool) []node.Result {
	c.f.mu.Lock()
	until := c.f.cutUntil
	c.f.mu.Unlock()
	wait := time.Until(until)
	if wait <= 0 {
		wait = 3 * time.Second // one call: until ctx ends
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return c.send(ctx, cmds, multi)
	case <-ctx.Done():
		return failed(len(cmds), ctx.Err())
	}
}

// slow delays cmds by the node's delay; if ctx ends first, they are still
// delivered at the delay (they were on the way), and the caller sees no
// answer.
func (c *faultConn) slow(ctx context.Context, cmds [][]any, multi bool) []node.Result {
	c.f.mu.Lock()
	d := c.f.slowBy
	c.f.mu.Unlock()
	t := time.NewTimer(d)
	select {
	case <-t.C:
		return c.send(ctx, cmds, multi)
	case <-ctx.Done():
		late := marshalled(cmds) // written, on its way
		go func() {
			<-t.C
			c.send(detached(context.Background()), late, multi)
		}()
		return failed(len(cmds), ctx.Err())
	}
}

// draw returns the fault of the next command ("" none).
func (f *nodeFaults) draw() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now()
	switch {
	case f.cutCalls > 0:
		f.cutCalls--
		return fCutCall
	case now.Before(f.cutUntil):
		return fCutWhile
	case now.Before(f.slowTill):
		return fSlow
	case f.rate == 0 || f.rnd.Float64() >= f.rate:
		return ""
	case f.run.storm.Load() && f.rnd.IntN(2) == 0:
		return draw(f.rnd, seen)
	}
	return draw(f.rnd, unseen)
}

// draw draws one of ks by weight.
func draw(rnd *rand.Rand, ks []weighted) string {
	total := 0
	for _, k := range ks {
		total += k.weight
	}
	n := rnd.IntN(total)
	for _, k := range ks {
		if n -= k.weight; n < 0 {
			return k.kind
		}
	}
	return ks[0].kind
}

// until is when a command that met the fault kind may still run or leave
// something behind: when the cut heals, or the delay's end.
func (f *nodeFaults) until(kind string) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch kind {
	case fCutWhile:
		return f.cutUntil.UnixNano()
	case fSlow:
		return time.Now().Add(f.slowBy).UnixNano()
	}
	return 0
}

func (f *nodeFaults) coin() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rnd.IntN(2) == 0
}

// hold keeps a copy of cmds, written once (see marshalled), to deliver
// after the retry and one to three more commands of the node were
// answered, and 5 to 500ms from now.
func (f *nodeFaults) hold(c *faultConn, cmds [][]any, multi bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.held = append(f.held, &heldCopy{via: c, cmds: marshalled(cmds), multi: multi, after: 2 + f.rnd.IntN(3),
		at: time.Now().Add(time.Duration(5+f.rnd.IntN(495)) * time.Millisecond)})
}

// tick counts an answered command against the copies held back, and
// delivers those that are due. A copy not delivered within 2s by ticks is
// delivered by the run's sweep (see exploreRun.sweep).
func (f *nodeFaults) tick(c *faultConn) {
	f.mu.Lock()
	var due []*heldCopy
	keep := f.held[:0]
	now := time.Now()
	for _, h := range f.held {
		h.after--
		if h.after <= 0 && !now.Before(h.at) {
			due = append(due, h)
		} else {
			keep = append(keep, h)
		}
	}
	f.held = keep
	f.mu.Unlock()
	for _, h := range due {
		go c.send(detached(context.Background()), h.cmds, h.multi)
	}
}

// overdue takes the copies held back for more than 2s, or all with all.
func (f *nodeFaults) overdue(all bool) []*heldCopy {
	f.mu.Lock()
	defer f.mu.Unlock()
	var due []*heldCopy
	keep := f.held[:0]
	for _, h := range f.held {
		if all || time.Since(h.at) > 2*time.Second {
			due = append(due, h)
		} else {
			keep = append(keep, h)
		}
	}
	f.held = keep
	return due
}

// written stands for the write of a copy that the wrapper does not send
// through the inner Conn now (it is held back, or lost with its
// connection): each argument that marshals itself (encoding.
// BinaryMarshaler) is marshalled once, as a client does when it writes a
// command, so that an argument that counts its writes counts this one.
func written(cmds [][]any) {
	for _, a := range cmds {
		for _, v := range a {
			if m, ok := v.(encoding.BinaryMarshaler); ok {
				_, _ = m.MarshalBinary()
			}
		}
	}
}

// marshalled is a copy of cmds whose self-marshalling arguments are
// replaced by the bytes of one marshalling each (what went on the wire: the
// copy's one write, as written counts it), so that delivering the copy
// counts no further write.
func marshalled(cmds [][]any) [][]any {
	out := make([][]any, len(cmds))
	for i, a := range cmds {
		b := make([]any, len(a))
		for j, v := range a {
			b[j] = v
			if m, ok := v.(encoding.BinaryMarshaler); ok {
				if p, err := m.MarshalBinary(); err == nil {
					b[j] = string(p)
				}
			}
		}
		out[i] = b
	}
	return out
}

// detached is a context for a copy sent on its own: ctx's values, 2s.
func detached(ctx context.Context) context.Context {
	c, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	context.AfterFunc(c, cancel)
	return c
}

func failed(n int, err error) []node.Result {
	rs := make([]node.Result, n)
	for i := range rs {
		rs[i].Err = err
	}
	return rs
}

// errInjected is a transport's failure (a reset connection) that the
// wrapper made up: not an error reply, not a timeout.
func errInjected(kind string) error {
	return fmt.Errorf("history: injected (%s): %w", kind, &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET})
}

// IsInjected reports whether err is a fault the wrapper made up.
func IsInjected(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "history: injected") && errors.Is(err, syscall.ECONNRESET)
}

// keyOf is the user's key of a command: the hash tag of its first key.
func keyOf(args []any) string {
	i := 1
	if s, _ := args[0].(string); strings.EqualFold(s, "evalsha") || strings.EqualFold(s, "eval") {
		i = 3
	}
	if len(args) <= i {
		return ""
	}
	k, _ := args[i].(string)
	if a := strings.IndexByte(k, '{'); a >= 0 {
		if b := strings.IndexByte(k[a:], '}'); b > 0 {
			return k[a+1 : a+b]
		}
	}
	return k
}

// scriptNames name the library's scripts by their SHA1 and text.
var scriptNames = func() map[any]string {
	m := map[any]string{}
	for name, s := range map[string]*script.Script{"acquire.lua": script.Acquire, "semaphore.lua": script.Semaphore,
		"shared.lua": script.Shared, "release.lua": script.Release, "extend.lua": script.Extend, "raise.lua": script.Raise,
		"lock.lua": script.Lock, "unlock.lua": script.Unlock, "renew.lua": script.Renew, "time.lua": script.Time,
		"adopt.lua": script.Adopt, "asked.lua": script.Asked, "prefer.lua": script.Prefer, "setlimit.lua": script.SetLimit,
		"proclaim.lua": script.Proclaim, "elected.lua": script.Elected, "keepterms.lua": script.KeepTerms,
		"limitstate.lua": script.LimitState, "bury.lua": script.Bury} {
		m[s.SHA()], m[s.Source()] = name, name
	}
	return m
}()

// scriptOf names the command of cmds (its script), with the number of
// the others of a pipeline.
func scriptOf(cmds [][]any) string {
	args := cmds[0]
	name, _ := args[0].(string)
	if len(args) > 1 {
		if n, ok := scriptNames[argText(args[1])]; ok {
			name = n
		}
	}
	if len(cmds) > 1 {
		name = fmt.Sprintf("%s and %d more", name, len(cmds)-1)
	}
	return name
}
