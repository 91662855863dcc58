package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/fenced"
)

// A linearizability checker for package fenced: histories of Store calls
// (Set, Claim, Get, Delete) made by holders of a dlock lock with their
// fences, by former holders with their old ones, and by readers, from
// several goroutines and Lockers at once, checked with porcupine against
// the sequential model of a fenced register. The model is fenced's exact
// rule: a write (Set, Delete, Claim) with fence f is done iff f ≥ the
// largest fence seen (an equal fence is the same holder writing again),
// and then records f; otherwise it is refused with a StaleError whose Seen
// is the largest fence seen, and changes nothing. Get returns the value and
// the largest fence seen. A call that failed otherwise (a timeout, a reset
// connection) may or may not have been done.
//
// The Stores' clients do not retry (MaxRetries -1): go-redis' retry of a
// write whose reply was lost can be refused after the first try wrote, a
// StaleError documented as such (fenced.StaleError) but not linearizable.

// regInput is a Store call.
type regInput struct {
	op    string // "set", "del", "claim", "get"
	key   string
	value string // Set's
	fence uint64
}

// regOutput is its result.
type regOutput struct {
	unknown bool   // failed otherwise: done or not
	stale   bool   // ErrStale
	seen    uint64 // StaleError.Seen, or Get's fence
	value   string // Claim's and Get's
	found   bool
}

// regState is one resource: its value and the largest fence seen.
type regState struct {
	value string
	found bool
	fence uint64
}

// registerModel is the model of a fenced register: fenced's rule, or with
// strict a register that refuses an equal fence (the stricter rule of
// extra/dlocksql's Add, which fenced does not follow: the self-test shows
// that the checker tells the two apart).
func registerModel(strict bool) porcupine.Model {
	m := porcupine.NondeterministicModel{
		Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
			by := map[string][]porcupine.Operation{}
			var keys []string
			for _, op := range h {
				k := op.Input.(regInput).key
				if _, ok := by[k]; !ok {
					keys = append(keys, k)
				}
				by[k] = append(by[k], op)
			}
			var parts [][]porcupine.Operation
			for _, k := range keys {
				parts = append(parts, by[k])
			}
			return parts
		},
		Init: func() []any { return []any{regState{}} },
		Step: func(state, input, output any) []any {
			return registerStep(strict, state.(regState), input.(regInput), output.(regOutput))
		},
		DescribeOperation: func(input, output any) string {
			i, o := input.(regInput), output.(regOutput)
			return fmt.Sprintf("%s(%s, %q, %d) -> %+v", i.op, i.key, i.value, i.fence, o)
		},
		DescribeState: func(state any) string { return fmt.Sprintf("%+v", state.(regState)) },
	}
	return m.ToModel()
}

// registerStep returns the states that s can move to by the call in, with
// the result out: none if out is impossible.
func registerStep(strict bool, s regState, in regInput, out regOutput) []any {
	if in.op == "get" {
		if out.unknown || out.found == s.found && out.value == s.value && out.seen == s.fence {
			return []any{s}
		}
		return nil
	}
	accept := in.fence >= s.fence
	if strict {
		accept = in.fence > s.fence
	}
	next := s
	if accept {
		next.fence = in.fence
		switch in.op {
		case "set":
			next.value, next.found = in.value, true
		case "del":
			next.value, next.found = "", false
		}
	}
	switch {
	case out.unknown && accept:
		return []any{s, next}
	case out.unknown:
		return []any{s}
	case !accept:
		if out.stale && out.seen == s.fence {
			return []any{s}
		}
		return nil
	case out.stale, in.op == "claim" && (out.found != s.found || out.value != s.value):
		return nil
	}
	return []any{next}
}

// register is what the workload calls: a fenced.Store, or a broken one.
type register interface {
	Set(ctx context.Context, key, value string, fence uint64) error
	Delete(ctx context.Context, key string, fence uint64) error
	Claim(ctx context.Context, key string, fence uint64) (string, bool, error)
	Get(ctx context.Context, key string) (string, uint64, error)
}

var _ register = (*fenced.Store)(nil)

// linHistory records the calls of a run.
type linHistory struct {
	start time.Time
	mu    sync.Mutex
	ops   []porcupine.Operation
}

