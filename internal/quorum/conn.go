package quorum

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/internal/node"
)

// redisConn is node.Conn on a go-redis client (the node's, a bounded copy
// of it, or either through a batcher: see Node).
type redisConn struct{ c redis.UniversalClient }

var _ node.Conn = (*redisConn)(nil)

// newCmd is args as a *redis.Cmd; a script's is routed by its first key
// (index 3), as go-redis' own EVALSHA is.
func newCmd(ctx context.Context, args []any) *redis.Cmd {
	c := redis.NewCmd(ctx, args...)
	if s, _ := args[0].(string); s == "evalsha" || s == "eval" {
		c.SetFirstKeyPos(3)
	}
	return c
}

// reply is cmd's reply as node.Conn gives it: a nil reply is nil without
// an error, a closed client's error wraps node.ErrClosed.
func reply(cmd *redis.Cmd) (any, error) {
	v, err := cmd.Result()
	if err == redis.Nil {
		return nil, nil
	}
	return v, closedErr(err)
}

// closedErr is err, or for go-redis' closed client an error that matches
// both node.ErrClosed and redis.ErrClosed (as it did before node.Conn),
// with go-redis' text.
func closedErr(err error) error {
	if err == redis.ErrClosed {
		return errClientClosed
	}
	return err
}

// errClientClosed is go-redis' redis.ErrClosed as node.Conn gives it.
var errClientClosed error = closedError{}

type closedError struct{}

func (closedError) Error() string        { return redis.ErrClosed.Error() }
func (closedError) Unwrap() error        { return redis.ErrClosed }
func (closedError) Is(target error) bool { return target == node.ErrClosed }

func (r *redisConn) Do(ctx context.Context, args ...any) (any, error) {
	cmd := newCmd(ctx, args)
	_ = r.c.Process(ctx, cmd)
	return reply(cmd)
}

func (r *redisConn) DoMulti(ctx context.Context, cmds ...[]any) []node.Result {
	return pipelined(ctx, r.c, cmds)
}

// pipelined sends cmds as one pipeline of p's.
func pipelined(ctx context.Context, p redis.Cmdable, cmds [][]any) []node.Result {
	sent := make([]*redis.Cmd, len(cmds))
	_, err := p.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for i, a := range cmds {
			sent[i] = newCmd(ctx, a)
			_ = pipe.Process(ctx, sent[i])
		}
		return nil
	})
	out := make([]node.Result, len(cmds))
	for i, c := range sent {
		if err != nil && c.Err() == nil && c.Val() == nil {
			c.SetErr(err) // go-redis leaves the commands alone when it got no connection
		}
		out[i].Val, out[i].Err = reply(c)
	}
	return out
}

// DoWait pipelines the command and WAIT on the server of its first key: a
// Cluster's master for that key as go-redis last knew it, where a MOVED or
// ASK answer (the slot moved: a failover) is a transient error and has the
// client reload its slots, so that the next attempt goes to the new master.
func (r *redisConn) DoWait(ctx context.Context, args []any, replicas int, timeoutMS int64) (cmd, wait node.Result) {
	var p redis.Cmdable = r.c
	cc, cluster := r.c.(*redis.ClusterClient)
	if cluster {
		key, _ := args[3].(string)
		m, err := cc.MasterForKey(ctx, key)
		if err != nil {
			err = closedErr(err)
			return node.Result{Err: err}, node.Result{Err: err}
		}
		p = m
	}
	rs := pipelined(ctx, p, [][]any{args, {"WAIT", replicas, timeoutMS}})
	cmd, wait = rs[0], rs[1]
	if cluster && (node.HasErrorPrefix(cmd.Err, "MOVED") || node.HasErrorPrefix(cmd.Err, "ASK")) {
		cc.ReloadState(context.Background())
		cmd.Err = fmt.Errorf("the slot moved (%s); the cluster's slots are being reloaded", cmd.Err.Error())
	}
	return cmd, wait
}

// NewConn is c as a node.Conn, without the batchers and bounds of a Node's
// calls (tests, tools).
func NewConn(c redis.UniversalClient) node.Conn { return &redisConn{c} }

// redisPubSub is node.PubSub on go-redis' PubSub.
type redisPubSub struct{ ps *redis.PubSub }

// NewPubSub returns a pub/sub connection to the node, not subscribed to
// anything yet (go-redis connects at the first Subscribe).
func (n *Node) NewPubSub() node.PubSub {
	if n.family != nil {
		return n.family.NewPubSub()
	}
	return &redisPubSub{n.Client.Subscribe(context.Background())}
}

func (p *redisPubSub) Subscribe(ctx context.Context, channel string) error {
	return closedErr(p.ps.Subscribe(ctx, channel))
}

func (p *redisPubSub) Receive(ctx context.Context) (node.Event, error) {
	msg, err := p.ps.Receive(ctx)
	if err != nil {
		return node.Event{}, closedErr(err)
	}
	switch m := msg.(type) {
	case *redis.Subscription:
		return node.Event{Kind: m.Kind}, nil
	case *redis.Message:
		return node.Event{Kind: "message", Payload: m.Payload}, nil
	}
	return node.Event{Kind: "other"}, nil
}

func (p *redisPubSub) Close() error { return closedErr(p.ps.Close()) }
