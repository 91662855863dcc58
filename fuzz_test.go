package dlock

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/internal/keys"
)

// FuzzNames: for every key and prefix a user can pass, a lock's keys share
// one Cluster slot, and two different keys never share a lock name.
func FuzzNames(f *testing.F) {
	for _, k := range []string{"job", "}x", "}", "}}", "\x00", "\x00}x", "{", "{}", "a}b", "{a}", "x{y}z", "payout:42"} {
		f.Add(k, "k2", "dlock:")
	}
	f.Add("a", "\x00a", "")
	f.Add("}a", "\x00}a", "p:")
	f.Fuzz(func(t *testing.T, key, other, prefix string) {
		l := &Locker{}
		WithPrefix(prefix)(&l.cfg)
		if l.cfg.err != nil {
			if !errors.Is(l.cfg.err, ErrInvalid) || !strings.ContainsAny(prefix, "{}") {
				t.Fatalf("prefix %q refused: %v", prefix, l.cfg.err)
			}
			return
		}
		if key == "" || other == "" {
			return
		}
		n := keys.Make(l.cfg.prefix, key)
		slot := keys.Slot(n.Lock())
		var ks []string
		for _, k := range append(append(append(n.AcquireKeys(), n.ReleaseKeys()...), n.ExtendKeys()...), n.RaiseKeys()...) {
			ks = append(ks, k.(string))
		}
		for _, k := range ks {
			if keys.Slot(k) != slot {
				t.Fatalf("key %q prefix %q: %q is in slot %d, the lock %q in %d", key, prefix, k, keys.Slot(k), n.Lock(), slot)
			}
		}
		o := keys.Make(l.cfg.prefix, other)
		if key != other {
			for _, a := range n.Keys {
				for _, b := range o.Keys {
					if a == b {
						t.Fatalf("keys %q and %q share the Redis key %q", key, other, a)
					}
				}
			}
		}
	})
}

// FuzzOptions: option values never panic, and a refused one wraps ErrInvalid.
func FuzzOptions(f *testing.F) {
	f.Add(int64(30*time.Second), int64(time.Second), int64(24*time.Hour), "meta")
	f.Add(int64(0), int64(-1), int64(0), strings.Repeat("x", 1025))
	f.Add(int64(5*time.Millisecond), int64(1), int64(1), "")
	f.Fuzz(func(t *testing.T, ttl, nodeTimeout, retention int64, meta string) {
		var lc lockConfig
		for _, o := range []LockOption{WithTTL(time.Duration(ttl)), WithMetadata(meta), WithAutoRenew(ttl%2 == 0)} {
			o(&lc)
			if lc.err != nil && !errors.Is(lc.err, ErrInvalid) {
				t.Fatalf("lock option error %v does not wrap ErrInvalid", lc.err)
			}
		}
		if lc.err == nil && (lc.ttl < MinTTL || len(lc.metadata) > MaxMetadata) {
			t.Fatalf("accepted ttl %s, metadata of %d bytes", lc.ttl, len(lc.metadata))
		}
		var c lockerConfig
		for _, o := range []Option{WithNodeTimeout(time.Duration(nodeTimeout)), WithFenceRetention(time.Duration(retention))} {
			o(&c)
			if c.err != nil && !errors.Is(c.err, ErrInvalid) {
				t.Fatalf("locker option error %v does not wrap ErrInvalid", c.err)
			}
		}
		if err := checkTTL(time.Duration(ttl)); err == nil && drift(time.Duration(ttl)) >= time.Duration(ttl) {
			t.Fatalf("ttl %s leaves no validity", time.Duration(ttl))
		}
	})
}
