// Package node is what dlock needs of a Redis client to send commands to
// one node (a server, or a Sentinel or Cluster deployment through its
// client): Conn. Its replies are plain Go values, whatever the client
// library, so that the rounds, the scripts' parsers and the status reads
// are written once.
//
// go-redis is its implementation today (internal/quorum); a client family
// of its own (rueidis, valkey-go) implements Conn in its extra.
package node

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
)

// Conn sends commands to one node. Every method is bounded by ctx: its
// deadline (or the socket deadlines of the client it wraps, where the
// client does not honour ctx) ends a call without an answer.
//
// A reply is nil (a nil reply: a missing key, Lua's false), an int64, a
// string (bulk and status replies), a float64 or bool (RESP3), a []any or
// a map[any]any or map[string]any (RESP3), of such values. An error reply of Redis is an
// error for which IsReply holds; a client that was closed answers an error
// wrapping ErrClosed where its library tells a closed client apart (go-redis
// does; rueidis does not, and its error is then a transport's); any other
// error is the transport's (the command may or may not have run).
//
// A command's keys are where Redis puts them: EVAL and EVALSHA's after
// their number at index 2, other keyed commands' (GET, PTTL, HGET, HGETALL,
// ZCARD, ZRANGE) at index 1; INFO and WAIT have none. A Cluster client
// routes a command by its first key.
type Conn interface {
	// Do sends one command (args[0] is its name) and returns its reply.
	Do(ctx context.Context, args ...any) (any, error)
	// DoMulti sends cmds in one round trip where it can (a Cluster may
	// split it by slot) and returns their replies, in order.
	DoMulti(ctx context.Context, cmds ...[]any) []Result
	// DoWait sends the command args, then WAIT replicas timeoutMS, on one
	// connection to the server that serves args' first key (WAIT counts
	// the writes of its own connection), and returns both replies.
	DoWait(ctx context.Context, args []any, replicas int, timeoutMS int64) (cmd, wait Result)
}

// Result is one command's reply, or its error.
type Result struct {
	Val any
	Err error
}

// ErrClosed is wrapped by the error of a command sent with a closed
// client: it was never sent.
var ErrClosed = errors.New("redis: client is closed")

// replyError is an error reply of Redis. go-redis' errors satisfy it; a
// Conn of another client library wraps its own in a ReplyError.
type replyError interface {
	error
	RedisError()
}

// ReplyError is an error reply of Redis, for a Conn whose client library's
// errors are not go-redis'.
type ReplyError struct{ Msg string }

func (e *ReplyError) Error() string { return e.Msg }

// RedisError marks an error reply of Redis.
func (*ReplyError) RedisError() {}

// IsReply reports whether err is an error reply of Redis (as opposed to a
// transport's failure, a context's end or a closed client).
func IsReply(err error) bool {
	_, ok := Reply(err)
	return ok
}

// Reply is the text of the error reply of Redis that err is or wraps, and
// whether there is one.
func Reply(err error) (string, bool) {
	if err == nil {
		return "", false
	}
	return reply(err) // (a function of its own: errors.As's target is allocated only when err is not nil)
}

func reply(err error) (string, bool) {
	var r replyError
	if !errors.As(err, &r) {
		return "", false
	}
	return r.Error(), true
}

// HasErrorPrefix reports whether err is an error reply of Redis whose text,
// without a leading "ERR ", begins with prefix (as go-redis' function of
// the same name).
func HasErrorPrefix(err error, prefix string) bool {
	msg, ok := Reply(err)
	return ok && strings.HasPrefix(strings.TrimPrefix(msg, "ERR "), prefix)
}

// String is a reply as a string: a bulk or status reply, or "" for any
// other (nil included).
func String(v any) string {
	s, _ := v.(string)
	return s
}

// Int is an integer reply (or an integer's digits), and whether it was one.
func Int(v any) (int64, bool) {
	switch x := v.(type) {
	case int64:
		return x, true
	case string:
		n, err := strconv.ParseInt(x, 10, 64)
		return n, err == nil
	}
	return 0, false
}

// StringMap is HGETALL's reply as a map: RESP2's flat array of fields and
// values, or RESP3's map. Anything else is an empty map.
func StringMap(v any) map[string]string {
	switch x := v.(type) {
	case []any:
		m := make(map[string]string, len(x)/2)
		for i := 0; i+1 < len(x); i += 2 {
			m[String(x[i])] = String(x[i+1])
		}
		return m
	case map[any]any:
		m := make(map[string]string, len(x))
		for f, v := range x {
			m[String(f)] = String(v)
		}
		return m
	case map[string]any:
		m := make(map[string]string, len(x))
		for f, v := range x {
			m[f] = String(v)
		}
		return m
	}
	return map[string]string{}
}

// Scored is a sorted set's member and its score.
type Scored struct {
	Member string
	Score  float64
}

