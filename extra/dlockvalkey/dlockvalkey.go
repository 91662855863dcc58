// Code generated from extra/dlockrueidis/dlockrueidis.go by generated_test.go; DO NOT EDIT.

// Package dlockvalkey runs dlock on valkey-go clients
// (github.com/valkey-io/valkey-go) instead of go-redis: the same Locker, with the
// same guarantees, for services that talk to Redis through valkey-go.
//
//	client, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{"127.0.0.1:6379"}})
//	if err != nil { ... }
//	locker := dlockvalkey.New(client)
//	defer locker.Close()
//	lock, err := locker.Acquire(ctx, "payout:42")
//
// Commands go through the client's Do and DoMulti, so that concurrent
// acquisitions share its auto-pipelining; each pub/sub subscription (the
// Locker's inbox of wake-ups, release requests, elections' announcements)
// takes a dedicated connection of its own (Dedicate), made again with its
// subscriptions when it breaks. A Cluster client's waiters use classic
// pub/sub (SUBSCRIBE), not sharded. The Locker does not close the clients.
//
// This module is released with the core: require the version of
// github.com/dlock-dev/dlock that it names (it uses the core's internals).
package dlockvalkey

import (
	"context"
	"encoding"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/bridge"
	"github.com/dlock-dev/dlock/internal/inbox"
	"github.com/dlock-dev/dlock/internal/node"
)

// newLocker is dlock's constructor over node.Clients (see internal/bridge),
// or nil if the core in the build is not the version this module was
// released with (New and NewRedlock then panic saying so).
var newLocker, _ = bridge.NewLocker.(func([]node.Client, []dlock.Option) (*dlock.Locker, error))

// core is newLocker, or a panic that says what is wrong.
func core() func([]node.Client, []dlock.Option) (*dlock.Locker, error) {
	if newLocker == nil {
		panic("dlockvalkey: the github.com/dlock-dev/dlock in this build is not the version that this module was released with: require the same version of both")
	}
	return newLocker
}

// New returns a Locker on one Redis deployment through client: a
// standalone server, a Sentinel deployment or a Cluster, as dlock.New does
// for a go-redis client. It panics if client is nil; an invalid Option
// makes every call return an error wrapping dlock.ErrInvalid, as with
// dlock.New.
func New(client valkey.Client, opts ...dlock.Option) *dlock.Locker {
	if client == nil {
		panic("dlockvalkey: New called with a nil client")
	}
	l, _ := core()([]node.Client{newClient(client)}, opts) // an invalid Option: l returns its error
	return l
}

// NewRedlock returns a Locker over N independent Redis masters (the Redlock
// algorithm), one valkey client each, as dlock.NewRedlock does for
// go-redis clients. It returns an error wrapping dlock.ErrInvalid for an
// empty list, a nil client or an invalid Option, and one wrapping
// dlock.ErrMisconfigured and dlock.ErrInvalid for the same client twice.
// (Two clients of one server are found by the servers' run ids, at the
// first acquisitions, as with dlock.NewRedlock.)
func NewRedlock(clients []valkey.Client, opts ...dlock.Option) (*dlock.Locker, error) {
	ncs := make([]node.Client, len(clients))
	for i, c := range clients {
		if c == nil {
			return nil, fmt.Errorf("%w: client %d of %d is nil", dlock.ErrInvalid, i, len(clients))
		}
		if j := slices.Index(clients[:i], c); j >= 0 {
			return nil, fmt.Errorf("%w: clients %d and %d are the same client: a quorum of one server is one point of failure (%w)",
				dlock.ErrMisconfigured, j, i, dlock.ErrInvalid)
		}
		ncs[i] = newClient(c)
	}
	l, err := core()(ncs, opts)
	if err != nil {
		if l != nil {
			l.Close()
		}
		return nil, err
	}
	return l, nil
}

// client is a valkey-go client as a node.Client.
type client struct {
	c    valkey.Client
	conn *conn
	desc node.Description
}

// newClient describes c: its address (the nodes it knows), and whether it
// is a Cluster client. A valkey client does not say whether it dials with
// TLS, nor lets one read its retry settings: TLS and NoRetries stay false
// (the hints of errors do not mention TLS; every failed command may have
// run, as far as dlock knows: conn.Do sends a script again itself).
func newClient(c valkey.Client) *client {
	addrs := make([]string, 0, 4)
	for a := range c.Nodes() {
		addrs = append(addrs, a)
	}
	slices.Sort(addrs)
	cluster := c.Mode() == valkey.ClientModeCluster
	addr := strings.Join(addrs, ",")
	if cluster && len(addrs) > 0 {
		addr = "cluster(" + addrs[0] + ",...)"
	}
	return &client{c: c, conn: &conn{c: c}, desc: node.Description{Addr: addr, Cluster: cluster}}
}

