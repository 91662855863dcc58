package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
)

// A command may run twice, and its first copy may run after later commands
// of the same lock (DESIGN's principle 6): go-redis with its default
// options (MaxRetries 3) sends a command again when its connection fails
// behind the write, and the first copy, held up on the way, still reaches
// the server. These tests make that happen with the fault proxy (HoldBack,
// LoseReply) under a default go-redis client, and check what the doc
// comments promise: no second holder, no dead token left holding the key,
// no loss reported that did not happen.

// lateCopyClient starts a redis-server and a proxy to it, and returns a
// default go-redis client through the proxy (MaxRetries 3: it sends a
// command again after a reset), a client straight to the server, and the
// proxy.
func lateCopyClient(t *testing.T) (*redis.Client, *redis.Client, *dlocktest.Proxy) {
	t.Helper()
	s := dlocktest.Start(t)
	p, err := dlocktest.NewProxy(s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	c := redis.NewClient(&redis.Options{Addr: p.Addr()})
	direct := s.Client()
	t.Cleanup(func() { c.Close(); direct.Close() })
	return c, direct, p
}

// arg is a command argument as it goes on the wire (RESP), for the
// proxy's markers.
func arg(s string) string { return fmt.Sprintf("$%d\r\n%s\r\n", len(s), s) }

// TestLateCopyOfShorteningExtend: an Extend to 1234ms whose first copy is
// held up (the client sends it again, and it is answered), then an Extend
// to 10s; the held copy runs last. The key must still live as long as the
// holder's validity: else a second holder takes it while the first one's
// Lost is open.
func TestLateCopyOfShorteningExtend(t *testing.T) {
	for _, ttl := range []time.Duration{0, 3 * time.Second} {
		t.Run(fmt.Sprintf("TTL %v", ttl), func(t *testing.T) {
			c, direct, p := lateCopyClient(t)
			l := newLocker(t, c)
			opts := []dlock.LockOption{dlock.WithAutoRenew(false)}
			if ttl > 0 {
				opts = append(opts, dlock.WithTTL(ttl))
			}
			k, err := l.Acquire(ctx(t), "late", opts...)
			if err != nil {
				t.Fatal(err)
			}
			deliver := p.HoldBack(arg("1234"))
			if err := k.Extend(ctx(t), 1234*time.Millisecond); err != nil {
				t.Fatalf("Extend(1234ms), sent again after a reset: %v", err)
			}
			if err := k.Extend(ctx(t), 10*time.Second); err != nil {
				t.Fatal(err)
			}
			if err := deliver(ctx(t)); err != nil {
				t.Fatalf("the held copy: %v", err)
			}
			left := time.Until(k.ValidUntil())
			pttl := direct.PTTL(ctx(t), "dlock:{late}").Val()
			if pttl < left {
				t.Fatalf("the key expires in %v, the holder's validity runs %v: a late copy of Extend(1234ms) cut it short", pttl, left)
			}
			b := newLocker(t, direct)
			if k2, err := b.TryAcquire(ctx(t), "late"); err == nil {
				notTwoHolders(t, k, "after a late copy of a shorter Extend")
				k2.Release(ctx(t))
			}
			if err := k.Release(ctx(t)); err != nil {
				t.Errorf("Release: %v", err)
			}
		})
	}
}

// TestLateCopyOfAcquisition: lock.lua's first copy is held up (the client
// sends it again, and the lock is granted), the lock is released, then the
// held copy runs: it must not take the key again for a token nobody holds.
func TestLateCopyOfAcquisition(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []dlock.LockOption
		key  string
	}{
		{"lock", nil, "dlock:{late}"},
		{"metadata", []dlock.LockOption{dlock.WithMetadata("m")}, "dlock:{late}"},
		{"semaphore", []dlock.LockOption{dlock.WithLimit(2)}, "dlock:{late}"},
		{"shared", []dlock.LockOption{dlock.WithShared()}, "dlock:{late}"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, direct, p := lateCopyClient(t)
			l := newLocker(t, c)
			deliver := p.HoldBack(arg("2345"))
			k, err := l.TryAcquire(ctx(t), "late", append(tc.opts, dlock.WithTTL(2345*time.Millisecond))...)
			if err != nil {
				t.Fatalf("TryAcquire, sent again after a reset: %v", err)
			}
			if err := k.Release(ctx(t)); err != nil {
				t.Fatalf("Release: %v", err)
			}
			if err := deliver(ctx(t)); err != nil {
				t.Fatalf("the held copy: %v", err)
			}
			switch typ := direct.Type(ctx(t), tc.key).Val(); typ {
			case "none":
			case "zset":
				if n := direct.ZCard(ctx(t), tc.key).Val(); n > 0 {
					t.Fatalf("%d permits after the release and a late copy of the acquisition: the dead token holds one", n)
				}
			default:
				t.Fatalf("the key holds a %s (PTTL %v) after the release: a late copy of the acquisition took it for a dead token",
					typ, direct.PTTL(ctx(t), tc.key).Val())
			}
			k2, err := newLocker(t, direct).TryAcquire(ctx(t), "late", tc.opts...)
			if err != nil {
				t.Fatalf("the key is not free after the release: %v", err)
			}
			k2.Release(ctx(t))
		})
	}
}

// TestResentReleaseNotLost: a release whose reply was lost, sent again by
// the client, finds the key gone (its first copy deleted it): Release must
// report success, and Do no loss.
func TestResentReleaseNotLost(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []dlock.LockOption
	}{
		{"lock", nil},
		{"metadata", []dlock.LockOption{dlock.WithMetadata("m")}},
		{"semaphore", []dlock.LockOption{dlock.WithLimit(2)}},
		{"shared", []dlock.LockOption{dlock.WithShared()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _, p := lateCopyClient(t)
			l := newLocker(t, c)
			// The scripts loaded first: a lost NOSCRIPT would run nothing.
			if err := l.Do(ctx(t), "warm", func(context.Context) error { return nil }, tc.opts...); err != nil {
				t.Fatal(err)
			}
			k, err := l.TryAcquire(ctx(t), "late", tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			p.LoseReply(arg(k.Token()))
			if err := k.Release(ctx(t)); err != nil {
				t.Fatalf("Release whose first reply was lost: %v", err)
			}
			err = l.Do(ctx(t), "late2", func(context.Context) error {
				p.LoseReply(arg("dlock:{late2}")) // the release's keys (the acquisition is done)
				return nil
			}, tc.opts...)
			if errors.Is(err, dlock.ErrLockLost) || errors.Is(err, dlock.ErrNotHeld) {
				t.Fatalf("Do, whose release's first reply was lost: %v", err)
			} else if err != nil {
				t.Fatal(err)
			}
		})
	}
}