func (h *linHistory) now() int64 { return int64(time.Since(h.start)) }

// call makes one call of in on r as client, and records it.
func (h *linHistory) call(ctx context.Context, r register, client int, in regInput) regOutput {
	call := h.now()
	var out regOutput
	var err error
	switch in.op {
	case "set":
		err = r.Set(ctx, in.key, in.value, in.fence)
	case "del":
		err = r.Delete(ctx, in.key, in.fence)
	case "claim":
		out.value, out.found, err = r.Claim(ctx, in.key, in.fence)
	case "get":
		out.value, out.seen, err = r.Get(ctx, in.key)
		out.found = err == nil
		if errors.Is(err, fenced.ErrNotFound) {
			err = nil
		}
	}
	var stale *fenced.StaleError
	switch {
	case errors.As(err, &stale):
		out = regOutput{stale: true, seen: stale.Seen}
	case err != nil:
		out = regOutput{unknown: true}
	}
	ret := h.now()
	if out.unknown {
		ret = math.MaxInt64 // may take effect at any time from the call on
	}
	h.mu.Lock()
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
	h.mu.Unlock()
	return out
}

// check runs porcupine on h against model.
func (h *linHistory) check(t *testing.T, model porcupine.Model) porcupine.CheckResult {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	res := porcupine.CheckOperationsTimeout(model, h.ops, time.Minute)
	return res
}

// counts sums up a history: calls by op and outcome.
func (h *linHistory) counts() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := map[string]int{}
	for _, op := range h.ops {
		in, out := op.Input.(regInput), op.Output.(regOutput)
		what := "ok"
		switch {
		case out.unknown:
			what = "unknown"
		case out.stale:
			what = "stale"
		}
		n[in.op+" "+what]++
	}
	var parts []string
	for _, k := range []string{"set ok", "set stale", "set unknown", "claim ok", "claim stale", "claim unknown",
		"del ok", "del stale", "del unknown", "get ok", "get unknown"} {
		parts = append(parts, fmt.Sprintf("%s %d", k, n[k]))
	}
	return fmt.Sprintf("%d calls: %s", len(h.ops), strings.Join(parts, ", "))
}

// linWorkload is a run of the workload: holders, former holders and
// readers of resources, each resource guarded by a lock of its own.
type linWorkload struct {
	lockers   []*dlock.Locker
	registers []register // one per locker, and one for the readers
	resources int
	ttl       time.Duration
	// pause, when set, is how long a holder may stop (a frozen process)
	// before its next write, once in a while: past its TTL, it writes as
	// a former holder.
	pause time.Duration
}

// run runs w for d and returns the history.
func (w linWorkload) run(t *testing.T, d time.Duration) *linHistory {
	h := &linHistory{start: time.Now()}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	w.prelude(t, h)
	var wg sync.WaitGroup
	for i, l := range w.lockers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.holder(ctx, h, i, l, w.registers[i])
		}()
	}
	wg.Add(1)
	go func() { // a reader without the lock
		defer wg.Done()
		for ctx.Err() == nil {
			opCtx, c := context.WithTimeout(context.Background(), time.Second)
			h.call(opCtx, w.registers[len(w.lockers)], len(w.lockers), regInput{op: "get", key: w.resource(rand.IntN(w.resources))})
			c()
			time.Sleep(5 * time.Millisecond)
		}
	}()
	wg.Wait()
	return h
}

func (w linWorkload) resource(i int) string { return fmt.Sprintf("lin%d", i) }

// prelude makes, on the first resource, the calls that a broken store
// gets wrong for sure: a former holder's Set and Claim after a newer
// holder's write, and a holder's second write with its fence.
func (w linWorkload) prelude(t *testing.T, h *linHistory) {
	key := w.resource(0)
	a, b := w.lockers[0], w.lockers[1%len(w.lockers)]
	ka, err := a.Acquire(ctx(t), key, dlock.WithTTL(w.ttl))
	if err != nil {
		t.Fatal(err)
	}
	h.call(ctx(t), w.registers[0], 0, regInput{op: "set", key: key, value: "a1", fence: ka.Fence()})
	h.call(ctx(t), w.registers[0], 0, regInput{op: "set", key: key, value: "a2", fence: ka.Fence()})
	ka.Release(ctx(t))
	kb, err := b.Acquire(ctx(t), key, dlock.WithTTL(w.ttl))
	if err != nil {
		t.Fatal(err)
	}
	h.call(ctx(t), w.registers[1], 1, regInput{op: "set", key: key, value: "b1", fence: kb.Fence()})
	h.call(ctx(t), w.registers[0], 0, regInput{op: "set", key: key, value: "a3", fence: ka.Fence()})
	h.call(ctx(t), w.registers[0], 0, regInput{op: "claim", key: key, fence: ka.Fence()})
	h.call(ctx(t), w.registers[1], 1, regInput{op: "get", key: key})
	kb.Release(ctx(t))
}

