package keys

import (
	"fmt"
	"testing"
)

// TestMake: the names of a lock share its hash tag; a key that begins
// with '}' or the escape gets the escape; the cache gives back the same
// names for a key used again. (FuzzNames, in the root package, checks the
// slots of every name under every prefix a user can pass.)
func TestMake(t *testing.T) {
	for key, lock := range map[string]string{"job": "dlock:{job}", "}x": "dlock:{\x00}x}", "\x00": "dlock:{\x00\x00}"} {
		n := Make("dlock:", key)
		want := []string{lock + ":waiters", lock, lock + ":fence", lock + ":dead", lock + ":meta", lock + ":limit", lock + ":wexp", lock + ":writers", lock + ":oldlimit"}
		for i, w := range want {
			if n.Keys[i] != any(w) {
				t.Errorf("Make(%q).Keys[%d] = %q, want %q", key, i, n.Keys[i], w)
			}
		}
		if n.Lock() != lock || n.Fence() != lock+":fence" || n.Dead() != lock+":dead" || n.Waiters() != lock+":waiters" ||
			n.Leases() != lock+":wexp" || n.Meta() != lock+":meta" || n.Limit() != lock+":limit" || n.Writers() != lock+":writers" || n.Key != key ||
			n.OldLimit() != lock+":oldlimit" || n.Terms() != lock+":terms" {
			t.Errorf("Make(%q) = %+v, want the lock %q", key, n, lock)
		}
		if len(n.ExtendKeys()) != 5 || len(n.ExtendKeysShort()) != 2 || len(n.RaiseKeys()) != 4 || len(n.AcquireKeys()) != 9 || len(n.ReleaseKeys()) != 8 ||
			len(n.SetLimitKeys()) != 9 || len(n.ProclaimKeys()) != 2 || len(n.ElectedKeys()) != 2 ||
			len(n.LockKeys()) != 3 || len(n.UnlockKeys()) != 2 {
			t.Errorf("Make(%q): the scripts' KEYS have the wrong lengths", key)
		}
	}
	c := NewCache("app:")
	if a, b := c.Get("k"), c.Get("k"); a != b || a.Lock() != "app:{k}" {
		t.Errorf("Cache.Get: %p %p %q", a, b, a.Lock())
	}
}

// TestSlotTags: the tag of every slot hashes to it.
func TestSlotTags(t *testing.T) {
	for s := range Slots {
		tag := SlotTag(s)
		if len(tag) != 3 || Slot("x{"+tag+"}y") != s {
			t.Fatalf("slot %d: tag %q is in slot %d", s, tag, Slot("x{"+tag+"}y"))
		}
	}
}

// TestCacheKeepsHotKeys: the names of a few dozen keys used in turn (a
// service's hot locks) are made once, not again at every use.
func TestCacheKeepsHotKeys(t *testing.T) {
	c := NewCache("app:")
	first := make(map[string]*Names)
	for i := range 64 {
		k := fmt.Sprint("job:", i)
		first[k] = c.Get(k)
	}
	kept := 0
	for k, n := range first {
		if c.Get(k) == n {
			kept++
		}
	}
	if kept < 56 {
		t.Errorf("%d of 64 keys' names kept, want at least 56", kept)
	}
}
