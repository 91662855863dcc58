package bench

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/dlock-dev/dlock/internal/keys"
	"github.com/dlock-dev/dlock/internal/node"
	"github.com/dlock-dev/dlock/internal/script"
)

// The ceiling of the uncontended scenarios: not libraries, but the scripts
// that a library sends, sent alone on free keys with nothing around them
// (no lock object, no timer, no deadline), so that the report can tell what
// the scripts cost from what a library adds to them. dlock's own lock.lua
// and unlock.lua (a plain lock's everyday scripts), with the KEYS and ARGV
// that dlock sends for an Acquire that does not wait and for its Release;
// and the scripts of a
// lock with no fence and no queue, SET NX PX to take it and GET then DEL to
// give it back (what redislock sends). Each through a default go-redis
// client, and through go-redis' AutoPipeliner (v9.23, the version this
// module resolves; not in dlock's go.mod minimum). docs/benchmarks-analysis.md
// ("The everyday path") reads them.

// CeilingLibraries returns the ceiling's configurations, run with the
// uncontended scenarios (never a peer: see Library.Ceiling).
func CeilingLibraries() []Library {
	return []Library{
		ceilingLibrary("dlock-scripts", false), ceilingLibrary("dlock-scripts", true),
		ceilingLibrary("setnx-scripts", false), ceilingLibrary("setnx-scripts", true),
		rueidisCeilingLibrary(),
	}
}

// rueidisCeilingLibrary is dlock's lock.lua and unlock.lua sent by a
// rueidis client (its auto-pipelining: concurrent Do calls share a write),
// through a node.Conn on rueidis that sends only Do: the prototype of
// issue 35's client family, to tell what dlock on rueidis could reach.
func rueidisCeilingLibrary() Library {
	return Library{
		Name:    "dlock-scripts-rueidis",
		Ceiling: true,
		Note:    "not a library: dlock's lock.lua and unlock.lua alone, as dlock sends them, through a default rueidis client (auto-pipelining)",
		New: func(addrs []string, sent *Counter) (Process, error) {
			if len(addrs) != 1 {
				return nil, errors.New("dlock-scripts-rueidis: one Redis only")
			}
			c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs})
			if err != nil {
				return nil, err
			}
			return &scriptsProcess{dlock: true, conn: &rueidisConn{countingRueidis{Client: c, sent: sent}}, close: c.Close}, nil
		},
	}
}

// rueidisConn is node.Conn's Do on rueidis, for the ceiling: a script's
// keys are given to the builder, so that a Cluster client would route it.
type rueidisConn struct{ c rueidis.Client }

func (r *rueidisConn) Do(ctx context.Context, args ...any) (any, error) {
	s := make([]string, len(args))
	for i, a := range args {
		s[i] = fmt.Sprint(a)
	}
	var cmd rueidis.Completed
	if n, err := strconv.Atoi(s[2]); err == nil && (s[0] == "evalsha" || s[0] == "eval") {
		cmd = r.c.B().Arbitrary(s[:3]...).Keys(s[3 : 3+n]...).Args(s[3+n:]...).Build()
	} else {
		cmd = r.c.B().Arbitrary(s...).Build()
	}
	v, err := r.c.Do(ctx, cmd).ToAny()
	if rueidis.IsRedisNil(err) {
		return nil, nil
	}
	if re, ok := rueidis.IsRedisErr(err); ok {
		return nil, &node.ReplyError{Msg: re.Error()}
	}
	return v, err
}

func (r *rueidisConn) DoMulti(context.Context, ...[]any) []node.Result {
	panic("the ceiling sends no pipeline")
}

func (r *rueidisConn) DoWait(context.Context, []any, int, int64) (cmd, wait node.Result) {
	panic("the ceiling sends no WAIT")
}