// holder is one Locker's loop: acquire a resource's lock, read it with
// Claim, write, sometimes delete, release; now and then write again with
// the fence of a lock it no longer holds.
func (w linWorkload) holder(ctx context.Context, h *linHistory, id int, l *dlock.Locker, r register) {
	var old []struct {
		key   string
		fence uint64
	}
	for seq := 0; ctx.Err() == nil; seq++ {
		key := w.resource(rand.IntN(w.resources))
		k, err := l.Acquire(ctx, key, dlock.WithTTL(w.ttl))
		if err != nil {
			continue
		}
		opCtx, cancel := context.WithTimeout(context.Background(), w.ttl)
		h.call(opCtx, r, id, regInput{op: "claim", key: key, fence: k.Fence()})
		if w.pause > 0 && rand.IntN(10) == 0 {
			time.Sleep(w.pause) // frozen: past its TTL, another may hold the lock
		}
		h.call(opCtx, r, id, regInput{op: "set", key: key, value: fmt.Sprintf("w%d-%d", id, seq), fence: k.Fence()})
		if rand.IntN(8) == 0 {
			h.call(opCtx, r, id, regInput{op: "del", key: key, fence: k.Fence()})
		}
		cancel()
		old = append(old, struct {
			key   string
			fence uint64
		}{key, k.Fence()})
		k.Release(context.Background())
		if rand.IntN(4) == 0 { // a former holder writes with its old fence
			o := old[rand.IntN(len(old))]
			opCtx, cancel := context.WithTimeout(context.Background(), w.ttl)
			op := "set"
			if rand.IntN(2) == 0 {
				op = "claim"
			}
			h.call(opCtx, r, id, regInput{op: op, key: o.key, value: fmt.Sprintf("w%d-%d-stale", id, seq), fence: o.fence})
			cancel()
		}
	}
}

// noRetries returns a client of addr that does not retry (see above).
func noRetries(t *testing.T, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	return c
}

// brokenStore is a fenced.Store with one check left out, for the
// checker's self-test.
type brokenStore struct {
	*fenced.Store
	c    *redis.Client
	skip string // "set": Set writes whatever the fence; "claim": Claim records its fence without comparing
}

var brokenSet = redis.NewScript(`
local seen = redis.call('HGET', KEYS[1], 'fence') or '0'
local f = ARGV[1]
if #seen > #f or (#seen == #f and seen > f) then f = seen end
redis.call('HSET', KEYS[1], 'value', ARGV[2], 'fence', f)
return 1`)

var brokenClaim = redis.NewScript(`
redis.call('HSET', KEYS[1], 'fence', ARGV[1])
return {1, redis.call('HGET', KEYS[1], 'value')}`)

func (b brokenStore) Set(ctx context.Context, key, value string, fence uint64) error {
	if b.skip != "set" {
		return b.Store.Set(ctx, key, value, fence)
	}
	return brokenSet.Run(ctx, b.c, []string{b.Key(key)}, fence, value).Err()
}

func (b brokenStore) Claim(ctx context.Context, key string, fence uint64) (string, bool, error) {
	if b.skip != "claim" {
		return b.Store.Claim(ctx, key, fence)
	}
	res, err := brokenClaim.Run(ctx, b.c, []string{b.Key(key)}, fence).Slice()
	if err != nil {
		return "", false, err
	}
	if len(res) < 2 {
		return "", false, nil
	}
	v, ok := res[1].(string)
	return v, ok, nil
}

