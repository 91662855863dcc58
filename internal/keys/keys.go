// Package keys names the Redis keys of a lock (DESIGN §3): they share a hash
// tag, so that every script touches one Cluster slot, for every name a user
// can pass; and it keeps a small cache of recent names.
package keys

import (
	"hash/maphash"
	"strings"
	"sync"
	"sync/atomic"
)

// Names are the Redis keys of one lock. A Names is never modified once
// made: locks, waiters and the cache share it.
type Names struct {
	Key string // the lock's name, as passed to Acquire
	// Keys are the names of the lock's Redis keys, boxed once (see the
	// root package's script), in the one order from which every script
	// takes its KEYS, each a run of it: acquire.lua (and semaphore.lua and
	// shared.lua) and release.lua all
	// eight; the plain lock's lock.lua the lock, its counter and its
	// tombstones, unlock.lua the waiting set and the lock;
	// extend.lua five from the lock on, renew.lua two;
	// raise.lua four from the lock on;
	// time.lua the lock; the acquisitions also take the previous limit
	// (KEYS[9]: semaphore.lua reads it, see Locker.SetLimit), and
	// setlimit.lua and limitstate.lua all nine. One array, so that a lock's names
	// cost a few small allocations, not a copy per script.
	Keys [9]any
}

// The index of each key in Names.Keys (and KEYS[i+1] in acquire.lua,
// semaphore.lua, shared.lua and
// release.lua).
const (
	WaitersKey  = iota // prefix{K}:waiters
	LockKey            // prefix{K}: the lock (token, or a sorted set of holders)
	FenceKey           // prefix{K}:fence
	DeadKey            // prefix{K}:dead
	MetaKey            // prefix{K}:meta
	LimitKey           // prefix{K}:limit
	LeasesKey          // prefix{K}:wexp
	WritersKey         // prefix{K}:writers
	OldLimitKey        // prefix{K}:oldlimit: "OLD NEW OP TOKEN", the last change, for a grace after SetLimit
)

func (n *Names) name(i int) string { return n.Keys[i].(string) }

// Lock is the lock's key, prefix{K}.
func (n *Names) Lock() string { return n.name(LockKey) }

// Fence is the fence counter's key.
func (n *Names) Fence() string { return n.name(FenceKey) }

// Waiters is the waiting set's key.
func (n *Names) Waiters() string { return n.name(WaitersKey) }

// Leases is the key of the waiters' leases.
func (n *Names) Leases() string { return n.name(LeasesKey) }

// Meta is the metadata's key.
func (n *Names) Meta() string { return n.name(MetaKey) }

// Limit is the key of a semaphore's limit.
func (n *Names) Limit() string { return n.name(LimitKey) }

// Dead is the tombstones' key.
func (n *Names) Dead() string { return n.name(DeadKey) }

// Writers is the key of the exclusive waiters' intents.
func (n *Names) Writers() string { return n.name(WritersKey) }

// OldLimit is the key of a semaphore's previous limit (see setlimit.lua).
func (n *Names) OldLimit() string { return n.name(OldLimitKey) }

// Terms is the key of an election's count of terms (see elected.lua): not
// one of Keys, since only the elections' calls name it.
func (n *Names) Terms() string { return n.Lock() + ":terms" }

// AcquireKeys are the KEYS of acquire.lua, semaphore.lua and shared.lua
// (the ninth, the previous limit, read by semaphore.lua only).
func (n *Names) AcquireKeys() []any { return n.Keys[:] }

// ReleaseKeys are release.lua's KEYS.
func (n *Names) ReleaseKeys() []any { return n.Keys[:OldLimitKey:OldLimitKey] }

// SetLimitKeys are setlimit.lua's KEYS, and limitstate.lua's: all nine.
func (n *Names) SetLimitKeys() []any { return n.Keys[:] }

// ProclaimKeys are proclaim.lua's KEYS: the lock and its metadata (made
// per call: a leader proclaims seldom).
func (n *Names) ProclaimKeys() []any { return []any{n.Keys[LockKey], n.Keys[MetaKey]} }

// ElectedKeys are elected.lua's KEYS, and keepterms.lua's: the lock and its
// count of terms.
func (n *Names) ElectedKeys() []any { return []any{n.Keys[LockKey], n.Terms()} }

// LockKeys are lock.lua's KEYS: the lock, its counter, its tombstones.
func (n *Names) LockKeys() []any { return n.Keys[LockKey : DeadKey+1 : DeadKey+1] }

// UnlockKeys are unlock.lua's KEYS: the waiting set and the lock.
func (n *Names) UnlockKeys() []any { return n.Keys[WaitersKey : LockKey+1 : LockKey+1] }

// TimeKeys are time.lua's KEYS: the lock.
func (n *Names) TimeKeys() []any { return n.Keys[LockKey : LockKey+1 : LockKey+1] }

// ExtendKeys are extend.lua's KEYS (of one lock).
func (n *Names) ExtendKeys() []any { return n.Keys[LockKey : LimitKey+1 : LimitKey+1] }

// ExtendKeysShort are renew.lua's KEYS (of one lock): a plain lock
// without metadata, not regained.
func (n *Names) ExtendKeysShort() []any { return n.Keys[LockKey : FenceKey+1 : FenceKey+1] }

// RaiseKeys are raise.lua's KEYS.
func (n *Names) RaiseKeys() []any { return n.Keys[LockKey : MetaKey+1 : MetaKey+1] }

// BuryKeys are bury.lua's KEYS: the tombstones.
func (n *Names) BuryKeys() []any { return n.Keys[DeadKey : DeadKey+1 : DeadKey+1] }

