package redisserver

import (
	"context"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// Counter counts the commands that clients send to Redis (round trips; a
// pipeline counts each of its commands), not the commands that scripts run
// inside Redis. Add it to a go-redis client with AddHook. The zero value is
// ready to use, and a nil *Counter counts nothing.
type Counter struct{ n atomic.Int64 }

var _ redis.Hook = (*Counter)(nil)

// Load returns the count.
func (c *Counter) Load() int64 { return c.n.Load() }

// Add adds n commands, for clients that are not go-redis clients.
func (c *Counter) Add(n int) {
	if c != nil {
		c.n.Add(int64(n))
	}
}

// DialHook implements redis.Hook; dials are not counted.
func (c *Counter) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook.
func (c *Counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.Add(1)
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook implements redis.Hook.
func (c *Counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.Add(len(cmds))
		return next(ctx, cmds)
	}
}
