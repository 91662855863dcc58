package bench

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/internal/script"
)

// The ceiling of the uncontended scenarios: not libraries, but the scripts
// that a library sends, sent alone on free keys with nothing around them
// (no lock object, no timer, no deadline), so that the report can tell what
// the scripts cost from what a library adds to them. dlock's own
// acquire.lua and release.lua, with the KEYS and ARGV that dlock sends for
// an Acquire that does not wait and for its Release; and the scripts of a
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
	}
}

func ceilingLibrary(name string, autopipeline bool) Library {
	note := "not a library: dlock's acquire.lua and release.lua alone, as dlock sends them"
	if name == "setnx-scripts" {
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
			p := &scriptsProcess{client: c, cmd: c, dlock: name != "setnx-scripts" && name != "setnx-scripts-ap"}
			if autopipeline {
				ap, err := c.AutoPipeline()
				if err != nil {
					c.Close()
					return nil, err
				}
				p.ap, p.cmd = ap, ap
			}
			return p, nil
		},
	}
}

// setnxAcquire and setnxRelease are the scripts of a lock with no fence
// and no queue.
var (
	setnxAcquire = redis.NewScript(`return redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])`)
	setnxRelease = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)
	dlockAcquire = redis.NewScript(script.Acquire.Source())
	dlockRelease = redis.NewScript(script.Release.Source())
)

type scriptsProcess struct {
	client *redis.Client
	ap     *redis.AutoPipeliner
	cmd    redis.Scripter
	dlock  bool
}

const scriptsToken = "ceiling-token"

// Lock takes key with one script call; a key that is not free is an error
// (the uncontended scenario's keys always are).
func (p *scriptsProcess) Lock(ctx context.Context, key string) (Held, error) {
	lock := "dlock:{" + key + "}"
	var ok bool
	if p.dlock {
		// acquire.lua's KEYS and ARGV (see internal/script): token, TTL,
		// retention, no metadata, a lock; no waiter.
		r, err := dlockAcquire.Run(ctx, p.cmd, []string{lock, lock + ":fence", lock + ":waiters", lock + ":wexp", lock + ":meta", lock + ":limit", lock + ":dead", lock + ":writers"},
			scriptsToken, redislockTTL.Milliseconds(), 86400000, "", "1").Slice()
		if err != nil {
			return nil, err
		}
		ok = len(r) > 0 && r[0] == int64(1)
	} else {
		v, err := setnxAcquire.Run(ctx, p.cmd, []string{lock}, scriptsToken, redislockTTL.Milliseconds()).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return nil, err
		}
		ok = v == "OK"
	}
	if !ok {
		return nil, fmt.Errorf("%s: not free", key)
	}
	return scriptsHeld{p, lock}, nil
}

type scriptsHeld struct {
	p    *scriptsProcess
	lock string
}

// Unlock gives the key back with one script call.
func (h scriptsHeld) Unlock(ctx context.Context) error {
	l := h.lock
	if h.p.dlock {
		// release.lua's KEYS and ARGV: the token, the inbox prefix, no
		// reservation, nobody leaving, wake, no metadata, listeners exact
		// (one Redis), no tombstone, the retention; not a Cluster.
		return dlockRelease.Run(ctx, h.p.cmd, []string{l, l + ":waiters", l + ":wexp", l + ":meta", l + ":limit", l + ":dead", l + ":fence", l + ":writers"},
			scriptsToken, "dlock:inbox:", 0, "", "1", "0", "1", "0", 86400000, "").Err()
	}
	return setnxRelease.Run(ctx, h.p.cmd, []string{l}, scriptsToken).Err()
}

func (p *scriptsProcess) Close() error {
	if p.ap != nil {
		_ = p.ap.Close()
	}
	return p.client.Close()
}
