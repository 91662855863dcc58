package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
)

// The lock's observable state checked with porcupine, where the model is
// exact: one Redis, TryAcquire (no waiting), a TTL far longer than the run
// (renewed: no key expires), and no faults. Then a key is free or held by
// one holder, named by its metadata, and its fence counter is the last
// fence issued: TryAcquire succeeds iff the key is free, with a fence
// larger than every earlier one; Release succeeds for the holder; Status
// reports exactly the holder (Held, Metadata) and the last fence.

type lockInput struct {
	op    string // "acquire", "release", "status"
	key   string
	owner string // acquire's and release's metadata
}

type lockOutput struct {
	ok    bool // acquired, released; Status: held
	owner string
	fence uint64
}

type lockState struct {
	owner string // "" when free
	fence uint64 // the last fence issued
}

func lockModel() porcupine.Model {
	return porcupine.Model{
		Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
			by := map[string][]porcupine.Operation{}
			for _, op := range h {
				k := op.Input.(lockInput).key
				by[k] = append(by[k], op)
			}
			var parts [][]porcupine.Operation
			for _, p := range by {
				parts = append(parts, p)
			}
			return parts
		},
		Init: func() any { return lockState{} },
		Step: func(state, input, output any) (bool, any) {
			s, in, out := state.(lockState), input.(lockInput), output.(lockOutput)
			switch in.op {
			case "acquire":
				if s.owner != "" {
					return !out.ok, s
				}
				return out.ok && out.fence > s.fence, lockState{owner: in.owner, fence: out.fence}
			case "release":
				if s.owner != in.owner {
					return !out.ok, s
				}
				return out.ok, lockState{fence: s.fence}
			default:
				return out.ok == (s.owner != "") && out.owner == s.owner && out.fence == s.fence, s
			}
		},
		DescribeOperation: func(input, output any) string { return fmt.Sprintf("%+v -> %+v", input, output) },
	}
}

// lockHistory runs workers TryAcquire/Release/Status loops on keys for d and
// records them.
func lockHistory(t *testing.T, lockers []*dlock.Locker, keys int, d time.Duration) []porcupine.Operation {
	start := time.Now()
	now := func() int64 { return int64(time.Since(start)) }
	var mu sync.Mutex
	var ops []porcupine.Operation
	record := func(client int, call int64, in lockInput, out lockOutput) {
		ret := now()
		mu.Lock()
		ops = append(ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
		mu.Unlock()
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var wg sync.WaitGroup
	for id, l := range lockers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := 0; ctx.Err() == nil; seq++ {
				key := fmt.Sprintf("linlock%d", rand.IntN(keys))
				owner := fmt.Sprintf("w%d-%d", id, seq)
				call := now()
				k, err := l.TryAcquire(context.Background(), key, dlock.WithTTL(time.Minute), dlock.WithMetadata(owner))
				switch {
				case err == nil:
					record(id, call, lockInput{"acquire", key, owner}, lockOutput{ok: true, fence: k.Fence()})
				case errors.Is(err, dlock.ErrNotAcquired):
					record(id, call, lockInput{"acquire", key, owner}, lockOutput{})
				default:
					t.Errorf("TryAcquire: %v", err)
					return
				}
				call = now()
				st, err := l.Status(context.Background(), key)
				if err != nil {
					t.Errorf("Status: %v", err)
					return
				}
				record(id, call, lockInput{op: "status", key: key}, lockOutput{ok: st.Held, owner: st.Metadata, fence: st.Fence})
				if k != nil {
					call = now()
					err := k.Release(context.Background())
					record(id, call, lockInput{"release", key, owner}, lockOutput{ok: err == nil})
				}
			}
		}()
	}
	wg.Wait()
	return ops
}

// TestLinearizableLock: the lock's observable state, checked with
// porcupine; and the self-test: the same history with one fence made equal
// to the one before, or one refusal turned into a second holder's grant, is
// a violation.
func TestLinearizableLock(t *testing.T) {
	t.Parallel()
	s := dlocktest.Start(t)
	var lockers []*dlock.Locker
	for range 4 {
		c := s.Client()
		t.Cleanup(func() { c.Close() })
		lockers = append(lockers, newLocker(t, c))
	}
	ops := lockHistory(t, lockers, 2, 2*time.Second)
	var acquired, refused int
	for _, op := range ops {
		if op.Input.(lockInput).op == "acquire" {
			if op.Output.(lockOutput).ok {
				acquired++
			} else {
				refused++
			}
		}
	}
	t.Logf("%d calls: %d acquisitions, %d refusals", len(ops), acquired, refused)
	if res := porcupine.CheckOperationsTimeout(lockModel(), ops, time.Minute); res != porcupine.Ok {
		t.Fatalf("the lock's history: %s, want linearizable", res)
	}
	// Broken variants of the history, each must be caught.
	byCall := func(i int) (lockInput, lockOutput) { return ops[i].Input.(lockInput), ops[i].Output.(lockOutput) }
	mutate := func(name string, change func() bool) {
		broken := make([]porcupine.Operation, len(ops))
		copy(broken, ops)
		saved := ops
		ops = broken
		defer func() { ops = saved }()
		if !change() {
			t.Fatalf("%s: no operation to change", name)
		}
		if res := porcupine.CheckOperationsTimeout(lockModel(), ops, time.Minute); res != porcupine.Illegal {
			t.Errorf("%s: %s, want a violation", name, res)
		}
	}
	mutate("a fence repeated", func() bool {
		last := map[string]uint64{}
		for i := range ops {
			in, out := byCall(i)
			if in.op == "acquire" && out.ok {
				if f, ok := last[in.key]; ok {
					out.fence = f
					ops[i].Output = out
					return true
				}
				last[in.key] = out.fence
			}
		}
		return false
	})
	mutate("two holders", func() bool {
		for i := range ops {
			if in, out := byCall(i); in.op == "acquire" && !out.ok {
				ops[i].Output = lockOutput{ok: true, fence: 1 << 62}
				return true
			}
		}
		return false
	})
}
