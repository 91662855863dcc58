package dlock_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/fenced"
	"github.com/dlock-dev/dlock/internal/history"
)

// Clock faults on the server: a redis-server under libfaketime (Debian's
// libfaketime package), whose clock the test steps while it runs, through
// the file libfaketime reads at every clock call. Redis expires keys by its
// own clock, and scripts read it with TIME (the fence's floor).
//
// libfaketime cannot start under jemalloc (which Debian's redis-server
// uses: wolfcw/libfaketime#130), so glibc's libc_malloc_debug is preloaded
// first: the server's malloc is then glibc's.

// fakeClock is the clock offset of a redis-server run under libfaketime.
type fakeClock struct{ file string }

// startFakeClock starts a redis-server whose clock the returned fakeClock
// steps; it skips the test where libfaketime is not installed, unless
// DLOCK_RELIABILITY=1 (the reliability suite must run it).
func startFakeClock(t *testing.T) (*dlocktest.Server, *fakeClock) {
	t.Helper()
	preload, err := history.FakeClockLibs()
	if err != nil {
		if os.Getenv("DLOCK_RELIABILITY") == "1" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	clk := &fakeClock{file: filepath.Join(t.TempDir(), "faketime")}
	if err := os.WriteFile(clk.file, []byte("+0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := dlocktest.Start(t, dlocktest.WithEnv("LD_PRELOAD="+preload, "FAKETIME_TIMESTAMP_FILE="+clk.file,
		"FAKETIME_NO_CACHE=1", "FAKETIME_DONT_FAKE_MONOTONIC=1"))
	return s, clk
}

// step sets the server's clock to the real one plus offset (whole seconds),
// and checks with TIME that the server's clock moved there.
func (f *fakeClock) step(t *testing.T, c *redis.Client, offset time.Duration) {
	t.Helper()
	if err := os.WriteFile(f.file, []byte(fmt.Sprintf("%+d\n", int64(offset/time.Second))), 0o600); err != nil {
		t.Fatal(err)
	}
	now, err := c.Time(ctx(t)).Result()
	if err != nil {
		t.Fatal(err)
	}
	if d := now.Sub(time.Now()) - offset; d < -2*time.Second || d > 2*time.Second {
		t.Fatalf("the server's clock is %s off the real one, want %s: libfaketime does not apply", now.Sub(time.Now()), offset)
	}
}

// TestClockForwardJump: the server's clock jumps forward by more than the
// TTL while a lock is held. Redis expires the key early (by its own clock),
// so another Locker takes the lock while the first holder still believes
// in its validity: the clock limit of DESIGN §6, measured. What holds: the
// first holder's Lost closes by its own validity (monotonic clock; at its
// next renewal when it renews), the second holder's fence is larger, and
// fenced.Store refuses the first holder's writes from then on. On a Redlock
// of 3 with one node's clock jumped, no second holder gets in.
func TestClockForwardJump(t *testing.T) {
	t.Parallel()
	const ttl = 2 * time.Second
	for _, renew := range []bool{false, true} {
		t.Run(fmt.Sprintf("renew=%v", renew), func(t *testing.T) {
			t.Parallel()
			s, clk := startFakeClock(t)
			c := s.Client()
			defer c.Close()
			store := fenced.New(c)
			a, b := newLocker(t, c), newLocker(t, c)
			ka, err := a.TryAcquire(ctx(t), "jump", dlock.WithTTL(ttl), dlock.WithAutoRenew(renew))
			if err != nil {
				t.Fatal(err)
			}
			if err := store.Set(ctx(t), "res", "a1", ka.Fence()); err != nil {
				t.Fatal(err)
			}
			clk.step(t, c, time.Minute)
			kb, err := b.TryAcquire(ctx(t), "jump", dlock.WithTTL(ttl))
			if err != nil {
				t.Fatalf("a second Locker after a forward jump of 1m (TTL %s): %v; the key should have expired early", ttl, err)
			}
			defer kb.Release(ctx(t))
			until := ka.ValidUntil() // the first holder's validity, as it knows it
			select {
			case <-ka.Lost():
				t.Logf("the first holder had been told (Lost) before the second entered")
			default:
				t.Logf("two holders: the second entered %s before the first holder's validity ends (the clock limit)",
					time.Until(until).Round(time.Millisecond))
			}
			if kb.Fence() <= ka.Fence() {
				t.Errorf("second holder's fence %d, not above the first's %d", kb.Fence(), ka.Fence())
			}
			t.Logf("fences %d then %d (+%s of the server's clock)", ka.Fence(), kb.Fence(), time.Duration(kb.Fence()-ka.Fence())*time.Microsecond)
			if err := store.Set(ctx(t), "res", "b1", kb.Fence()); err != nil {
				t.Fatal(err)
			}
			if err := store.Set(ctx(t), "res", "a2", ka.Fence()); !errors.Is(err, fenced.ErrStale) {
				t.Errorf("the first holder's write after the second's: %v, want ErrStale", err)
			}
			if _, _, err := store.Claim(ctx(t), "res", ka.Fence()); !errors.Is(err, fenced.ErrStale) {
				t.Errorf("the first holder's claim: %v, want ErrStale", err)
			}
			select {
			case <-ka.Lost():
				early := time.Until(until)
				t.Logf("the first holder's Lost closed %s before its validity's end", early.Round(time.Millisecond))
				if early < -250*time.Millisecond { // slack for a loaded machine's scheduling
					t.Errorf("Lost closed %s after the validity ended", -early)
				}
			case <-time.After(time.Until(until) + 2*time.Second):
				t.Fatal("the first holder's Lost did not close by its validity")
			}
			if err := ka.Release(ctx(t)); !errors.Is(err, dlock.ErrNotHeld) {
				t.Errorf("the first holder's Release: %v, want ErrNotHeld", err)
			}
			if v, _, _ := store.Get(ctx(t), "res"); v != "b1" {
				t.Errorf("the resource holds %q, want the second holder's b1", v)
			}
		})
	}
	t.Run("Redlock", func(t *testing.T) {
		t.Parallel()
		s0, clk := startFakeClock(t)
		servers := append([]*dlocktest.Server{s0}, dlocktest.StartN(t, 2)...)
		a, err := dlock.NewRedlock(dlocktest.Clients(t, servers...))
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		b, err := dlock.NewRedlock(dlocktest.Clients(t, servers...))
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		ka, err := a.TryAcquire(ctx(t), "jump", dlock.WithTTL(ttl))
		if err != nil {
			t.Fatal(err)
		}
		c0 := s0.Client()
		defer c0.Close()
		// The round decided on two nodes: the third may write a moment later.
		waitFor(t, func() bool { return c0.Exists(ctx(t), "dlock:{jump}").Val() == 1 }, "the lock on the node to jump")
		// A key of the test's, that the jump must expire as it does the
		// lock's: the lock's own may be taken back by then.
		if err := c0.Set(ctx(t), "probe", "1", 10*time.Second).Err(); err != nil {
			t.Fatal(err)
		}
		clk.step(t, c0, time.Minute)
		if n := c0.Exists(ctx(t), "probe").Val(); n != 0 {
			t.Fatal("the jump did not expire a key of 10s")
		}
		// The lock's key expired there too; a renewal that ran since may
		// have taken it back for the holder (a regain: the node answered
		// that it was free), with a TTL of the new clock.
		if v, err := c0.Get(ctx(t), "dlock:{jump}").Result(); err == nil && v != ka.Token() {
			t.Fatalf("the jumped node has the key for %q, not the holder's %q (PTTL %v)", v, ka.Token(), c0.PTTL(ctx(t), "dlock:{jump}").Val())
		} else if err == nil {
			t.Logf("the holder's renewal took the key back on the jumped node")
		}
		if _, err := b.TryAcquire(ctx(t), "jump", dlock.WithTTL(ttl)); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatalf("a second Locker with one node of 3 jumped: %v, want ErrNotAcquired", err)
		}
		select { // renewed through two TTLs on the two others
		case <-ka.Lost():
			t.Fatal("the holder lost the lock with one node of 3 jumped")
		case <-time.After(2 * ttl):
		}
		if err := ka.Release(ctx(t)); err != nil {
			t.Fatal(err)
		}
	})
}

