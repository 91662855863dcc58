package bench

import (
	"context"
	"errors"
	"fmt"

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
		rueidisCeilingLibrary("dlock-scripts"), rueidisCeilingLibrary("setnx-scripts"),
	}
}

// rueidisCeilingLibrary is a pair of scripts sent by a rueidis client (its
// auto-pipelining: concurrent Do calls share a write) the way rueidislock
// sends its own: rueidis.Lua's Exec (EVALSHA, EVAL after NOSCRIPT), keys
// and arguments as strings, the reply read as it comes. dlock's lock.lua
// and unlock.lua with the arguments dlock sends ("dlock-scripts-rueidis"),
// or the SET NX scripts ("setnx-scripts-rueidis", as cheap as rueidislock's
// own: SET NX then GET, GET then DEL): the same client code around both, so
// that the two rows differ only by what the scripts do in Redis (issue 35:
// what dlock on rueidis could reach with no library around its scripts).
func rueidisCeilingLibrary(scripts string) Library {
	name := scripts + "-rueidis"
	note := "not a library: dlock's lock.lua and unlock.lua alone, as dlock sends them"
	if scripts == "setnx-scripts" {
		note = "not a library: SET NX PX, then GET and DEL, each a script (redislock's)"
	}
	return Library{
		Name:    name,
		Ceiling: true,
		Note:    note + ", through a default rueidis client (auto-pipelining), sent as rueidislock sends its scripts",
		New: func(addrs []string, sent *Counter) (Process, error) {
			if len(addrs) != 1 {
				return nil, errors.New(name + ": one Redis only")
			}
			c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs})
			if err != nil {
				return nil, err
			}
			p := &rueidisScripts{c: countingRueidis{Client: c, sent: sent}, dlock: scripts == "dlock-scripts"}
			if p.dlock {
				p.lock, p.unlock = rueidis.NewLuaScript(script.Lock.Source()), rueidis.NewLuaScript(script.Unlock.Source())
			} else {
				p.lock, p.unlock = rueidis.NewLuaScript(setnxAcquireSrc), rueidis.NewLuaScript(setnxReleaseSrc)
			}
			return p, nil
		},
	}
}

type rueidisScripts struct {
	c            countingRueidis
	lock, unlock *rueidis.Lua
	dlock        bool
}

func (p *rueidisScripts) Lock(ctx context.Context, key string) (Held, error) {
	if p.dlock {
		nm := keys.Make("dlock:", key)
		ks := nm.LockKeys()
		r, err := p.lock.Exec(ctx, p.c, []string{ks[0].(string), ks[1].(string), ks[2].(string)},
			[]string{scriptsToken, ceilingTTL, ceilingRetention}).ToArray()
		if err != nil {
			return nil, err
		}
		if len(r) < 2 {
			return nil, fmt.Errorf("%s: not free", key)
		}
		if ok, _ := r[0].AsInt64(); ok != 1 {
			return nil, fmt.Errorf("%s: not free", key)
		}
		return rueidisScriptsHeld{p: p, keys: []string{nm.UnlockKeys()[0].(string), ks[0].(string)}}, nil
	}
	lock := "dlock:{" + key + "}"
	if err := p.lock.Exec(ctx, p.c, []string{lock}, []string{scriptsToken, ceilingTTL}).Error(); err != nil {
		if rueidis.IsRedisNil(err) {
			return nil, fmt.Errorf("%s: not free", key)
		}
		return nil, err
	}
	return rueidisScriptsHeld{p: p, keys: []string{lock}}, nil
}

type rueidisScriptsHeld struct {
	p    *rueidisScripts
	keys []string
}

func (h rueidisScriptsHeld) Unlock(ctx context.Context) error {
	return h.p.unlock.Exec(ctx, h.p.c, h.keys, []string{scriptsToken}).Error()
}

func (p *rueidisScripts) Close() error {
	p.c.Close()
	return nil
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
	setnxAcquire = redis.NewScript(setnxAcquireSrc)
	setnxRelease = redis.NewScript(setnxReleaseSrc)
)

const setnxAcquireSrc = `return redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])`

const setnxReleaseSrc = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`

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
