package dlock

import (
	"context"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/internal/quorum"
)

// TestLimitChangeBound checks the counting argument behind SetLimit's
// promise on a Redlock of up to six masters: while a change between limits
// lo < hi is under way, a permit counted against lo holds quorum.For(N, lo)
// nodes, each of which granted it with fewer than lo permits live (so at
// most lo such holders at once), one counted against hi holds
// quorum.For(N, hi), and no node holds more than hi permits. Then hi+1
// holders would need more permits than the nodes can hold, for every
// number b ≤ lo of holders counted against lo.
func TestLimitChangeBound(t *testing.T) {
	for n := 1; n <= 6; n++ {
		for lo := 2; lo <= 200; lo++ {
			for hi := lo + 1; hi <= 200; hi++ {
				qlo, qhi := quorum.For(n, lo), quorum.For(n, hi)
				for b := 0; b <= lo; b++ {
					if (hi+1-b)*qhi+b*qlo <= n*hi {
						t.Fatalf("%d masters, limits %d and %d: %d holders fit, %d of them counted against %d", n, lo, hi, hi+1, b, lo)
					}
				}
			}
		}
	}
}

// TestLimitChangeBound3 checks the same argument with three limits in play
// (a change begun while an earlier one has not reached every node: see
// SetLimit), lo < mid < hi, on up to four masters, where SetLimit promises
// it: b1 ≤ lo holders counted against lo and b2 ≤ mid against mid, the
// others against hi, never hi+1 of them. On five masters it fails (limits
// 2, 3 and 4: two holders counted against 2 and three against 3 fit in
// four nodes each), which the doc says.
func TestLimitChangeBound3(t *testing.T) {
	fits := func(n, lo, mid, hi int) bool {
		qlo, qmid, qhi := quorum.For(n, lo), quorum.For(n, mid), quorum.For(n, hi)
		for b1 := 0; b1 <= lo; b1++ {
			for b2 := 0; b2 <= mid && b1+b2 <= hi+1; b2++ {
				if (hi+1-b1-b2)*qhi+b1*qlo+b2*qmid <= n*hi {
					return true
				}
			}
		}
		return false
	}
	for n := 1; n <= 4; n++ {
		for lo := 2; lo <= 60; lo++ {
			for mid := lo + 1; mid <= 60; mid++ {
				for hi := mid + 1; hi <= 60; hi++ {
					if fits(n, lo, mid, hi) {
						t.Fatalf("%d masters, limits %d, %d and %d: %d holders fit", n, lo, mid, hi, hi+1)
					}
				}
			}
		}
	}
	if !fits(5, 2, 3, 4) {
		t.Error("five masters, limits 2, 3 and 4: the counting argument holds after all; say so in SetLimit's doc")
	}
}

// sentCounter counts the commands a client sends.
type sentCounter struct{ n atomic.Int64 }