// LockKeysRecorded are lock.lua's KEYS on a Redlock, where the holder's
// fence is recorded with the hold: the lock, its counter, its tombstones
// and its metadata (raise.lua's too).
func (n *Names) LockKeysRecorded() []any { return n.Keys[LockKey : MetaKey+1 : MetaKey+1] }

// AdoptKeys are adopt.lua's KEYS: extend.lua's five, then the waiting
// keys (not used) and the old limit.
func (n *Names) AdoptKeys() []any { return n.Keys[LockKey:] }

// TagEscape starts the hash tag of a key that begins with '}' or with
// TagEscape itself. Redis hashes the text between the first '{' and the
// first '}' after it, and hashes the whole name when that text is empty: the
// lock "}x" as "dlock:{}x}" would put each of its keys in a different slot.
// "dlock:{\x00}x}" has the tag "\x00". Escaping the keys that begin with the
// escape too keeps names distinct; every other key keeps the plain name
// "dlock:{K}". (The prefix cannot contain braces: see dlock.WithPrefix.)
const TagEscape = "\x00"

// Make returns the names of the keys of the lock key (not empty) under
// prefix (without braces).
func Make(prefix, key string) *Names {
	tag := key
	if key[0] == '}' || key[0] == TagEscape[0] {
		tag = TagEscape + key
	}
	// One string holds all the names, which are slices of it: a lock's
	// names cost one allocation (a concatenation of many strings is one).
	p := prefix
	all := p + "{" + tag + "}:fence" + p + "{" + tag + "}:waiters" + p + "{" + tag + "}:wexp" + p + "{" + tag + "}:meta" + p + "{" + tag + "}:limit" + p + "{" + tag + "}:dead" + p + "{" + tag + "}:writers" + p + "{" + tag + "}:oldlimit"
	lock := len(p) + len(tag) + 2     // the lock's name: prefix{tag}
	w := lock + len(":fence")         // where the waiters' name starts
	e := w + lock + len(":waiters")   // where the leases' name starts
	m := e + lock + len(":wexp")      // where the metadata's name starts
	li := m + lock + len(":meta")     // where the limit's name starts
	d := li + lock + len(":limit")    // where the tombstones' name starts
	wr := d + lock + len(":dead")     // where the writers' name starts
	ol := wr + lock + len(":writers") // where the previous limit's name starts
	n := &Names{Key: key}
	n.Keys[LockKey] = all[:lock]
	n.Keys[FenceKey] = all[:w]
	n.Keys[WaitersKey] = all[w:e]
	n.Keys[LeasesKey] = all[e:m]
	n.Keys[MetaKey] = all[m:li]
	n.Keys[LimitKey] = all[li:d]
	n.Keys[DeadKey] = all[d:wr]
	n.Keys[WritersKey] = all[wr:ol]
	n.Keys[OldLimitKey] = all[ol:]
	return n
}

// cacheSets is the number of sets of a Cache, of cacheWays names each: a
// key locked again soon (a job's lock, taken every run; each of a few
// hundred hot keys) is not named again.
const (
	cacheSets = 256
	cacheWays = 2
)

// A Cache keeps the names of recently used keys under one prefix: a set
// per key's hash, whose most recently named key is first. It is safe for
// concurrent use (a race between two misses of one set only costs a name
// made again).
type Cache struct {
	prefix string
	seed   maphash.Seed
	recent [cacheSets][cacheWays]atomic.Pointer[Names]
}

// NewCache returns an empty cache of the names under prefix.
func NewCache(prefix string) *Cache { return &Cache{prefix: prefix, seed: maphash.MakeSeed()} }

// Get returns the names of key's Redis keys, from the cache if key was used
// recently.
func (c *Cache) Get(key string) *Names {
	set := &c.recent[maphash.String(c.seed, key)%cacheSets]
	for i := range set {
		if n := set[i].Load(); n != nil && n.Key == key {
			return n
		}
	}
	n := Make(c.prefix, key)
	for i := len(set) - 1; i > 0; i-- {
		set[i].Store(set[i-1].Load())
	}
	set[0].Store(n)
	return n
}

// Slot is the Redis Cluster hash slot of key: CRC16 (XMODEM) of its hash
// tag (the text between its first '{' and the first '}' after it, when
// not empty), or of the whole key, modulo 16384.
func Slot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}

// Slots is the number of hash slots of a Redis Cluster.
const Slots = 16384

// tagAlphabet spells the slot tags: three of its characters name every
// slot (TestSlotTags).
const tagAlphabet = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"

// slotTags holds the tag of each slot, three bytes each, made on first use
// (about 240,000 CRC16s of three bytes: a millisecond or two).
var slotTags = sync.OnceValue(func() string {
	t := make([]byte, 3*Slots)
	var set [Slots]bool
	n := len(tagAlphabet)
	for i := range n * n * n {
		b := [3]byte{tagAlphabet[i/(n*n)], tagAlphabet[i/n%n], tagAlphabet[i%n]}
		if s := Slot(string(b[:])); !set[s] {
			set[s] = true
			copy(t[3*s:], b[:])
		}
	}
	return string(t)
})

// SlotTag returns a short text whose slot is slot (in [0, Slots)), for a
// name that must hash to it: "prefix{TAG}rest" is in slot. It does not
// allocate.
func SlotTag(slot int) string {
	return slotTags()[3*slot : 3*slot+3]
}

// Asked is the key of the release requests for the lock's holders,
// prefix{K}:asked (asked.lua's; not in Keys: only a request and Status
// touch it).
func (n *Names) Asked() string { return n.Lock() + ":asked" }
