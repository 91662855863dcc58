// Package script holds dlock's Lua scripts (each file's header gives its
// KEYS/ARGV/return contract), the commands that run them (EVALSHA, and
// EVAL when the server answers NOSCRIPT, after a restart or SCRIPT FLUSH),
// a builder of each script's ARGV with named fields, and the parsers of
// their replies.
package script

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/dlock-dev/dlock/internal/node"
)

var (
	//go:embed acquire.lua
	acquireSrc string
	//go:embed release.lua
	releaseSrc string
	//go:embed extend.lua
	extendSrc string
	//go:embed raise.lua
	raiseSrc string
	//go:embed wake.lua
	wakeSrc string
	//go:embed clock.lua
	clockSrc string
	//go:embed base.lua
	baseSrc string
	//go:embed queue.lua
	queueSrc string
	//go:embed grant.lua
	grantSrc string
	//go:embed semaphore.lua
	semaphoreSrc string
	//go:embed shared.lua
	sharedSrc string
	//go:embed lock.lua
	lockSrc string
	//go:embed unlock.lua
	unlockSrc string
	//go:embed renew.lua
	renewSrc string
	//go:embed time.lua
	timeSrc string
	//go:embed adopt.lua
	adoptSrc string
	//go:embed bury.lua
	burySrc string
	//go:embed tomb.lua
	tombSrc string

	// The scripts, with the number of their keys (see internal/keys for
	// the keys of each, in its order).
	// An acquisition's, by shape: a lock's, a semaphore's, a shared hold's
	// (base.lua, queue.lua and grant.lua are their shared parts).
	Acquire   = newScript(include(acquireSrc), 9)
	Semaphore = newScript(include(semaphoreSrc), 9)
	Shared    = newScript(include(sharedSrc), 9)
	Release   = newScript(include(releaseSrc), 8)
	Extend    = newScript(extendSrc, 5)
	Raise     = newScript(raiseSrc, 4)
	// A plain lock's everyday path: lock.lua, unlock.lua and renew.lua
	// (whose number of keys, two per lock, varies: see ExtendCall).
	Lock   = newScript(lockSrc, 3)
	Unlock = newScript(unlockSrc, 2)
	Renew  = newScript(renewSrc, 2)
	Time   = newScript(timeSrc, 1)
	// Adopt takes on a hold acquired elsewhere: extend.lua's work, with
	// the holder's fence and metadata read and returned.
	Adopt = newScript(include(adoptSrc), 8)
	// Bury leaves a tombstone for a token that still holds its key.
	Bury = newScript(include(burySrc), 1)
	// LockRecorded is lock.lua with its fourth key, the metadata hash: on a
	// Redlock, where the holder's fence is recorded with the hold.
	LockRecorded = newScript(lockSrc, 4)
)

// A Script is a Lua script with a fixed number of keys. Its commands are
// built as one []any whose values are boxed once where they can be (the
// names of a lock's keys, a lock's token, a Locker's settings): go-redis'
// Script.Run boxes every key and argument on every call.
type Script struct {
	src     string
	sha     any // the SHA1 of src, hex-encoded
	numKeys any // the number of keys, a decimal string
	// The SHA1's and the source's bytes, for the arguments that count the
	// copies of a command written (see RunCounted).
	shaBytes, srcBytes []byte
}

func newScript(src string, keys int) *Script {
	h := sha1.Sum([]byte(src))
	sha := hex.EncodeToString(h[:])
	return &Script{src: src, sha: sha, numKeys: strconv.Itoa(keys), shaBytes: []byte(sha), srcBytes: []byte(src)}
}

// fragments are the parts that several scripts share, by name: a line
// "-- #include NAME" (indented or not) of a script is replaced by NAME.
var fragments = map[string]*string{
	"wake.lua":  &wakeSrc,  // waking waiters: release.lua and shared.lua
	"clock.lua": &clockSrc, // the server's time read once: release.lua, setlimit.lua, bury.lua
	"tomb.lua":  &tombSrc,  // a tombstone: release.lua, bury.lua
	"base.lua":  &baseSrc,  // acquire.lua, semaphore.lua, shared.lua
	"queue.lua": &queueSrc, // the same
	"grant.lua": &grantSrc, // the same
	// extend.lua, whole, as the body of a function of adopt.lua (which
	// passes it its KEYS and ARGV).
	"extend.lua": &extendSrc,
}