func (s *sentCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (s *sentCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() != "info" && cmd.Name() != "config" {
			s.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (s *sentCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		s.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// TestChangeCosts: what the docs say Proclaim and SetLimit cost on one
// Redis: Proclaim one script and one PUBLISH, SetLimit two scripts (one
// reads the limit, one changes it; their commands inside the scripts
// reported), and neither leaves anything that runs afterwards (the idle cost: no command while the locks are held
// between renewals).
func TestChangeCosts(t *testing.T) {
	s := dlocktest.Start(t)
	c := s.Client()
	defer c.Close()
	var sent sentCounter
	c.AddHook(&sent)
	l := New(c)
	defer l.Close()
	ctx := context.Background()
	k, err := l.Campaign(ctx, "e", "v1", WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer k.Release(ctx)
	p1, _ := l.TryAcquire(ctx, "sem", WithLimit(2), WithTTL(30*time.Second))
	p2, _ := l.TryAcquire(ctx, "sem", WithLimit(2), WithTTL(30*time.Second))
	defer p1.Release(ctx)
	defer p2.Release(ctx)
	measure := func(what string, want int64, fn func() error) {
		t.Helper()
		if err := c.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		before := sent.n.Load()
		if err := fn(); err != nil {
			t.Fatal(err)
		}
		got := sent.n.Load() - before
		t.Logf("%s: %d commands sent, %d run in Redis", what, got, commandsRun(t, c))
		if got != want {
			t.Errorf("%s sent %d commands, want %d", what, got, want)
		}
	}
	// The first call of each script loads it (NOSCRIPT, then EVAL).
	measure("Proclaim, the first", 3, func() error { return k.Proclaim(ctx, "v2") })
	measure("Proclaim", 2, func() error { return k.Proclaim(ctx, "v3") })
	measure("SetLimit, the first", 4, func() error { return l.SetLimit(ctx, "sem", 3) })
	measure("SetLimit", 2, func() error { return l.SetLimit(ctx, "sem", 4) })
	measure("idle for 300ms after them", 0, func() error { time.Sleep(300 * time.Millisecond); return nil })
}

// TestCatchUp: what a node that missed a change of the limit is brought
// to, and which nodes are sent it: the last change recorded, when a
// majority of the nodes take its limit (hold it, or no permit), to the
// nodes that recorded an earlier one or none; with no change recorded, the
// limit that a majority hold, to those that hold another; else nothing.
func TestCatchUp(t *testing.T) {
	ch := func(old, new string, op uint64) limitChange {
		return limitChange{old: old, new: new, op: op, token: "aa"}
	}
	held := func(limit string, c limitChange) limitState {
		return limitState{ok: true, code: 1, limit: limit, change: c, now: 100}
	}
	free := func(c limitChange) limitState { return limitState{ok: true, change: c, now: 100} }
	none := limitChange{}
	for _, tc := range []struct {
		name   string
		states []limitState
		want   string // the limit sent
		send   []bool
	}{
		{"missed the change", []limitState{held("3", ch("2", "3", 7)), held("3", ch("2", "3", 7)), held("2", none)}, "3", []bool{false, false, true}},
		{"missed two", []limitState{held("4", ch("5", "4", 9)), held("4", ch("5", "4", 9)), held("3", ch("2", "3", 7))}, "4", []bool{false, false, true}},
		{"free nodes take it", []limitState{held("3", ch("2", "3", 7)), free(ch("2", "3", 7)), held("2", none), free(none)}, "3", []bool{false, false, true, true}},
		{"a change on a minority", []limitState{held("3", ch("2", "3", 7)), held("2", none), held("2", none)}, "", nil},
		{"not answering", []limitState{held("3", ch("2", "3", 7)), {}, held("2", none)}, "", nil},
		{"no change recorded", []limitState{held("3", none), held("3", none), held("2", none)}, "3", []bool{false, false, true}},
		{"no majority", []limitState{held("3", none), held("4", none), held("2", none)}, "", nil},
		{"they agree", []limitState{held("3", ch("2", "3", 7)), held("3", ch("2", "3", 7)), free(ch("2", "3", 7))}, "", nil},
	} {
		c, readAt, send := catchUp(tc.states, len(tc.states)/2+1)
		if !reflect.DeepEqual(send, tc.send) || (send != nil && (c.new != tc.want || readAt != 100)) {
			t.Errorf("%s: sent %q to %v (read at %d), want %q to %v", tc.name, c.new, send, readAt, tc.want, tc.send)
		}
	}
	// A change of its own comes after the last one recorded and the clocks.
	c, _ := nextChange([]limitState{held("3", ch("2", "3", 700)), held("2", none), {}}, "4")
	if c.old != "3" || c.new != "4" || c.op != 701 {
		t.Errorf("the next change: %+v", c)
	}
	// SetLimit called again after it failed: from the same old limit.
	c, _ = nextChange([]limitState{held("3", ch("2", "3", 7)), held("2", none), held("2", none)}, "3")
	if c.old != "2" || c.op != 100 {
		t.Errorf("the change called again: %+v", c)
	}
}
