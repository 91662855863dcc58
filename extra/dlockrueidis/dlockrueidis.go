// Package dlockrueidis runs dlock on rueidis clients
// (github.com/redis/rueidis) instead of go-redis: the same Locker, with the
// same guarantees, for services that talk to Redis through rueidis.
//
//	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{"127.0.0.1:6379"}})
//	if err != nil { ... }
//	locker := dlockrueidis.New(client)
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
package dlockrueidis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/bridge"
	"github.com/dlock-dev/dlock/internal/node"
)

// newLocker is dlock's constructor over node.Clients (see internal/bridge).
var newLocker = bridge.NewLocker.(func([]node.Client, []dlock.Option) (*dlock.Locker, error))

// New returns a Locker on one Redis deployment through client: a
// standalone server, a Sentinel deployment or a Cluster, as dlock.New does
// for a go-redis client. It panics if client is nil; an invalid Option
// makes every call return an error wrapping dlock.ErrInvalid, as with
// dlock.New.
func New(client rueidis.Client, opts ...dlock.Option) *dlock.Locker {
	if client == nil {
		panic("dlockrueidis: New called with a nil client")
	}
	l, _ := newLocker([]node.Client{newClient(client)}, opts) // an invalid Option: l returns its error
	return l
}

// NewRedlock returns a Locker over N independent Redis masters (the Redlock
// algorithm), one rueidis client each, as dlock.NewRedlock does for
// go-redis clients. It returns an error wrapping dlock.ErrInvalid for an
// empty list, a nil client or an invalid Option, and one wrapping
// dlock.ErrMisconfigured and dlock.ErrInvalid for the same client twice.
// (Two clients of one server are found by the servers' run ids, at the
// first acquisitions, as with dlock.NewRedlock.)
func NewRedlock(clients []rueidis.Client, opts ...dlock.Option) (*dlock.Locker, error) {
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
	l, err := newLocker(ncs, opts)
	if err != nil {
		if l != nil {
			l.Close()
		}
		return nil, err
	}
	return l, nil
}

// client is a rueidis client as a node.Client.
type client struct {
	c    rueidis.Client
	conn *conn
	desc node.Description
}

func newClient(c rueidis.Client) *client {
	addrs := make([]string, 0, 4)
	for a := range c.Nodes() {
		addrs = append(addrs, a)
	}
	slices.Sort(addrs)
	cluster := c.Mode() == rueidis.ClientModeCluster
	addr := strings.Join(addrs, ",")
	if cluster && len(addrs) > 0 {
		addr = "cluster(" + addrs[0] + ",...)"
	}
	return &client{c: c, conn: &conn{c: c}, desc: node.Description{Addr: addr, Cluster: cluster}}
}

func (c *client) Conn() node.Conn            { return c.conn }
func (c *client) NewPubSub() node.PubSub     { return newPubSub(c.c) }
func (c *client) Describe() node.Description { return c.desc }

// conn is node.Conn on a rueidis client.
type conn struct{ c rueidis.Client }

// build makes args a rueidis command, its keys where dlock puts them (see
// node.Conn), so that a Cluster client routes it by its first key.
func build(b rueidis.Builder, args []any) rueidis.Completed {
	s := make([]string, len(args))
	for i, a := range args {
		s[i] = str(a)
	}
	switch strings.ToLower(s[0]) {
	case "evalsha", "eval":
		if n, err := strconv.Atoi(s[2]); err == nil && n > 0 && 3+n <= len(s) {
			return b.Arbitrary(s[:3]...).Keys(s[3 : 3+n]...).Args(s[3+n:]...).Build()
		}
	case "info", "wait", "ping":
		return b.Arbitrary(s...).Build()
	default:
		if len(s) > 1 {
			return b.Arbitrary(s[0]).Keys(s[1]).Args(s[2:]...).Build()
		}
	}
	return b.Arbitrary(s...).Build()
}

func str(a any) string {
	switch x := a.(type) {
	case string:
		return x
	case int:
		return strconv.Itoa(x)
	case int64:
		return strconv.FormatInt(x, 10)
	}
	return fmt.Sprint(a)
}

// reply is r as node.Conn gives it.
func reply(r rueidis.RedisResult) (any, error) {
	v, err := r.ToAny()
	return v, mapErr(err)
}

// mapErr maps rueidis' errors to node.Conn's: a nil reply is no error, an
// error reply a node.ReplyError. (rueidis.ErrClosing is also its error for
// a server it cannot connect to, so it is left a transport's error: the
// command may have run, as far as dlock knows.)
func mapErr(err error) error {
	if err == nil || rueidis.IsRedisNil(err) {
		return nil
	}
	if re, ok := rueidis.IsRedisErr(err); ok {
		return &node.ReplyError{Msg: re.Error()}
	}
	return err
}

func (c *conn) Do(ctx context.Context, args ...any) (any, error) {
	return reply(c.c.Do(ctx, build(c.c.B(), args)))
}