// include returns src with its "-- #include NAME" lines replaced by the
// fragments they name; it panics on a script that includes nothing, or an
// unknown name.
func include(src string) string {
	const directive = "-- #include "
	if !strings.Contains(src, directive) {
		panic("script: a script without " + directive)
	}
	var b strings.Builder
	for _, line := range strings.SplitAfter(src, "\n") {
		name, ok := strings.CutPrefix(strings.TrimSpace(line), directive)
		if !ok {
			b.WriteString(line)
			continue
		}
		frag, known := fragments[name]
		if !known {
			panic("script: no fragment " + name)
		}
		b.WriteString(*frag)
	}
	return b.String()
}

// Source is the script's text.
func (s *Script) Source() string { return s.src }

// SHA is the SHA1 of the script's text, hex-encoded, as EVALSHA takes it.
func (s *Script) SHA() any { return s.sha }

// command returns the command for the script: EVALSHA, its SHA1, the number
// of keys, keys (boxed, len(keys) must be the script's number of keys),
// then argv. The slice is not modified afterwards, so one command may be
// sent to several nodes at once.
func (s *Script) command(keys []any, argv ...any) []any {
	a := make([]any, 0, 3+len(keys)+len(argv))
	a = append(a, "evalsha", s.sha, s.numKeys)
	a = append(a, keys...)
	return append(a, argv...)
}

// Eval turns an EVALSHA command into the EVAL of the script.
func (s *Script) Eval(args []any) []any {
	a := slices.Clone(args)
	a[0], a[1] = "eval", s.src
	return a
}

// Run sends the command args (from one of the builders) with c, and sends
// the script itself with EVAL when the server does not have it (NOSCRIPT).
func (s *Script) Run(ctx context.Context, c node.Conn, args []any) (any, error) {
	return s.RunCounted(ctx, c, args, nil)
}

// RunCounted is Run, with the copies of the command that c writes counted
// by cp (see node.Copies), unless cp is nil: args[1], the SHA1, is replaced
// in args (which must be the caller's own, sent to no other node) by cp's
// argument, and the EVAL after NOSCRIPT sends the source as cp's other one
// (a copy of the EVALSHA may still run once EVAL loaded the script: both
// count).
func (s *Script) RunCounted(ctx context.Context, c node.Conn, args []any, cp *node.Copies) (any, error) {
	var src any
	if cp != nil {
		args[1], src = cp.Args(s.shaBytes, s.sha.(string), s.srcBytes, s.src)
	}
	v, err := c.Do(ctx, args...)
	if node.HasErrorPrefix(err, "NOSCRIPT") {
		e := s.Eval(args)
		if src != nil {
			e[1] = src
		}
		v, err = c.Do(ctx, e...)
	}
	return v, err
}

// EvalCounted is Eval, with the source sent as cp's argument (see
// RunCounted), once Counted or RunCounted set cp's arguments.
func (s *Script) EvalCounted(args []any, cp *node.Copies) []any {
	e := s.Eval(args)
	_, e[1] = cp.Args(s.shaBytes, s.sha.(string), s.srcBytes, s.src)
	return e
}

// Counted returns args with its SHA1 replaced by cp's argument (see
// RunCounted), for a command sent by other means (DoWait): a copy of args
// when share is set (args is sent to other nodes too).
func (s *Script) Counted(args []any, cp *node.Copies, share bool) []any {
	if share {
		args = slices.Clone(args)
	}
	args[1], _ = cp.Args(s.shaBytes, s.sha.(string), s.srcBytes, s.src)
	return args
}

// AcquireArgs are the ARGV[1..5] of acquire.lua, semaphore.lua and shared.lua
// (see base.lua's header). (Small, and
// with value receivers, so that a closure can hold a copy.)
type AcquireArgs struct {
	Token, TTL, Retention, Metadata, Limit any
}

// Waiter are their ARGV[6..10], for an attempt that may register
// as a waiter.
type Waiter struct {
	Member, Lease, Position, Queued, Refresh any
}

// Script is the script of an acquisition of a's shape (its Limit): a
// lock's acquire.lua, a semaphore's semaphore.lua, shared.lua for a shared
// hold.
func (a AcquireArgs) Script() *Script {
	switch a.Limit {
	case "1":
		return Acquire
	case "0":
		return Shared
	}
	return Semaphore
}