func ceilingLibrary(scripts string, autopipeline bool) Library {
	name, note := scripts, "not a library: dlock's lock.lua and unlock.lua alone, as dlock sends them"
	if scripts == "setnx-scripts" {
		note = "not a library: SET NX PX, then GET and DEL, each a script (redislock's)"
	}
	via := "a default client"
	if autopipeline {
		name += "-ap"
		via = "go-redis' AutoPipeliner"
	}
	return Library{
		Name:    name,
		Ceiling: true,
		Note:    note + ", through " + via,
		New: func(addrs []string, sent *Counter) (Process, error) {
			if len(addrs) != 1 {
				return nil, errors.New(name + ": one Redis only")
			}
			c := goRedisClient(addrs[0], sent)
			p := &scriptsProcess{client: c, cmd: c, dlock: scripts == "dlock-scripts"}
			if autopipeline {
				ap, err := c.AutoPipeline()
				if err != nil {
					c.Close()
					return nil, err
				}
				p.ap, p.cmd = ap, ap
			}
			p.conn = &processConn{p.cmd}
			return p, nil
		},
	}
}

// setnxAcquire and setnxRelease are the scripts of a lock with no fence
// and no queue.
var (
	setnxAcquire = redis.NewScript(`return redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])`)
	setnxRelease = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)
)

// dlock's arguments, as the library sends them for a lock of the default
// TTL on one Redis: an Acquire that does not register as a waiter
// (lock.lua) and its Release by a Locker that never waited (unlock.lua).
const (
	ceilingTTL       = "30000"
	ceilingRetention = "86400000"
)

// scriptClient runs go-redis' Script (the SET NX scripts) and
// internal/script's commands (dlock's).
type scriptClient interface {
	redis.Scripter
	Process(ctx context.Context, cmd redis.Cmder) error
}

// processConn sends dlock's script commands with a scriptClient, as the
// library's go-redis node.Conn does (the ceiling sends only those: Do).
type processConn struct{ c scriptClient }

func (p *processConn) Do(ctx context.Context, args ...any) (any, error) {
	cmd := redis.NewCmd(ctx, args...)
	cmd.SetFirstKeyPos(3)
	_ = p.c.Process(ctx, cmd)
	v, err := cmd.Result()
	if err == redis.Nil {
		return nil, nil
	}
	return v, err
}

func (p *processConn) DoMulti(context.Context, ...[]any) []node.Result {
	panic("the ceiling sends no pipeline")
}

func (p *processConn) DoWait(context.Context, []any, int, int64) (cmd, wait node.Result) {
	panic("the ceiling sends no WAIT")
}

type scriptsProcess struct {
	client *redis.Client
	ap     *redis.AutoPipeliner
	cmd    scriptClient // the client, or its AutoPipeliner
	conn   node.Conn    // cmd's, for dlock's scripts
	dlock  bool
	close  func() // for a client that is not go-redis'
}

const scriptsToken = "ceiling-token"

// Lock takes key with one script call; a key that is not free is an error
// (the uncontended scenario's keys always are).
func (p *scriptsProcess) Lock(ctx context.Context, key string) (Held, error) {
	if p.dlock {
		nm := keys.Make("dlock:", key)
		v, err := script.Lock.Run(ctx, p.conn, script.LockCommand(nm.LockKeys(), scriptsToken, ceilingTTL, ceilingRetention))
		if err != nil {
			return nil, err
		}
		if r, _ := v.([]any); len(r) == 0 || r[0] != int64(1) {
			return nil, fmt.Errorf("%s: not free", key)
		}
		return scriptsHeld{p: p, names: nm}, nil
	}
	lock := "dlock:{" + key + "}"
	v, err := setnxAcquire.Run(ctx, p.cmd, []string{lock}, scriptsToken, redislockTTL.Milliseconds()).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	if v != "OK" {
		return nil, fmt.Errorf("%s: not free", key)
	}
	return scriptsHeld{p: p, lock: lock}, nil
}

type scriptsHeld struct {
	p     *scriptsProcess
	names *keys.Names // dlock's scripts
	lock  string      // the SET NX scripts'
}

// Unlock gives the key back with one script call.
func (h scriptsHeld) Unlock(ctx context.Context) error {
	if h.names != nil {
		_, err := script.Unlock.Run(ctx, h.p.conn, script.UnlockCommand(h.names.UnlockKeys(), scriptsToken))
		return err
	}
	return setnxRelease.Run(ctx, h.p.cmd, []string{h.lock}, scriptsToken).Err()
}

func (p *scriptsProcess) Close() error {
	if p.close != nil {
		p.close()
		return nil
	}
	if p.ap != nil {
		_ = p.ap.Close()
	}
	return p.client.Close()
}
