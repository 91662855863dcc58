package bench

import (
	"context"
	"errors"
	"time"

	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	goredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
)

// RedsyncLibrary is go-redsync/redsync v4 over go-redis v9 pools, as its
// README shows: rs.NewMutex(name), Lock, Unlock. Defaults: expiry 8s, 32 tries
// 50-250ms apart. Tuned: a 1ms retry delay. When Lock gives up (ErrFailed
// after its tries) the worker calls it again, as a caller that must have the
// lock would.
func RedsyncLibrary(tuned bool) Library {
	name, note := "redsync", "defaults: 32 tries, random 50-250ms retry delay"
	var opts []redsync.Option
	if tuned {
		name, note = "redsync-tuned", "WithRetryDelay(1ms)"
		opts = append(opts, redsync.WithRetryDelay(time.Millisecond))
	}
	return redsyncLibrary(name, note, opts...)
}

// RedsyncFailFastLibrary is redsync with WithFailFast(true): a round ends as
// soon as a quorum answered, rather than waiting for every node.
func RedsyncFailFastLibrary() Library {
	return redsyncLibrary("redsync-failfast", "WithFailFast(true), default go-redis clients", redsync.WithFailFast(true))
}

func redsyncLibrary(name, note string, opts ...redsync.Option) Library {
	return Library{
		Name:    name,
		GoRedis: true,
		Note:    note,
		New: func(addrs []string, sent *Counter) (Process, error) {
			p := &redsyncProcess{opts: opts}
			var pools []redsyncredis.Pool
			for _, a := range addrs {
				c := goRedisClient(a, sent)
				p.clients = append(p.clients, c)
				pools = append(pools, goredis.NewPool(c))
			}
			p.rs = redsync.New(pools...)
			return p, nil
		},
	}
}

type redsyncProcess struct {
	clients []*redis.Client
	rs      *redsync.Redsync
	opts    []redsync.Option
}

func (p *redsyncProcess) Lock(ctx context.Context, key string) (Held, error) {
	for {
		m := p.rs.NewMutex(key, p.opts...)
		err := m.LockContext(ctx)
		if err == nil {
			return redsyncHeld{m}, nil
		}
		if ctx.Err() != nil {
			return nil, errors.Join(err, ctx.Err())
		}
		// ErrFailed after the tries, ErrTaken, or a node error: try again.
	}
}

type redsyncHeld struct{ m *redsync.Mutex }

func (h redsyncHeld) Unlock(ctx context.Context) error {
	_, err := h.m.UnlockContext(ctx)
	return err
}

func (p *redsyncProcess) Close() error {
	for _, c := range p.clients {
		_ = c.Close()
	}
	return nil
}