// ScoredMembers is ZRANGE … WITHSCORES's reply: RESP2's flat array of
// members and scores (as strings), or RESP3's array of pairs. Entries it
// cannot read are left out.
func ScoredMembers(v any) []Scored {
	arr, _ := v.([]any)
	var out []Scored
	for i := 0; i < len(arr); i++ {
		var m, s any
		if pair, ok := arr[i].([]any); ok && len(pair) == 2 {
			m, s = pair[0], pair[1]
		} else if i+1 < len(arr) {
			m, s = arr[i], arr[i+1]
			i++
		} else {
			break
		}
		score, ok := float(s)
		if !ok {
			continue
		}
		out = append(out, Scored{Member: String(m), Score: score})
	}
	return out
}

func float(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case int64:
		return float64(x), true
	case string:
		f, err := strconv.ParseFloat(x, 64)
		return f, err == nil
	}
	return 0, false
}

// PubSub is one pub/sub connection to a node. It subscribes again by
// itself after a reconnection, and Receive then gives the node's new
// confirmation (messages published meanwhile were missed).
type PubSub interface {
	// Subscribe subscribes to channel (SUBSCRIBE). The subscription is
	// recorded even if the write fails: the next reconnection makes it.
	Subscribe(ctx context.Context, channel string) error
	// Receive waits for the next event: a message, a confirmation, or an
	// error (a broken connection, which the PubSub mends by itself; a
	// refusal, an error reply; an error wrapping ErrClosed once closed).
	Receive(ctx context.Context) (Event, error)
	// Close ends the connection; a Receive under way returns.
	Close() error
}

// Event is what a PubSub received.
type Event struct {
	// Kind is "message" for a message, "subscribe" for a confirmation of
	// SUBSCRIBE; other kinds (an unsubscription, a PONG) are to be ignored.
	Kind    string
	Payload string // a message's
}

// Client is one node's client as a client family other than go-redis
// gives it to dlock (see internal/bridge): its commands, its pub/sub, and
// what dlock must know of it. Its calls honour ctx's deadline and
// cancellation (dlock runs them on the caller's goroutine).
type Client interface {
	Conn() Conn
	NewPubSub() PubSub
	Describe() Description
}

// Description is what dlock must know of a node's client.
type Description struct {
	// Addr names the node in errors and events.
	Addr string
	// Cluster is true for a Cluster client: it routes each command by its
	// first key, and a pub/sub subscription may sit on another node than
	// the keys it is about.
	Cluster bool
	// TLS is true for a client that dials with TLS (it only shapes the
	// hints of errors; false when the client does not say).
	TLS bool
	// NoRetries is true when the client never sends a command twice, so
	// that a command whose connection could not be made never ran.
	NoRetries bool
}

// Copies counts the copies of one command that were written to a
// connection. A command written once and answered ran once; one written
// twice (a client that sends a command again after its connection failed
// behind the write: go-redis with MaxRetries, an extra's resend) may run
// twice, and the copy whose answer was lost may run after later commands
// of the same lock. dlock puts an argument of a Copies (Args) in a command,
// in place of the script's SHA1 or source; a Conn writes that argument's
// bytes, from its MarshalBinary, each time it writes the command (go-redis
// calls MarshalBinary for every write), so that N counts them. A Conn that
// holds a copy back to write it later counts it when it takes it, by
// calling MarshalBinary then.
// A Copies counts one command (its EVALSHA, and the EVAL after NOSCRIPT,
// each apart: an EVAL after a NOSCRIPT is no second copy of the EVALSHA):
// its arguments are set once, before the command is first sent.
type Copies struct {
	sha, src copiesArg
}

// copiesArg is an argument whose writes it counts.
type copiesArg struct {
	n atomic.Int32
	b []byte
	s string
}

// MarshalBinary counts one copy written and returns the argument's bytes.
func (a *copiesArg) MarshalBinary() ([]byte, error) {
	a.n.Add(1)
	return a.b, nil
}

// String is the argument's text (for logs and hooks: it counts nothing).
func (a *copiesArg) String() string { return a.s }

// Args returns the arguments that c counts, for a script's SHA1 and for
// its source (EVALSHA's, and EVAL's after NOSCRIPT: a copy of the EVALSHA
// sent before may still run once EVAL loaded the script), with their bytes
// and text; the first call sets them, later ones return them.
func (c *Copies) Args(shaBytes []byte, sha string, srcBytes []byte, src string) (shaArg, srcArg any) {
	if c.sha.b == nil { // set once: a copy held back may still read them
		c.sha.b, c.sha.s = shaBytes, sha
		c.src.b, c.src.s = srcBytes, src
	}
	return &c.sha, &c.src
}

// Again counts one more copy of the command, written by other means than
// MarshalBinary (another command of the same purpose, whose copy may run
// as this one's would).
func (c *Copies) Again() { c.sha.n.Add(2) }

// N is the largest number of copies written so far of the EVALSHA or of
// the EVAL: more than 1, and a copy may run after the answer came.
func (c *Copies) N() int { return int(max(c.sha.n.Load(), c.src.n.Load())) }