// Command is the command of a's script (see Script) with keys and a, for
// an attempt that does not register.
func (a AcquireArgs) Command(keys []any) []any {
	return a.Script().command(keys, a.Token, a.TTL, a.Retention, a.Metadata, a.Limit)
}

// WaiterCommand is the command of a's script with keys, a and w.
func (a AcquireArgs) WaiterCommand(keys []any, w Waiter) []any {
	return a.Script().command(keys, a.Token, a.TTL, a.Retention, a.Metadata, a.Limit,
		w.Member, w.Lease, w.Position, w.Queued, w.Refresh)
}

// LockCommand is the command of lock.lua with keys (the lock's LockKeys),
// token, ttl and the counter's life (see its header).
func LockCommand(keys []any, token, ttl, life any) []any {
	return Lock.command(keys, token, ttl, life)
}

// LockCommandLen is the longest length of lock.lua's command (with the
// four keys of a Redlock's: LockKeysRecorded).
const LockCommandLen = 3 + 4 + 3

// AppendLockCommand is LockCommand appended to dst (whose array the caller
// may hold in a struct of its own: no allocation when it fits).
func AppendLockCommand(dst []any, keys []any, token, ttl, life any) []any {
	numKeys := Lock.numKeys
	if len(keys) == 4 {
		numKeys = LockRecorded.numKeys // a Redlock's: see lock.lua's KEYS[4]
	}
	dst = append(dst, "evalsha", Lock.sha, numKeys)
	dst = append(dst, keys...)
	return append(dst, token, ttl, life)
}

// UnlockCommand is the command of unlock.lua with keys (the lock's
// UnlockKeys) and token (see its header).
func UnlockCommand(keys []any, token any) []any {
	return Unlock.command(keys, token)
}

// Other is lock.lua's and unlock.lua's answer for a key of another shape
// than a plain lock's, or with waiters to wake: acquire.lua or release.lua
// answers for it.
const Other = -5

// Waker are shared.lua's ARGV[11..14], for a shared acquisition's waiter:
// what its grant needs to wake the shared waiters after it, as release.lua
// does (its ARGV[2], ARGV[7], ARGV[10] and ARGV[3]).
type Waker struct {
	InboxPrefix, Listeners, SlotTag, Reserve any
}

// SharedWaiterCommand is the command of shared.lua with keys, a, w and k.
func (a AcquireArgs) SharedWaiterCommand(keys []any, w Waiter, k Waker) []any {
	return Shared.command(keys, a.Token, a.TTL, a.Retention, a.Metadata, a.Limit,
		w.Member, w.Lease, w.Position, w.Queued, w.Refresh,
		k.InboxPrefix, k.Listeners, k.SlotTag, k.Reserve)
}

// ReleaseArgs are release.lua's ARGV (see its header).
type ReleaseArgs struct {
	Expected, InboxPrefix, Reserve, Leaving, Wake, Metadata, Listeners, Bury, Retention, SlotTag any
}

// Command is the command of release.lua with keys and a.
func (a *ReleaseArgs) Command(keys []any) []any {
	return Release.command(keys, a.Expected, a.InboxPrefix, a.Reserve, a.Leaving, a.Wake, a.Metadata, a.Listeners, a.Bury, a.Retention, a.SlotTag)
}

// An ExtendCall builds the command of extend.lua, or of renew.lua, for
// several locks at once (see their headers): the arguments that every lock
// shares, then each lock's keys and own arguments, in order; every lock of
// a call in one shape: whole (extend.lua) or short (renew.lua: a plain lock
// without metadata, not regained).
type ExtendCall struct {
	script       *Script
	args         []any
	n, j         int
	keys, ownArg int // per lock: 5 and 4, or 2 and 2 (short)
}

// NewExtendCall starts the command for n locks, with their TTL, regain and
// retention arguments. short makes it a call of renew.lua: its locks are
// added with AddShort, and regain must be "0".
func NewExtendCall(n int, short bool, ttl, regain, retention any) *ExtendCall {
	c := &ExtendCall{script: Extend, n: n, keys: 5, ownArg: 4}
	shared := 3
	if short {
		c.script, c.keys, c.ownArg, shared = Renew, 2, 2, 2
	}
	a := make([]any, 3+shared+n*(c.keys+c.ownArg))
	a[0], a[1], a[2] = "evalsha", c.script.sha, strconv.Itoa(n*c.keys)
	o := 3 + n*c.keys
	if short {
		a[o], a[o+1] = ttl, retention
	} else {
		a[o], a[o+1], a[o+2] = ttl, regain, retention
	}
	c.args = a
	return c
}