// linSetup starts a Redis and a workload of n Lockers on it, their Stores
// made by store (nil: fenced.Store) on clients that do not retry, through
// proxy's address when given.
func linSetup(t *testing.T, n int, store func(c *redis.Client) register, via func(addr string) string) (linWorkload, *redis.Client) {
	s := dlocktest.Start(t)
	addr := s.Addr()
	if via != nil {
		addr = via(addr)
	}
	if store == nil {
		store = func(c *redis.Client) register { return fenced.New(c) }
	}
	w := linWorkload{resources: 3, ttl: 300 * time.Millisecond}
	for range n + 1 {
		c := noRetries(t, addr)
		w.registers = append(w.registers, store(c))
	}
	for range n {
		c := s.Client()
		t.Cleanup(func() { c.Close() })
		w.lockers = append(w.lockers, newLocker(t, c))
	}
	admin := s.Client()
	t.Cleanup(func() { admin.Close() })
	return w, admin
}

// TestLinearizableSelfTest: the checker passes the histories of fenced.Store
// under contention, and catches the broken variants before a pass is
// trusted: a Set that skips the fence check, a Claim that does not compare,
// and fenced's own (correct) acceptance of an equal fence held against a
// model that refuses one.
func TestLinearizableSelfTest(t *testing.T) {
	t.Parallel()
	const d = 2 * time.Second
	w, _ := linSetup(t, 4, nil, nil)
	h := w.run(t, d)
	t.Log(h.counts())
	if res := h.check(t, registerModel(false)); res != porcupine.Ok {
		t.Errorf("fenced.Store: %s, want a linearizable history", res)
	}
	if res := h.check(t, registerModel(true)); res != porcupine.Illegal {
		t.Errorf("fenced.Store against a model that refuses an equal fence: %s, want a violation", res)
	}
	for _, skip := range []string{"set", "claim"} {
		t.Run("broken "+skip, func(t *testing.T) {
			t.Parallel()
			w, _ := linSetup(t, 4, func(c *redis.Client) register { return brokenStore{fenced.New(c), c, skip} }, nil)
			h := w.run(t, d/2)
			t.Log(h.counts())
			if res := h.check(t, registerModel(false)); res != porcupine.Illegal {
				t.Errorf("a store whose %s skips the fence check: %s, want a violation", skip, res)
			}
		})
	}
}

// TestLinearizableFaults: the reliability suite's run of the checker
// (DLOCK_RELIABILITY=1; DLOCK_LIN_DURATION, default 1m): the Stores reach
// Redis through a proxy that adds latency, latency spikes past the TTL and
// connection resets, and holders freeze past their TTL before they write.
func TestLinearizableFaults(t *testing.T) {
	if os.Getenv("DLOCK_RELIABILITY") != "1" {
		t.Skip("the reliability suite's run: DLOCK_RELIABILITY=1 (make reliability)")
	}
	d := time.Minute
	if v := os.Getenv("DLOCK_LIN_DURATION"); v != "" {
		var err error
		if d, err = time.ParseDuration(v); err != nil {
			t.Fatal(err)
		}
	}
	var proxy *dlocktest.Proxy
	w, _ := linSetup(t, 5, nil, func(addr string) string {
		p, err := dlocktest.NewProxy(addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		proxy = p
		return p.Addr()
	})
	w.pause = 2 * w.ttl
	stop := make(chan struct{})
	var faults sync.WaitGroup
	counts := map[string]int{}
	faults.Add(1)
	go func() {
		defer faults.Done()
		for {
			select {
			case <-stop:
				proxy.SetLatency(0)
				return
			case <-time.After(time.Duration(100+rand.IntN(400)) * time.Millisecond):
			}
			switch rand.IntN(4) {
			case 0:
				proxy.SetLatency(time.Duration(rand.IntN(20)) * time.Millisecond)
				counts["latency"]++
			case 1:
				proxy.SetLatency(w.ttl + 100*time.Millisecond)
				counts["spike over the TTL"]++
			case 2:
				proxy.Reset()
				counts["reset"]++
			default:
				proxy.SetLatency(0)
			}
		}
	}()
	h := w.run(t, d)
	close(stop)
	faults.Wait()
	t.Logf("%s; faults %v", h.counts(), counts)
	if res := h.check(t, registerModel(false)); res != porcupine.Ok {
		t.Errorf("fenced.Store under faults: %s, want a linearizable history", res)
	}
}
