package dlock

import "hash/maphash"

// names are the Redis keys of one lock (DESIGN §3). They share a hash tag,
// so that every script touches one Cluster slot. A names is never modified
// once made: locks, waiters and the cache share it.
type names struct {
	key                                             string // the lock's name, as passed to Acquire
	lock, fence, waiters, leases, meta, limit, dead string
	// The KEYS of acquire.lua, release.lua, extend.lua and raise.lua, boxed
	// once (see script).
	acquireKeys [7]any
	releaseKeys [7]any
	extendKeys  [5]any
	raiseKeys   [2]any
}

// tagEscape starts the hash tag of a key that begins with '}' or with
// tagEscape itself. Redis hashes the text between the first '{' and the
// first '}' after it, and hashes the whole name when that text is empty: the
// lock "}x" as "dlock:{}x}" would put each of its keys in a different slot.
// "dlock:{\x00}x}" has the tag "\x00". Escaping the keys that begin with the
// escape too keeps names distinct; every other key keeps the plain name
// "dlock:{K}". (The prefix cannot contain braces: see WithPrefix.)
const tagEscape = "\x00"

// namesCacheSize is the number of slots of a Locker's cache of names: a key
// locked again soon (a job's lock, taken every run) is not named again.
const namesCacheSize = 64

// names returns the names of key's Redis keys, from the cache if key was
// used recently.
func (l *Locker) names(key string) *names {
	slot := &l.recent[maphash.String(l.seed, key)%namesCacheSize]
	if n := slot.Load(); n != nil && n.key == key {
		return n
	}
	n := l.makeNames(key)
	slot.Store(n)
	return n
}

func (l *Locker) makeNames(key string) *names {
	tag := key
	if key[0] == '}' || key[0] == tagEscape[0] {
		tag = tagEscape + key
	}
	// One string holds all the names, which are slices of it: a lock's
	// names cost one allocation (a concatenation of many strings is one).
	p := l.cfg.prefix
	all := p + "{" + tag + "}:fence" + p + "{" + tag + "}:waiters" + p + "{" + tag + "}:wexp" + p + "{" + tag + "}:meta" + p + "{" + tag + "}:limit" + p + "{" + tag + "}:dead"
	lock := len(p) + len(tag) + 2   // the lock's name: prefix{tag}
	w := lock + len(":fence")       // where the waiters' name starts
	e := w + lock + len(":waiters") // where the leases' name starts
	m := e + lock + len(":wexp")    // where the metadata's name starts
	li := m + lock + len(":meta")   // where the limit's name starts
	d := li + lock + len(":limit")  // where the tombstones' name starts
	n := &names{
		key:     key,
		lock:    all[:lock],
		fence:   all[:w],
		waiters: all[w:e],
		leases:  all[e:m],
		meta:    all[m:li],
		limit:   all[li:d],
		dead:    all[d:],
	}
	lk, fk, wk, ek, mk, lik, dk := any(n.lock), any(n.fence), any(n.waiters), any(n.leases), any(n.meta), any(n.limit), any(n.dead)
	n.acquireKeys = [7]any{lk, fk, wk, ek, mk, lik, dk}
	n.releaseKeys = [7]any{lk, wk, ek, mk, lik, dk, fk}
	n.extendKeys = [5]any{lk, mk, lik, fk, dk}
	n.raiseKeys = [2]any{fk, mk}
	return n
}
