package bench

import (
	"context"
	"errors"
	"time"

	"github.com/bsm/redislock"
	"github.com/redis/go-redis/v9"
)

// redislockTTL is the TTL passed to Obtain (redislock has no default; dlock's
// default is the same).
const redislockTTL = 30 * time.Second

// RedislockLibrary is bsm/redislock as its README shows: redislock.New(client),
// Obtain(ctx, key, ttl, opts), Release. Defaults: no retry, so Obtain fails at
// once when the lock is taken and the worker calls it again straight away (a
// caller that must have the lock has nothing better to do). Tuned: a linear
// backoff of 1ms, retrying until ctx ends.
func RedislockLibrary(tuned bool) Library {
	name, note := "redislock", "defaults: no retry (the worker calls Obtain again at once)"
	var opts *redislock.Options // nil: the defaults
	if tuned {
		opts = &redislock.Options{RetryStrategy: redislock.LinearBackoff(time.Millisecond)}
		name, note = "redislock-tuned", "RetryStrategy: LinearBackoff(1ms)"
	}
	return Library{
		Name:    name,
		GoRedis: true,
		Note:    note,
		New: func(addrs []string, sent *Counter) (Process, error) {
			if len(addrs) != 1 {
				return nil, errors.New("redislock: one Redis only")
			}
			c := goRedisClient(addrs[0], sent)
			return &redislockProcess{client: c, locker: redislock.New(c), opts: opts}, nil
		},
	}
}

type redislockProcess struct {
	client *redis.Client
	locker *redislock.Client
	opts   *redislock.Options
}

func (p *redislockProcess) Lock(ctx context.Context, key string) (Held, error) {
	for {
		l, err := p.locker.Obtain(ctx, key, redislockTTL, p.opts)
		if err == nil {
			return redislockHeld{l}, nil
		}
		if ctx.Err() != nil {
			return nil, errors.Join(err, ctx.Err())
		}
		if !errors.Is(err, redislock.ErrNotObtained) {
			return nil, err
		}
	}
}

type redislockHeld struct{ l *redislock.Lock }

func (h redislockHeld) Unlock(ctx context.Context) error { return h.l.Release(ctx) }

func (p *redislockProcess) Close() error { return p.client.Close() }