// Script is the script the call runs: extend.lua, or renew.lua.
func (c *ExtendCall) Script() *Script { return c.script }

// Add adds the next lock of a whole call: its keys (its ExtendKeys) and
// own arguments. It panics past the n locks of NewExtendCall, or in a call
// of short groups.
func (c *ExtendCall) Add(keys []any, token, metadata, limit, fence any) {
	o := c.next(keys, 5)
	c.args[o], c.args[o+1], c.args[o+2], c.args[o+3] = token, metadata, limit, fence
}

// AddShort adds the next lock of a call of short groups: a lock (limit 1)
// without metadata, its keys (its ExtendKeysShort), token and fence. It
// panics past the n locks of NewExtendCall, or in a whole call.
func (c *ExtendCall) AddShort(keys []any, token, fence any) {
	o := c.next(keys, 2)
	c.args[o], c.args[o+1] = token, fence
}

// next copies the next lock's keys (of a group of width keys) and returns
// where its own arguments go.
func (c *ExtendCall) next(keys []any, width int) int {
	if c.j == c.n || len(keys) != c.keys || width != c.keys {
		panic("script: ExtendCall: a lock past its locks, or of another shape")
	}
	copy(c.args[3+c.j*c.keys:], keys)
	o := len(c.args) - (c.n-c.j)*c.ownArg
	c.j++
	return o
}

// Command is the command, once every lock was added.
func (c *ExtendCall) Command() []any { return c.args }

// ExtendReplies reads extend.lua's or renew.lua's reply (see their
// headers) for n groups:
// each group's integer, or the error of its group (err, a call's error,
// is every group's).
func ExtendReplies(v any, err error, n int) ([]int64, []error) {
	vals, errs := make([]int64, n), make([]error, n)
	arr, ok := v.([]any)
	if err == nil && (!ok || len(arr) != n) {
		err = BadReply("unexpected extend reply %v for %d locks", v, n)
	}
	for i := range n {
		if err != nil {
			errs[i] = err
			continue
		}
		switch x := arr[i].(type) {
		case int64:
			vals[i] = x
		case error:
			errs[i] = x
		default:
			errs[i] = BadReply("unexpected extend reply %v", x)
		}
	}
	return vals, errs
}

// RaiseArgs are raise.lua's ARGV (see its header): Value is ARGV[1], More
// what follows Token: the larger values of a ladder (ascending; none for a
// claim of one value), or "=" alone for a record.
type RaiseArgs struct {
	Value, Life, Token any
	More               []any
}

// Command is the command of raise.lua with keys and a.
func (a *RaiseArgs) Command(keys []any) []any {
	return Raise.command(keys, append([]any{a.Value, a.Life, a.Token}, a.More...)...)
}

// RaiseReply is one node's answer to raise.lua: whether it claimed a
// value; Counter is that value, or else the counter the node holds (the
// largest value or more).
type RaiseReply struct {
	Claimed bool
	Counter uint64
}

// ParseRaise reads raise.lua's reply.
func ParseRaise(v any) (RaiseReply, error) {
	arr, ok := v.([]any)
	if !ok || len(arr) != 2 {
		return RaiseReply{}, BadReply("unexpected raise reply %v", v)
	}
	flag, _ := arr[0].(int64)
	c, err := ParseUint(arr[1])
	if err != nil {
		return RaiseReply{}, BadReply("unexpected counter in raise reply %v: %v", v, err)
	}
	return RaiseReply{Claimed: flag == 1, Counter: c}, nil
}

// AdoptArgs are adopt.lua's ARGV (see its header).
type AdoptArgs struct {
	Token, TTL, Retention, Limit any
}

// Command is the command of adopt.lua with keys (a lock's AdoptKeys) and a.
func (a *AdoptArgs) Command(keys []any) []any {
	return Adopt.command(keys, a.Token, a.TTL, a.Retention, a.Limit)
}

// AdoptReply is one node's answer to adopt.lua: extend.lua's group reply
// (1 held and extended, 0 another value or shape, -1 free), and, when it
// is 1, the holder's fence and metadata; Limit is the limit the hold has
// (the one asked, or the one SetLimit moved it to). OtherShape is set for
// a refusal because the key is held in another shape than the one asked
// (perhaps by this token).
type AdoptReply struct {
	Held       int64
	Fence      uint64
	Metadata   string
	Limit      string
	OtherShape bool
}

