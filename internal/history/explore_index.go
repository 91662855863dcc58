package history

import (
	"sort"
	"time"
)

// index holds the run's records sorted for the checks' queries, so that a
// long run (make verify) is checked in n·log n: each query looks at the
// records that can overlap its interval only.
type index struct {
	holds    map[string][]*hold // by key, by begin (anchors apart)
	anchors  []*hold
	span     int64 // the longest a hold (not an anchor) may matter: freeAt−begin+1s
	claims   map[string][]*claim
	callSpan int64               // the longest call
	closes   map[[2]int]closeRec // by slot and generation
	forces   map[string][]span   // by key, by start
	badSlot  map[int][]cmdRec    // by slot, by start
	badKey   map[string][]cmdRec // by key, by start
	badSpan  int64               // the longest such command, and 1s
}

// build indexes x's records; the holds' ends must be final.
func (x *exploreRun) build() *index {
	ix := &index{holds: map[string][]*hold{}, claims: map[string][]*claim{}, closes: map[[2]int]closeRec{},
		forces: map[string][]span{}, badSlot: map[int][]cmdRec{}, badKey: map[string][]cmdRec{}}
	for _, h := range x.holds { // sorted by begin
		if h.anchor {
			ix.anchors = append(ix.anchors, h)
			continue
		}
		ix.holds[h.key] = append(ix.holds[h.key], h)
		ix.span = max(ix.span, h.freeAt()-h.begin+int64(time.Second), h.gEnd()-h.begin)
	}
	sort.Slice(x.claims, func(i, j int) bool { return x.claims[i].start < x.claims[j].start })
	for _, c := range x.claims {
		ix.claims[c.key] = append(ix.claims[c.key], c)
		ix.callSpan = max(ix.callSpan, c.end-c.start)
	}
	for _, c := range x.closes {
		k := [2]int{c.slot, c.gen}
		if p, ok := ix.closes[k]; !ok || c.start < p.start {
			ix.closes[k] = c
		}
	}
	sort.Slice(x.forces, func(i, j int) bool { return x.forces[i].start < x.forces[j].start })
	for _, f := range x.forces {
		ix.forces[f.key] = append(ix.forces[f.key], f)
	}
	sort.Slice(x.cmdBad, func(i, j int) bool { return x.cmdBad[i].start < x.cmdBad[j].start })
	for _, c := range x.cmdBad {
		ix.badSlot[c.slot] = append(ix.badSlot[c.slot], c)
		ix.badKey[c.key] = append(ix.badKey[c.key], c)
		ix.badSpan = max(ix.badSpan, c.end-c.start+int64(time.Second))
	}
	return ix
}

// holdsNear calls f with each hold of key (anchors included) that may
// matter in [from, to]: granted (asked) before to and not known over
// before from, roughly; f checks exactly.
func (ix *index) holdsNear(key string, from, to int64, f func(*hold)) {
	hs := ix.holds[key]
	i := sort.Search(len(hs), func(i int) bool { return hs[i].begin >= from-ix.span })
	for ; i < len(hs) && hs[i].begin <= to+int64(time.Second); i++ {
		f(hs[i])
	}
	for _, h := range ix.anchors {
		if h.key == key {
			f(h)
		}
	}
}

// claimsNear calls f with each call on key that may overlap [from, to].
func (ix *index) claimsNear(key string, from, to int64, f func(*claim)) {
	cs := ix.claims[key]
	i := sort.Search(len(cs), func(i int) bool { return cs[i].start >= from-ix.callSpan })
	for ; i < len(cs) && cs[i].start <= to; i++ {
		if cs[i].end >= from {
			f(cs[i])
		}
	}
}

// badNear reports whether f holds for a command (of cs, by start) that
// may overlap [from, to].
func (ix *index) badNear(cs []cmdRec, from, to int64, f func(cmdRec) bool) bool {
	i := sort.Search(len(cs), func(i int) bool { return cs[i].start >= from-ix.badSpan })
	for ; i < len(cs) && cs[i].start <= to; i++ {
		if f(cs[i]) {
			return true
		}
	}
	return false
}

// closedBy reports whether slot's Locker of generation gen had begun to
// close by t.
func (ix *index) closedBy(slot, gen int, t int64) bool {
	c, ok := ix.closes[[2]int{slot, gen}]
	return ok && c.start <= t
}

// forced reports whether a ForceRelease of key overlapped [from, to].
func (ix *index) forced(key string, from, to int64) bool {
	fs := ix.forces[key]
	i := sort.Search(len(fs), func(i int) bool { return fs[i].start >= from-ix.callSpan })
	for ; i < len(fs) && fs[i].start <= to; i++ {
		if fs[i].end >= from {
			return true
		}
	}
	return false
}