func (c *client) Conn() node.Conn            { return c.conn }
func (c *client) NewPubSub() node.PubSub     { return newPubSub(c.c) }
func (c *client) Describe() node.Description { return c.desc }

// conn is node.Conn on a valkey-go client.
type conn struct{ c valkey.Client }

// build makes args a valkey command, its keys where dlock puts them (see
// node.Conn), so that a Cluster client routes it by its first key. The
// builder copies each string into its own pooled command: no slice of
// strings is made on the way, and the command's name is sent in upper case
// (which the builder checks without a copy then).
func build(b valkey.Builder, args []any) valkey.Completed {
	name := upper(str(args[0]))
	c, rest := b.Arbitrary(name), args[1:]
	switch name {
	case "EVALSHA", "EVAL":
		if len(args) < 3 {
			break
		}
		numKeys := str(args[2])
		if n, err := strconv.Atoi(numKeys); err == nil && n > 0 && 3+n <= len(args) {
			c = c.Args(str(args[1]), numKeys)
			for _, k := range args[3 : 3+n] {
				c = c.Keys(str(k))
			}
			rest = args[3+n:]
		}
	case "INFO", "WAIT", "PING":
	default:
		if len(args) > 1 {
			c, rest = c.Keys(str(args[1])), args[2:]
		}
	}
	for _, a := range rest {
		c = c.Args(str(a))
	}
	return c.Build()
}

// upper is a command's name in upper case (dlock's scripts' without a
// copy).
func upper(name string) string {
	switch name {
	case "evalsha":
		return "EVALSHA"
	case "eval":
		return "EVAL"
	}
	return strings.ToUpper(name)
}

// str is an argument as the text valkey sends. One that counts the copies
// of its command written (node.Copies' arguments: see node.Conn) counts one
// each time a command is built with it, as Do and DoMulti do for every
// copy they send.
func str(a any) string {
	switch x := a.(type) {
	case string:
		return x
	case encoding.BinaryMarshaler:
		b, _ := x.MarshalBinary() // node.Copies' never fails
		return string(b)
	case int:
		return strconv.Itoa(x)
	case int64:
		return strconv.FormatInt(x, 10)
	}
	return fmt.Sprint(a)
}

// reply is r as node.Conn gives it: an error reply inside an array or a
// map (extend.lua answers one per lock of a batch) is a node.ReplyError
// too, as go-redis gives it.
func reply(r valkey.ValkeyResult) (any, error) {
	v, err := r.ToAny()
	if err != nil {
		return nil, mapErr(err)
	}
	return nested(v), nil
}

// nested replaces valkey-go's error replies inside v with node.ReplyErrors.
func nested(v any) any {
	switch x := v.(type) {
	case []any:
		for i, e := range x {
			x[i] = nested(e)
		}
	case map[string]any:
		for k, e := range x {
			x[k] = nested(e)
		}
	case error:
		return mapErr(x)
	}
	return v
}

// mapErr maps valkey-go's errors to node.Conn's: a nil reply is no error, an
// error reply a node.ReplyError. (valkey.ErrClosing is its error for a
// closed client and for a server it cannot connect to alike, so it is left
// a transport's error, never node.ErrClosed: the command may have run, as
// far as dlock knows, and the Locker's clean-up keeps trying until Close.)
func mapErr(err error) error {
	if err == nil || valkey.IsValkeyNil(err) {
		return nil
	}
	if re, ok := valkey.IsValkeyErr(err); ok {
		return &node.ReplyError{Msg: re.Error()}
	}
	return err
}