// ParseAdopt reads adopt.lua's reply.
func ParseAdopt(v any) (AdoptReply, error) {
	arr, ok := v.([]any)
	if !ok || len(arr) != 4 && len(arr) != 5 {
		return AdoptReply{}, BadReply("unexpected adopt reply %v", v)
	}
	held, ok := arr[0].(int64)
	md, ok2 := arr[2].(string)
	lim, ok3 := arr[3].(string)
	if !ok || !ok2 || !ok3 {
		return AdoptReply{}, BadReply("unexpected adopt reply %v", v)
	}
	r := AdoptReply{Held: held, Metadata: md, Limit: lim}
	if len(arr) == 5 {
		r.OtherShape = held == 0 && arr[4] == int64(1)
	}
	if held == 1 {
		f, err := ParseUint(arr[1])
		if err != nil || f == 0 {
			return AdoptReply{}, BadReply("unexpected fence in adopt reply %v", v)
		}
		r.Fence = f
	}
	return r, nil
}

// BuryCommand is the command of bury.lua with keys (a lock's BuryKeys),
// token and ms (see its header).
func BuryCommand(keys []any, token, ms any) []any {
	return Bury.command(keys, token, ms)
}

// TimeCommand is the command of time.lua with keys (a lock's TimeKeys):
// routed by the lock's key on a Cluster.
func TimeCommand(keys []any) []any {
	return Time.command(keys)
}

// A ReplyError is a reply dlock cannot use: of a shape it does not expect
// (not Redis, or not dlock's scripts: another program's value at a lock
// key, a proxy), or WAIT refused after a script ran. It is permanent, and,
// not being an error reply of Redis, does not say that nothing was written.
type ReplyError struct{ Msg string }

func (e *ReplyError) Error() string { return e.Msg }

// BadReply returns a *ReplyError.
func BadReply(format string, args ...any) error {
	return &ReplyError{fmt.Sprintf(format, args...)}
}

// AcquireReply is one node's answer to an acquisition's script.
type AcquireReply struct {
	OK    bool
	Fence uint64
	PTTL  int64
	Pos   string
	// Intent: the waiter wrote its intent (an exclusive waiter of shared
	// holds), which its grant must remove.
	Intent bool
	// Again is set by the round, not read from the reply: the command was
	// written more than once (see node.Copies), and a copy of it may still
	// run.
	Again bool
}

// ParseAcquire reads the reply of an acquisition's script (see base.lua).
func ParseAcquire(v any) (AcquireReply, error) {
	arr, ok := v.([]any)
	if !ok || len(arr) < 2 {
		return AcquireReply{}, BadReply("unexpected acquire reply %v", v)
	}
	flag, _ := arr[0].(int64)
	if flag == 1 {
		// The fence comes as a decimal string: exact for any 64-bit value.
		f, err := ParseUint(arr[1])
		if err != nil {
			return AcquireReply{}, BadReply("unexpected fence in acquire reply %v: %v", v, err)
		}
		return AcquireReply{OK: true, Fence: f}, nil
	}
	n, _ := arr[1].(int64)
	r := AcquireReply{PTTL: n}
	if len(arr) > 2 {
		switch p := arr[2].(type) {
		case string:
			r.Pos = p
		case int64:
			r.Pos = strconv.FormatInt(p, 10)
		}
	}
	r.Intent = len(arr) > 3 && arr[3] == any(int64(1))
	return r, nil
}

// ParseUint reads a counter that a script returned as a string (or, from an
// older script, an integer).
func ParseUint(v any) (uint64, error) {
	switch x := v.(type) {
	case string:
		return strconv.ParseUint(x, 10, 64)
	case int64:
		if x < 0 {
			return 0, fmt.Errorf("negative counter %d", x)
		}
		return uint64(x), nil
	}
	return 0, fmt.Errorf("counter of type %T", v)
}

// IntReply is a script's integer reply (of release.lua, extend.lua).
func IntReply(script string, v any, err error) (int64, error) {
	if err != nil {
		return 0, err
	}
	n, ok := v.(int64)
	if !ok {
		return 0, BadReply("unexpected %s reply %v", script, v)
	}
	return n, nil
}
