package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// The floor of a fenced lock (issue 46): not a library, the least that a
// lock which gives a fence costs on one Redis, on a given client. One
// script takes the key and counts the fence (SET NX PX, INCR, PEXPIRE: a
// fence that increases, with a counter that expires), another gives the
// key back if it still holds the token (GET, DEL). Sent as a user of the
// client would send them (go-redis' Script.Run, rueidis' Lua.Exec), with
// nothing around them: no lock object, no deadline, no renewal. dlock's
// uncontended targets measure it against the floor on the same client, by
// turns (see Paired). The floor has no queue, no tombstone and no server
// clock in its fence: what dlock's scripts do beyond it is what DESIGN's
// principles 3, 5 and 6 ask for.

// floorAcquireSrc takes KEYS[1] for ARGV[1] for ARGV[2] ms and returns {1,
// fence}, the fence counted in KEYS[2], which lives ARGV[3] ms; {0, pttl}
// when the key is held.
const floorAcquireSrc = `if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local f = redis.call('INCR', KEYS[2])
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
  return {1, f}
end
return {0, redis.call('PTTL', KEYS[1])}`

// floorReleaseSrc deletes KEYS[1] if it holds ARGV[1].
const floorReleaseSrc = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`

var (
	floorAcquire = redis.NewScript(floorAcquireSrc)
	floorRelease = redis.NewScript(floorReleaseSrc)
)

// The floor's TTL and its counter's life, as dlock's defaults (30s, 24h).
const (
	floorTTL  = 30000
	floorLife = 86400000
)

// FloorLibraries returns the floor on each client dlock is measured on:
// a default go-redis client, one built with ContextTimeoutEnabled, and a
// default rueidis client (auto-pipelining).
func FloorLibraries() []Library {
	return []Library{FloorLibrary(false), FloorLibrary(true), RueidisFloorLibrary()}
}

// FloorLibrary is the floor on a go-redis client (with ctxTimeout, built
// with ContextTimeoutEnabled, as dlock-ctx's).
func FloorLibrary(ctxTimeout bool) Library {
	name, how := "floor", "a default go-redis client"
	if ctxTimeout {
		name, how = "floor-ctx", "a go-redis client built with ContextTimeoutEnabled: true"
	}
	return Library{
		Name:    name,
		Ceiling: true,
		Floor:   true,
		Note:    "not a library: the floor of a fenced lock, a script of SET NX PX, INCR and PEXPIRE, and a compare-and-delete script, sent by go-redis' Script.Run through " + how,
		New: func(addrs []string, sent *Counter) (Process, error) {
			if len(addrs) != 1 {
				return nil, errors.New(name + ": one Redis only")
			}
			return &floorProcess{c: newGoRedisClient(&redis.Options{Addr: addrs[0], ContextTimeoutEnabled: ctxTimeout}, sent), prefix: floorPrefix()}, nil
		},
	}
}

// floorPrefix is a random prefix for a process's tokens (each token is
// the prefix and a count: unique, and cheaper than a random token each).
func floorPrefix() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:]) + ":"
}

type floorProcess struct {
	c      *redis.Client
	prefix string
	seq    atomic.Int64
}

func (p *floorProcess) Lock(ctx context.Context, key string) (Held, error) {
	token := p.prefix + strconv.FormatInt(p.seq.Add(1), 10)
	lock := "floor:{" + key + "}"
	v, err := floorAcquire.Run(ctx, p.c, []string{lock, lock + ":fence"}, token, floorTTL, floorLife).Slice()
	if err != nil {
		return nil, err
	}
	if len(v) != 2 || v[0] != int64(1) {
		return nil, fmt.Errorf("%s: %w", key, errFloorHeld)
	}
	return floorHeld{p: p, lock: lock, token: token}, nil
}

// errFloorHeld is the floor's refusal: the key is held.
var errFloorHeld = errors.New("held")

type floorHeld struct {
	p           *floorProcess
	lock, token string
}

func (h floorHeld) Unlock(ctx context.Context) error {
	return floorRelease.Run(ctx, h.p.c, []string{h.lock}, h.token).Err()
}

func (p *floorProcess) Close() error { return p.c.Close() }

// RueidisFloorLibrary is the floor on a default rueidis client, its
// scripts sent as rueidislock sends its own (Lua.Exec: EVALSHA, EVAL after
// NOSCRIPT).
func RueidisFloorLibrary() Library {
	const name = "floor-rueidis"
	return Library{
		Name:    name,
		Ceiling: true,
		Floor:   true,
		Note:    "not a library: the floor of a fenced lock, as floor, sent by rueidis' Lua.Exec through a default rueidis client (auto-pipelining)",
		New: func(addrs []string, sent *Counter) (Process, error) {
			if len(addrs) != 1 {
				return nil, errors.New(name + ": one Redis only")
			}
			c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs})
			if err != nil {
				return nil, err
			}
			return &rueidisFloor{c: countingRueidis{Client: c, sent: sent}, prefix: floorPrefix(),
				acquire: rueidis.NewLuaScript(floorAcquireSrc), release: rueidis.NewLuaScript(floorReleaseSrc)}, nil
		},
	}
}

type rueidisFloor struct {
	c                countingRueidis
	prefix           string
	seq              atomic.Int64
	acquire, release *rueidis.Lua
}

var floorArgs = [2]string{strconv.Itoa(floorTTL), strconv.Itoa(floorLife)}

func (p *rueidisFloor) Lock(ctx context.Context, key string) (Held, error) {
	token := p.prefix + strconv.FormatInt(p.seq.Add(1), 10)
	lock := "floor:{" + key + "}"
	v, err := p.acquire.Exec(ctx, p.c, []string{lock, lock + ":fence"}, []string{token, floorArgs[0], floorArgs[1]}).ToArray()
	if err != nil {
		return nil, err
	}
	if len(v) != 2 {
		return nil, fmt.Errorf("%s: %w", key, errFloorHeld)
	}
	if ok, _ := v[0].AsInt64(); ok != 1 {
		return nil, fmt.Errorf("%s: %w", key, errFloorHeld)
	}
	return rueidisFloorHeld{p: p, lock: lock, token: token}, nil
}

type rueidisFloorHeld struct {
	p           *rueidisFloor
	lock, token string
}

func (h rueidisFloorHeld) Unlock(ctx context.Context) error {
	return h.p.release.Exec(ctx, h.p.c, []string{h.lock}, []string{h.token}).Error()
}

func (p *rueidisFloor) Close() error {
	p.c.Close()
	return nil
}

// FloorOf returns the floor on lib's client, for one of dlock's
// configurations on one Redis (dlock, dlock-ctx, dlock-rueidis).
func FloorOf(lib Library, floors []Library) (Library, bool) {
	name := map[string]string{"dlock": "floor", "dlock-ctx": "floor-ctx", "dlock-rueidis": "floor-rueidis"}[lib.Name]
	for _, f := range floors {
		if f.Name == name {
			return f, true
		}
	}
	return Library{}, false
}

// FloorPairs are the runs by turns of one of dlock's configurations (Lib:
// "dlock", or "dlock-try" for its TryAcquire) and the floor on its client,
// a pair per row, the library's result first.
type FloorPairs struct {
	Lib, Floor string
	Goroutines int
	Pairs      [][]UncontendedResult
}

// Ratios returns the pairs' ratios, the library's rate over the floor's.
func (f FloorPairs) Ratios() []float64 {
	var rs []float64
	for _, p := range f.Pairs {
		rs = append(rs, p[0].OpsPerSec/p[1].OpsPerSec)
	}
	return rs
}

// FormatRatios formats ratios as the report does.
func FormatRatios(r []float64) string { return fmtRatios(r) }

// FloorHandoffLibrary is the floor of a hand-off: the floor's scripts on a
// default go-redis client, with waiters told in-process, at no cost, the
// instant the holder's release returns, in order of arrival (the
// processes of one FloorHandoffLibrary value share a queue per key). A
// woken waiter then takes the key with one round trip, which no lock whose
// waiters are told through Redis can beat: their wake-up reaches a waiter
// at the earliest as the release's answer reaches the releaser. dlock's
// hand-off over a network is measured against it (issue 46).
func FloorHandoffLibrary() Library {
	q := &handoffQueue{turns: map[string]*handoffTurn{}}
	return Library{
		Name:    "floor-handoff",
		Ceiling: true,
		Floor:   true,
		Note:    "not a library: the floor of a hand-off, floor's scripts on a default go-redis client, each waiter told in-process at no cost as the release returns, then one round trip",
		New: func(addrs []string, sent *Counter) (Process, error) {
			if len(addrs) != 1 {
				return nil, errors.New("floor-handoff: one Redis only")
			}
			p := &floorProcess{c: newGoRedisClient(&redis.Options{Addr: addrs[0]}, sent), prefix: floorPrefix()}
			return &handoffProcess{p: p, q: q}, nil
		},
	}
}

// handoffQueue is the in-process queue of floor-handoff's waiters, per key.
type handoffQueue struct {
	mu    sync.Mutex
	turns map[string]*handoffTurn
}

// handoffTurn is one key's: whether a process has the turn (holds the key,
// or is taking it), and the waiters after it.
type handoffTurn struct {
	taken   bool
	waiting []chan struct{}
}

// enter waits for key's turn, or for ctx to end.
func (q *handoffQueue) enter(ctx context.Context, key string) error {
	q.mu.Lock()
	t := q.turns[key]
	if t == nil {
		t = &handoffTurn{}
		q.turns[key] = t
	}
	if !t.taken {
		t.taken = true
		q.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	t.waiting = append(t.waiting, ch)
	q.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
	}
	q.mu.Lock()
	if i := slices.Index(t.waiting, ch); i >= 0 {
		t.waiting = slices.Delete(t.waiting, i, i+1)
		q.mu.Unlock()
		return ctx.Err()
	}
	q.mu.Unlock()
	q.leave(key) // given the turn meanwhile: passed on
	return ctx.Err()
}

// leave passes key's turn to the first waiter, if any.
func (q *handoffQueue) leave(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	t := q.turns[key]
	if len(t.waiting) == 0 {
		t.taken = false
		return
	}
	close(t.waiting[0])
	t.waiting = t.waiting[1:]
}

type handoffProcess struct {
	p *floorProcess
	q *handoffQueue
}

// Lock waits for the key's turn, then takes it with the floor's script (a
// key still held, by a holder of an earlier run, is tried again 1ms later).
func (h *handoffProcess) Lock(ctx context.Context, key string) (Held, error) {
	if err := h.q.enter(ctx, key); err != nil {
		return nil, err
	}
	for {
		held, err := h.p.Lock(ctx, key)
		if err == nil {
			return handoffHeld{held: held.(floorHeld), q: h.q, key: key}, nil
		}
		if !errors.Is(err, errFloorHeld) || ctx.Err() != nil {
			h.q.leave(key)
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, err
		}
		time.Sleep(time.Millisecond)
	}
}

type handoffHeld struct {
	held floorHeld
	q    *handoffQueue
	key  string
}

// Unlock releases the key, then tells the next waiter.
func (h handoffHeld) Unlock(ctx context.Context) error {
	err := h.held.Unlock(ctx)
	h.q.leave(h.key)
	return err
}

func (h *handoffProcess) Close() error { return h.p.Close() }