func (c *conn) DoMulti(ctx context.Context, cmds ...[]any) []node.Result {
	built := make([]rueidis.Completed, len(cmds))
	for i, a := range cmds {
		built[i] = build(c.c.B(), a)
	}
	out := make([]node.Result, len(cmds))
	for i, r := range c.c.DoMulti(ctx, built...) {
		out[i].Val, out[i].Err = reply(r)
	}
	return out
}

// DoWait sends the command and WAIT on a dedicated connection (to the
// server of the command's key, on a Cluster), so that WAIT counts the
// command's write.
func (c *conn) DoWait(ctx context.Context, args []any, replicas int, timeoutMS int64) (cmd, wait node.Result) {
	err := c.c.Dedicated(func(dc rueidis.DedicatedClient) error {
		rs := dc.DoMulti(ctx, build(dc.B(), args), build(dc.B(), []any{"wait", replicas, timeoutMS}))
		cmd.Val, cmd.Err = reply(rs[0])
		wait.Val, wait.Err = reply(rs[1])
		return nil
	})
	if err != nil {
		err = mapErr(err)
		cmd.Err, wait.Err = err, err
	}
	return cmd, wait
}

// pubSub is node.PubSub on rueidis: a dedicated connection with pub/sub
// hooks, made again (with every channel subscribed so far) when it breaks.
type pubSub struct {
	c      rueidis.Client
	events chan node.Event
	errs   chan error
	done   chan struct{}

	mu       sync.Mutex
	channels []string
	dc       rueidis.DedicatedClient
	cancel   func()
	running  bool
	closed   bool
}

func newPubSub(c rueidis.Client) *pubSub {
	return &pubSub{c: c, events: make(chan node.Event, 64), errs: make(chan error, 1), done: make(chan struct{})}
}

// Subscribe records channel and sends SUBSCRIBE on the current connection,
// making it first if there is none.
func (p *pubSub) Subscribe(ctx context.Context, channel string) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return node.ErrClosed
	}
	if !slices.Contains(p.channels, channel) {
		p.channels = append(p.channels, channel)
	}
	dc := p.dc
	if dc == nil {
		var wait <-chan error
		dc, wait = p.dedicate()
		if !p.running {
			p.running = true
			go p.watch(wait)
		}
	}
	p.mu.Unlock()
	return p.subscribe(ctx, dc, channel)
}

// subscribe sends SUBSCRIBE for channels with dc. A refusal (an error
// reply: an ACL without the channel) is also given to Receive, as a
// refusal that arrives on a go-redis PubSub is.
func (p *pubSub) subscribe(ctx context.Context, dc rueidis.DedicatedClient, channels ...string) error {
	err := mapErr(dc.Do(ctx, dc.B().Subscribe().Channel(channels...).Build()).Error())
	if node.IsReply(err) {
		select {
		case p.errs <- err:
		default:
		}
	}
	return err
}

// dedicate takes a dedicated connection with the hooks; p.mu is held.
func (p *pubSub) dedicate() (rueidis.DedicatedClient, <-chan error) {
	dc, cancel := p.c.Dedicate()
	wait := dc.SetPubSubHooks(rueidis.PubSubHooks{
		OnMessage: func(m rueidis.PubSubMessage) { p.push(node.Event{Kind: "message", Payload: m.Message}) },
		OnSubscription: func(s rueidis.PubSubSubscription) {
			p.push(node.Event{Kind: s.Kind})
		},
	})
	p.dc, p.cancel = dc, cancel
	return dc, wait
}

func (p *pubSub) push(e node.Event) {
	select {
	case p.events <- e:
	case <-p.done:
	}
}

// watch waits for the connection to break, reports it, and makes a new one
// with every channel, backing off while the node does not answer.
func (p *pubSub) watch(wait <-chan error) {
	failures := 0
	for {
		var err error
		select {
		case err = <-wait:
		case <-p.done:
			return
		}
		if err == nil {
			err = errors.New("dlockrueidis: the pub/sub connection was closed")
		}
		select {
		case p.errs <- err:
		default:
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return
		}
		p.cancel()
		dc, w := p.dedicate()
		channels := slices.Clone(p.channels)
		p.mu.Unlock()
		wait = w
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = p.subscribe(ctx, dc, channels...)
		cancel()
		if err == nil {
			failures = 0
			continue
		}
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

// Receive returns the next event, or the error of a broken connection
// (made again meanwhile), or node.ErrClosed once closed.
func (p *pubSub) Receive(ctx context.Context) (node.Event, error) {
	select {
	case e := <-p.events:
		return e, nil
	case err := <-p.errs:
		return node.Event{}, mapErr(err)
	case <-p.done:
		return node.Event{}, node.ErrClosed
	case <-ctx.Done():
		return node.Event{}, ctx.Err()
	}
}

// Close ends the connection.
func (p *pubSub) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	close(p.done)
	if p.cancel != nil {
		p.cancel()
	}
	return nil
}