// TestClockBackwardJump: the server's clock steps back an hour (far more
// than the fence's floor, a second) while locks are acquired: fences never
// repeat or decrease, on one Redis and on a Redlock of 3 whose one node's
// clock steps back (and then forward 2h), since the counter, while it
// exists, is the floor. The limit, measured: a counter gone (unused past
// its retention) before the clock steps back lets the next fence start
// from the earlier clock, below the fences issued before.
func TestClockBackwardJump(t *testing.T) {
	t.Parallel()
	const n = 30
	check := func(t *testing.T, l *dlock.Locker, at map[int]func()) {
		var last uint64
		for i := range n {
			if f := at[i]; f != nil {
				f()
			}
			k, err := l.TryAcquire(ctx(t), "back", dlock.WithTTL(time.Second))
			if err != nil {
				t.Fatalf("acquisition %d: %v", i, err)
			}
			if k.Fence() <= last {
				t.Errorf("acquisition %d: fence %d after %d", i, k.Fence(), last)
			}
			last = k.Fence()
			if err := k.Release(ctx(t)); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Run("one Redis", func(t *testing.T) {
		t.Parallel()
		s, clk := startFakeClock(t)
		c := s.Client()
		defer c.Close()
		check(t, newLocker(t, c), map[int]func(){
			n / 3:     func() { clk.step(t, c, -time.Hour) },
			2 * n / 3: func() { clk.step(t, c, 0) },
		})
	})
	t.Run("Redlock", func(t *testing.T) {
		t.Parallel()
		s0, clk := startFakeClock(t)
		servers := append([]*dlocktest.Server{s0}, dlocktest.StartN(t, 2)...)
		l, err := dlock.NewRedlock(dlocktest.Clients(t, servers...))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		c0 := s0.Client()
		defer c0.Close()
		check(t, l, map[int]func(){
			n / 3:     func() { clk.step(t, c0, -time.Hour) },
			2 * n / 3: func() { clk.step(t, c0, time.Hour) },
		})
	})
	t.Run("a step back lengthens a key's life", func(t *testing.T) {
		t.Parallel()
		s, clk := startFakeClock(t)
		c := s.Client()
		defer c.Close()
		k, err := newLocker(t, c).TryAcquire(ctx(t), "longer", dlock.WithTTL(2*time.Second), dlock.WithAutoRenew(false))
		if err != nil {
			t.Fatal(err)
		}
		defer k.Release(ctx(t))
		clk.step(t, c, -time.Minute)
		pttl := c.PTTL(ctx(t), "dlock:{longer}").Val()
		t.Logf("a lock of TTL 2s has %s left after the clock stepped back a minute", pttl)
		if pttl < 50*time.Second {
			t.Errorf("PTTL %s after a step back of a minute, want the TTL plus the step", pttl)
		}
	})
	t.Run("counter gone first (the limit)", func(t *testing.T) {
		t.Parallel()
		s, clk := startFakeClock(t)
		c := s.Client()
		defer c.Close()
		l := newLocker(t, c, dlock.WithFenceRetention(100*time.Millisecond))
		k, err := l.TryAcquire(ctx(t), "back", dlock.WithTTL(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		before := k.Fence()
		k.Release(ctx(t))
		waitFor(t, func() bool { return c.Exists(ctx(t), "dlock:{back}:fence").Val() == 0 }, "the counter's retention to end")
		clk.step(t, c, -time.Hour)
		k, err = l.TryAcquire(ctx(t), "back", dlock.WithTTL(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer k.Release(ctx(t))
		t.Logf("fence %d, then %d after the counter expired and the clock stepped back 1h (%s lower)",
			before, k.Fence(), time.Duration(before-min(before, k.Fence()))*time.Microsecond)
		if k.Fence() >= before {
			t.Errorf("fence %d after the counter expired and the clock stepped back, not below %d: the documented limit changed (docs/safety.md)", k.Fence(), before)
		}
	})
}