// Do and DoMulti send a command whose connection failed again, up to
// retries times, a millisecond after the first failure and twice as long
// after each next one, when the command is one of dlock's scripts or only
// reads (see again): a connection that the server closed while the client
// was idle (its idle timeout, a restart, a proxy's) then costs no call, as
// on go-redis, which retries such a command itself. (The pause lets
// valkey replace the connection it found closed: until then, a command
// sent fails at once with the same error.) Not until ctx ends, as a
// command marked retryable in valkey would be: on a server that is down,
// each dial is refused at once, and the call fails within milliseconds, not
// at the node timeout. dlock's scripts are idempotent (one run twice, its
// first reply lost, answers as the first would have and writes nothing
// more). DoWait is not retried: WAIT on a new connection would count none
// of the writes it waits for.
func (c *conn) Do(ctx context.Context, args ...any) (any, error) {
	v, err := reply(c.c.Do(ctx, build(c.c.B(), args)))
	for i := 0; i < retries && again(ctx, args, err) && pause(ctx, i); i++ {
		v, err = reply(c.c.Do(ctx, build(c.c.B(), args)))
	}
	return v, err
}

// retries is how many times Do and DoMulti send a command again.
const retries = 3

// pause waits before the i-th retry (from 0): a millisecond, doubling. It
// returns false if ctx ended first.
func pause(ctx context.Context, i int) bool {
	t := time.NewTimer(time.Millisecond << i)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func (c *conn) DoMulti(ctx context.Context, cmds ...[]any) []node.Result {
	out := c.doMulti(ctx, cmds)
	for i := 0; i < retries; i++ {
		var retry []int
		for j, r := range out {
			if again(ctx, cmds[j], r.Err) {
				retry = append(retry, j)
			}
		}
		if len(retry) == 0 || !pause(ctx, i) {
			break
		}
		sub := make([][]any, len(retry))
		for k, j := range retry {
			sub[k] = cmds[j]
		}
		for k, r := range c.doMulti(ctx, sub) {
			out[retry[k]] = r
		}
	}
	return out
}

func (c *conn) doMulti(ctx context.Context, cmds [][]any) []node.Result {
	built := make([]valkey.Completed, len(cmds))
	for i, a := range cmds {
		built[i] = build(c.c.B(), a)
	}
	out := make([]node.Result, len(cmds))
	for i, r := range c.c.DoMulti(ctx, built...) {
		out[i].Val, out[i].Err = reply(r)
	}
	return out
}

// again reports whether a command that failed with err is sent again
// (see Do): one of dlock's scripts or a command that only reads, failed by
// its connection (not an error reply, not ctx's end, not a closed client).
func again(ctx context.Context, args []any, err error) bool {
	if err == nil || node.IsReply(err) || ctx.Err() != nil || errors.Is(err, valkey.ErrClosing) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	switch upper(str(args[0])) {
	case "EVALSHA", "EVAL", "INFO", "PING", "GET", "HGET", "HGETALL", "PTTL", "ZCARD", "ZRANGE":
		return true
	}
	return false
}

// DoWait sends the command and WAIT on a dedicated connection (to the
// server of the command's key, on a Cluster), so that WAIT counts the
// command's write. valkey takes the connection without a context (a dial
// waits for its Dialer's timeout): the call runs on a goroutine of its
// own, and DoWait returns ctx's error when ctx ends first (the command may
// still run; the goroutine ends with the dial).
func (c *conn) DoWait(ctx context.Context, args []any, replicas int, timeoutMS int64) (cmd, wait node.Result) {
	type results struct{ cmd, wait node.Result }
	done := make(chan results, 1)
	go func() {
		var r results
		err := c.c.Dedicated(func(dc valkey.DedicatedClient) error {
			rs := dc.DoMulti(ctx, build(dc.B(), args), build(dc.B(), []any{"wait", replicas, timeoutMS}))
			r.cmd.Val, r.cmd.Err = reply(rs[0])
			r.wait.Val, r.wait.Err = reply(rs[1])
			return nil
		})
		if err != nil {
			err = mapErr(err)
			r.cmd.Err, r.wait.Err = err, err
		}
		done <- r
	}()
	select {
	case r := <-done:
		return r.cmd, r.wait
	case <-ctx.Done():
		err := ctx.Err()
		return node.Result{Err: err}, node.Result{Err: err}
	}
}

// pubSub is node.PubSub on valkey-go: a dedicated connection with pub/sub
// hooks, made by a goroutine of its own (run) once something is to be
// subscribed, and made again, with every channel subscribed so far, when
// it breaks. Events and errors reach Receive in the order they happened.
type pubSub struct {
	c     valkey.Client
	items chan item
	done  chan struct{}

	mu       sync.Mutex
	channels []string
	dc       valkey.DedicatedClient // the current connection; nil while there is none
	// up is closed once the current connection is subscribed to every
	// channel recorded before it was made; a new one replaces it when the
	// connection breaks.
	up      chan struct{}
	started bool
	closed  bool
}

// item is an event, or an error (a broken connection, a refusal).
type item struct {
	e   node.Event
	err error
}

func newPubSub(c valkey.Client) *pubSub {
	return &pubSub{c: c, items: make(chan item, 64), done: make(chan struct{}), up: make(chan struct{})}
}

// Subscribe records channel and sends SUBSCRIBE on the current connection.
// Without one, the connection being made subscribes to it (the first call
// starts making it), and Subscribe returns once it did, or with ctx's error
// (the subscription is made all the same, once the connection is).
func (p *pubSub) Subscribe(ctx context.Context, channel string) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return node.ErrClosed
	}
	if !slices.Contains(p.channels, channel) {
		p.channels = append(p.channels, channel)
	}
	dc, up := p.dc, p.up
	if !p.started {
		p.started = true
		go p.run()
	}
	p.mu.Unlock()
	if dc != nil {
		return p.subscribe(ctx, dc, channel)
	}
	select {
	case <-up:
		return nil
	case <-p.done:
		return node.ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

// subscribe sends SUBSCRIBE for channels with dc. A refusal (an error
// reply: an ACL without the channel) is also given to Receive, as a
// refusal that arrives on a go-redis PubSub is.
func (p *pubSub) subscribe(ctx context.Context, dc valkey.DedicatedClient, channels ...string) error {
	err := mapErr(dc.Do(ctx, dc.B().Subscribe().Channel(channels...).Build()).Error())
	if node.IsReply(err) {
		p.push(item{err: err})
	}
	return err
}

// run makes the connection, subscribes it to every channel, waits for it
// to break (and reports that), and makes it again, backing off while the
// node does not answer, until Close. It dials without p.mu held: Close
// never waits for a dial (a dial under way ends with the Dialer's timeout,
// and its connection is then closed).
func (p *pubSub) run() {
	failures := 0
	for {
		dc, _ := p.c.Dedicate()
		broken := dc.SetPubSubHooks(valkey.PubSubHooks{
			OnMessage:      func(m valkey.PubSubMessage) { p.push(item{e: node.Event{Kind: "message", Payload: m.Message}}) },
			OnSubscription: func(s valkey.PubSubSubscription) { p.push(item{e: node.Event{Kind: s.Kind}}) },
		})
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			dc.Close()
			return
		}
		p.dc = dc
		channels := slices.Clone(p.channels)
		p.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), inbox.SubscribeTimeout) // bounds the SUBSCRIBE of every channel
		if err := p.subscribe(ctx, dc, channels...); err == nil || node.IsReply(err) {
			failures = 0
		}
		cancel()
		p.mu.Lock()
		close(p.up)
		p.mu.Unlock()
		var err error
		select {
		case err = <-broken:
		case <-p.done:
			return // Close closed dc
		}
		if isDone(p.done) {
			return
		}
		if err == nil {
			err = errors.New("dlockvalkey: the pub/sub connection was closed")
		}
		p.push(item{err: err})
		p.mu.Lock()
		p.dc, p.up = nil, make(chan struct{})
		p.mu.Unlock()
		dc.Close()
		failures++
		t := time.NewTimer(min(time.Duration(failures)*50*time.Millisecond, time.Second))
		select {
		case <-t.C:
		case <-p.done:
			t.Stop()
			return
		}
	}
}

// push hands it to Receive, in order, unless p is closed first.
func (p *pubSub) push(it item) {
	select {
	case p.items <- it:
	case <-p.done:
	}
}

func isDone(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// Receive returns the next event or error (a broken connection, made again
// meanwhile; a refusal), or node.ErrClosed once closed.
func (p *pubSub) Receive(ctx context.Context) (node.Event, error) {
	select {
	case it := <-p.items:
		return it.e, mapErr(it.err)
	case <-p.done:
		return node.Event{}, node.ErrClosed
	case <-ctx.Done():
		return node.Event{}, ctx.Err()
	}
}

// Close closes the connection (never returned to valkey-go's pool, where a
// connection still subscribed would answer other commands wrongly).
func (p *pubSub) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	close(p.done)
	dc := p.dc
	p.dc = nil
	p.mu.Unlock()
	if dc != nil {
		dc.Close()
	}
	return nil
}
