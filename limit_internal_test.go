package dlock

import (
	"context"
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
// Redis: Proclaim one script and one PUBLISH, SetLimit one script (their
// commands inside the scripts reported), and neither leaves anything that
// runs afterwards (the idle cost: no command while the locks are held
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
	measure("SetLimit, the first", 2, func() error { return l.SetLimit(ctx, "sem", 3) })
	measure("SetLimit", 1, func() error { return l.SetLimit(ctx, "sem", 4) })
	measure("idle for 300ms after them", 0, func() error { time.Sleep(300 * time.Millisecond); return nil })
}
