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
	Key                                                      string // the lock's name, as passed to Acquire
	Lock, Fence, Waiters, Leases, Meta, Limit, Dead, Writers string
	// The KEYS of acquire.lua, release.lua, extend.lua and raise.lua, in
	// each script's order, boxed once (see the root package's script).
	AcquireKeys [8]any
	ReleaseKeys [8]any
	ExtendKeys  [5]any
	RaiseKeys   [2]any
}

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
	all := p + "{" + tag + "}:fence" + p + "{" + tag + "}:waiters" + p + "{" + tag + "}:wexp" + p + "{" + tag + "}:meta" + p + "{" + tag + "}:limit" + p + "{" + tag + "}:dead" + p + "{" + tag + "}:writers"
	lock := len(p) + len(tag) + 2   // the lock's name: prefix{tag}
	w := lock + len(":fence")       // where the waiters' name starts
	e := w + lock + len(":waiters") // where the leases' name starts
	m := e + lock + len(":wexp")    // where the metadata's name starts
	li := m + lock + len(":meta")   // where the limit's name starts
	d := li + lock + len(":limit")  // where the tombstones' name starts
	wr := d + lock + len(":dead")   // where the writers' name starts
	n := &Names{
		Key:     key,
		Lock:    all[:lock],
		Fence:   all[:w],
		Waiters: all[w:e],
		Leases:  all[e:m],
		Meta:    all[m:li],
		Limit:   all[li:d],
		Dead:    all[d:wr],
		Writers: all[wr:],
	}
	lk, fk, wk, ek, mk, lik, dk, wrk := any(n.Lock), any(n.Fence), any(n.Waiters), any(n.Leases), any(n.Meta), any(n.Limit), any(n.Dead), any(n.Writers)
	n.AcquireKeys = [8]any{lk, fk, wk, ek, mk, lik, dk, wrk}
	n.ReleaseKeys = [8]any{lk, wk, ek, mk, lik, dk, fk, wrk}
	n.ExtendKeys = [5]any{lk, mk, lik, fk, dk}
	n.RaiseKeys = [2]any{fk, mk}
	return n
}

// cacheSize is the number of slots of a Cache: a key locked again soon (a
// job's lock, taken every run) is not named again.
const cacheSize = 64

// A Cache keeps the names of recently used keys under one prefix, a slot
// per key's hash. It is safe for concurrent use.
type Cache struct {
	prefix string
	seed   maphash.Seed
	recent [cacheSize]atomic.Pointer[Names]
}

// NewCache returns an empty cache of the names under prefix.
func NewCache(prefix string) *Cache { return &Cache{prefix: prefix, seed: maphash.MakeSeed()} }

// Get returns the names of key's Redis keys, from the cache if key was used
// recently.
func (c *Cache) Get(key string) *Names {
	slot := &c.recent[maphash.String(c.seed, key)%cacheSize]
	if n := slot.Load(); n != nil && n.Key == key {
		return n
	}
	n := Make(c.prefix, key)
	slot.Store(n)
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
