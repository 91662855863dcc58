// Package bench compares dlock with the Go Redis lock libraries it is most
// often weighed against, on real redis-server processes started on loopback.
//
// Each library is wrapped in a small adapter (one file each) that uses it the
// way its documentation shows. The scenarios live in scenarios.go, the
// report in report.go, and the command that runs everything in
// cmd/dlockbench.
package bench

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/dlocktest"
)

// A Process stands for one client process: its own Redis client(s) and its
// own locker. Contended scenarios give every worker its own Process, since
// dlock (like rueidislock) queues the goroutines of one process locally.
type Process interface {
	// Lock acquires key, waiting the way the library waits, until ctx ends.
	Lock(ctx context.Context, key string) (Held, error)
	// Close releases the process's locker and clients.
	Close() error
}

// Held is an acquired lock.
type Held interface {
	Unlock(ctx context.Context) error
}

// Library describes one library (or one configuration of a library).
type Library struct {
	Name string
	// GoRedis is true for libraries built on go-redis (the uncontended
	// target compares dlock with the fastest of those).
	GoRedis bool
	// Dlock is true for dlock's own configurations (never a peer).
	Dlock bool
	// Ceiling is true for the ceiling's configurations (ceiling.go): not a
	// library, never a peer, reported in a section of their own.
	Ceiling bool
	// Floor is true for the floor of a fenced lock (floor.go), a ceiling
	// configuration against which dlock's uncontended targets are
	// measured by turns.
	Floor bool
	// Note says how the library is configured, for the report.
	Note string
	// Limit is the number of holders the library's lock lets in at once
	// (a semaphore); 0 or 1 for a mutex.
	Limit int
	// New starts a Process on the given nodes (one address: a single Redis;
	// several: Redlock, for the libraries that support it). Every command
	// the process's clients send is counted in sent.
	New func(addrs []string, sent *Counter) (Process, error)
}

// Counter counts the commands clients send to Redis (round trips), not the
// commands that scripts run inside Redis.
type Counter = dlocktest.Counter

// goRedisClient returns a go-redis client with default settings whose
// commands are counted in sent.
func goRedisClient(addr string, sent *Counter) *redis.Client {
	return newGoRedisClient(&redis.Options{Addr: addr}, sent)
}

// newGoRedisClient returns a go-redis client built with o whose commands are
// counted in sent.
func newGoRedisClient(o *redis.Options, sent *Counter) *redis.Client {
	c := redis.NewClient(o)
	if sent != nil {
		c.AddHook(sent)
	}
	return c
}

// Libraries returns the libraries compared on one Redis, dlock's
// configurations first.
func Libraries() []Library {
	return []Library{
		DlockLibrary(false), DlockLibrary(true), DlockRueidisLibrary(),
		RedsyncLibrary(false), RedsyncLibrary(true),
		RedislockLibrary(false), RedislockLibrary(true),
		RueidislockLibrary(), RueidislockOneKeyLibrary(),
	}
}
