package dlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
)

// redlockProxied starts three masters, the third behind a fault proxy, and
// returns a maker of Lockers on them (each closed, with its clients, when
// the test ends) and the proxy.
func redlockProxied(t *testing.T) (func() *dlock.Locker, *dlocktest.Proxy) {
	t.Helper()
	servers := dlocktest.StartN(t, 3)
	proxy, err := dlocktest.NewProxy(servers[2].Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	return redlockOn(t, servers[0].Addr(), servers[1].Addr(), proxy.Addr()), proxy
}

// redlockOn returns a maker of Lockers on a Redlock of the masters at
// addrs, each Locker closed, with its clients, when the test ends.
func redlockOn(t *testing.T, addrs ...string) func() *dlock.Locker {
	return func() *dlock.Locker {
		var clients []redis.UniversalClient
		for _, addr := range addrs {
			c := redis.NewClient(&redis.Options{Addr: addr})
			t.Cleanup(func() { _ = c.Close() })
			clients = append(clients, c)
		}
		l, err := dlock.NewRedlock(clients)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		return l
	}
}

// cutOff runs fn while the proxied master is cut off: what is sent to it
// meanwhile never arrives (its connections are reset before the network
// heals), as for a master that was partitioned away and whose commands
// were lost.
func cutOff(proxy *dlocktest.Proxy, fn func()) {
	proxy.BlackHole(true)
	fn()
	proxy.Reset()
	proxy.BlackHole(false)
}

// TestSetLimitMissedMaster: on a Redlock of three masters (a permit of any
// limit needs all three), SetLimit raises a held semaphore 2 → 3 while the
// third master is cut off. It says that the change did not reach what a
// permit of 3 needs (ErrUnavailable, "2 of 3"); once the master answers
// again, an acquisition with the new limit finds it behind, brings it
// along and is granted, while the old holders still hold (and renew): it
// is never refused as misconfigured; the holders never exceed 3. Within
// the grace the change recorded on the others is what the missed master
// is brought to, and an acquisition with the old limit is sent to the new
// one (refused as busy); after it, the limit that the others hold.
func TestSetLimitMissedMaster(t *testing.T) {
	for _, afterGrace := range []bool{false, true} {
		name := map[bool]string{false: "within the grace", true: "after the grace"}[afterGrace]
		t.Run(name, func(t *testing.T) {
			const grace = 2 * time.Second // more than SetLimit's first round, which waits 1s for the master cut off
			if afterGrace {
				defer dlock.SetLimitGrace(grace)()
			}
			mk, proxy := redlockProxied(t)
			holders, setter, b := mk(), mk(), mk()
			held := hold(t, holders, "sem", 2, 2)
			var err error
			cutOff(proxy, func() { err = setter.SetLimit(ctx(t), "sem", 3) })
			changed := time.Now()
			t.Logf("SetLimit with a master cut off: %v", err)
			if err == nil {
				t.Error("SetLimit returned nil, having reached 2 of the 3 masters that a permit of 3 needs")
			} else if !errors.Is(err, dlock.ErrUnavailable) || !strings.Contains(err.Error(), "2 of 3") {
				t.Errorf("SetLimit: %v, want ErrUnavailable saying it reached 2 of 3", err)
			}
			if afterGrace {
				time.Sleep(time.Until(changed.Add(grace + 200*time.Millisecond))) // the grace is a time: nothing to wait for but the clock
			}
			// The old holders renew on every master: the missed one keeps
			// limit 2.
			for _, k := range held {
				if err := k.Extend(ctx(t), 20*time.Second); err != nil {
					t.Fatalf("an old holder's renewal: %v", err)
				}
			}
			k3 := acquireNew(t, b)
			defer k3.Release(ctx(t))
			_, err = b.TryAcquire(ctx(t), "sem", dlock.WithLimit(2))
			switch {
			case !afterGrace && (!errors.Is(err, dlock.ErrNotAcquired) || errors.Is(err, dlock.ErrMisconfigured)):
				t.Errorf("the old limit within the grace, 3 held: %v, want ErrNotAcquired", err)
			case afterGrace && !errors.Is(err, dlock.ErrMisconfigured):
				t.Errorf("the old limit after the grace: %v, want ErrMisconfigured", err)
			}
			if _, err := b.TryAcquire(ctx(t), "sem", dlock.WithLimit(3)); !errors.Is(err, dlock.ErrNotAcquired) || errors.Is(err, dlock.ErrMisconfigured) {
				t.Errorf("a fourth permit of 3: %v, want ErrNotAcquired", err)
			}
			for _, k := range append(held, k3) {
				if err := k.Extend(ctx(t), 20*time.Second); err != nil {
					t.Errorf("a holder's renewal after the change: %v", err)
				}
			}
			if st, err := b.Status(ctx(t), "sem"); err != nil || st.Limit != 3 || len(st.Permits) != 3 {
				t.Errorf("after the change: limit %d, %d permits, %v", st.Limit, len(st.Permits), err)
			}
			for _, k := range held {
				_ = k.Release(ctx(t))
			}
		})
	}
}

// acquireNew takes a permit of "sem" with limit 3 on b, trying again while
// the master that was cut off is not answering yet (b's first round may
// come before it does); a refusal as misconfigured fails the test.
func acquireNew(t *testing.T, b *dlock.Locker) *dlock.Lock {
	t.Helper()
	for try := 0; ; try++ {
		k, err := b.TryAcquire(ctx(t), "sem", dlock.WithLimit(3), dlock.WithTTL(20*time.Second))
		switch {
		case err == nil:
			return k
		case errors.Is(err, dlock.ErrMisconfigured):
			t.Fatalf("the new limit, the missed master answering again (try %d): %v", try, err)
		case try == 20:
			t.Fatalf("the new limit, 20 tries: %v", err)
		}
		t.Logf("try %d: %v", try, err)
		time.Sleep(50 * time.Millisecond) // the master answers again: nothing to wait on but time
	}
}

// TestSetLimitRegainedBehind: a node that held no permit when the limit
// changed from 2 to 3 recorded the change and nothing else; a holder of 2
// that regained its permit there since stored 2 again. An acquisition of 3
// is counted against 3 there, as the change would have it, and granted
// (it was made to wait until that holder left).
func TestSetLimitRegainedBehind(t *testing.T) {
	s := dlocktest.Start(t)
	c := s.Client()
	defer c.Close()
	l := dlock.New(c)
	defer l.Close()
	now, err := c.Time(ctx(t)).Result()
	if err != nil {
		t.Fatal(err)
	}
	end := now.Add(20 * time.Second).UnixMilli()
	if err := c.ZAdd(ctx(t), "dlock:{sem}", redis.Z{Score: float64(end), Member: "regained"}).Err(); err != nil {
		t.Fatal(err)
	}
	c.PExpireAt(ctx(t), "dlock:{sem}", time.UnixMilli(end))
	c.Set(ctx(t), "dlock:{sem}:limit", "2", 20*time.Second)
	c.Set(ctx(t), "dlock:{sem}:oldlimit", "2 3 1700000000000 00ff", time.Minute)
	k, err := l.TryAcquire(ctx(t), "sem", dlock.WithLimit(3))
	if err != nil {
		t.Fatalf("a permit of 3 beside a regained permit of 2, the change 2 → 3 recorded: %v", err)
	}
	defer k.Release(ctx(t))
	if got, _ := c.Get(ctx(t), "dlock:{sem}:limit").Result(); got != "3" {
		t.Errorf("the limit stored is %q, want 3", got)
	}
	k2, err := l.TryAcquire(ctx(t), "sem", dlock.WithLimit(3))
	if err != nil {
		t.Fatalf("a third permit of 3: %v", err)
	}
	defer k2.Release(ctx(t))
	if _, err := l.TryAcquire(ctx(t), "sem", dlock.WithLimit(3)); !errors.Is(err, dlock.ErrNotAcquired) || errors.Is(err, dlock.ErrMisconfigured) {
		t.Errorf("a fourth permit of 3: %v, want ErrNotAcquired", err)
	}
}

// TestLimitBehindWhileNodeDown: a Redlock of three masters, the second and
// third behind proxies. SetLimit raises a held semaphore 2 → 3 while the
// third is cut off (it stays at 2, the first two record the change). Then
// the second goes silent: an acquisition with the new limit meets the
// third's "held with limit 2" and cannot bring it along (the second, which
// recorded the change, does not answer). The limit it asked for is the
// fleet's, so it is not told ErrMisconfigured (exit 78 in the CLI: "fix
// your configuration"), but ErrUnavailable: too few nodes answered. Once
// the second answers again, an acquisition brings the third along and is
// granted. (The explorer, rueidis, Redlock of 5, seed
// 11890724378170654028: ErrMisconfigured after SetLimit(4) returned nil,
// under faults that cut the convergence's commands.)
func TestLimitBehindWhileNodeDown(t *testing.T) {
	servers := dlocktest.StartN(t, 3)
	var proxies []*dlocktest.Proxy
	for _, s := range servers[1:] {
		p, err := dlocktest.NewProxy(s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close() })
		proxies = append(proxies, p)
	}
	mk := redlockOn(t, servers[0].Addr(), proxies[0].Addr(), proxies[1].Addr())
	holders, setter, b := mk(), mk(), mk()
	held := hold(t, holders, "sem", 2, 2)
	defer func() {
		for _, k := range held {
			_ = k.Release(ctx(t))
		}
	}()
	var err error
	cutOff(proxies[1], func() { err = setter.SetLimit(ctx(t), "sem", 3) })
	if !errors.Is(err, dlock.ErrUnavailable) {
		t.Fatalf("SetLimit with the third master cut off: %v, want ErrUnavailable", err)
	}
	proxies[0].BlackHole(true)
	_, err = b.TryAcquire(ctx(t), "sem", dlock.WithLimit(3))
	t.Logf("TryAcquire with the new limit, the second master silent: %v", err)
	if errors.Is(err, dlock.ErrMisconfigured) || !errors.Is(err, dlock.ErrUnavailable) {
		t.Errorf("TryAcquire with the fleet's limit, the second master silent: %v, want ErrUnavailable, not ErrMisconfigured", err)
	}
	actx, cancel := context.WithTimeout(ctx(t), 1500*time.Millisecond)
	_, err = b.Acquire(actx, "sem", dlock.WithLimit(3))
	cancel()
	t.Logf("Acquire with the new limit for 1.5s, the second master silent: %v", err)
	if errors.Is(err, dlock.ErrMisconfigured) || !errors.Is(err, dlock.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Acquire with the fleet's limit, the second master silent: %v, want ErrUnavailable and the deadline, not ErrMisconfigured", err)
	}
	proxies[0].Reset()
	proxies[0].BlackHole(false)
	// (Acquire: it waits for the master that did not answer to be heard
	// again.)
	k, err := b.Acquire(ctx(t), "sem", dlock.WithLimit(3))
	if err != nil {
		t.Fatalf("Acquire with the new limit, every master back: %v", err)
	}
	_ = k.Release(ctx(t))
}
