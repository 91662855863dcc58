package dlock

import (
	"sync"
	"time"
)

// lockTimers is a Locker's one timer for its locks' own instants: each
// lock's lost-lock signal, and its renewal when it runs alone (see arm).
// It is a min-heap of the locks by instant, with one runtime timer set for
// the earliest: a lock costs an entry of 24 bytes, not a timer of its own.
// When the timer fires, the locks whose instant has come leave the heap,
// and each one's tick runs on a goroutine of its own, as the lock's own
// timer would run it, so that one lock's slow renewal or hook delays no
// other lock's signal.
//
// A lock that moves later (a renewal: its validity grew) keeps its place,
// and only notes its new instant (want); when its old place comes, it is
// put back at that instant instead of ticking. So a healthy lock, renewed
// every TTL/3, costs a note per renewal and a move about every TTL/2, not
// a move of its own per renewal; and the timer is set again only when an
// instant earlier than the one it is set for comes in (when the earliest
// lock leaves, the timer fires early, finds nothing due, and is set for
// the next).
//
// (container/heap is not used: its Push and Pop box each entry, an
// allocation per renewal.)
type lockTimers struct {
	mu    sync.Mutex
	heap  []timerEntry
	timer *time.Timer
	at    int64 // the instant the timer is set for (see mono); 0: none
}

// timerEntry is a lock in the heap (instants: see mono): at is its place,
// want the lock's instant, at or after at. The lock's timerIdx is its
// index in the heap + 1 (0: not in it), guarded by lockTimers.mu.
type timerEntry struct {
	at, want int64
	k        *Lock
}

// monoBase is the origin of mono.
var monoBase = time.Now()

// mono is t on the monotonic clock, in ns from monoBase, when t has a
// monotonic reading (time.Now and what is computed from it); the zero
// time is before every instant.
func mono(t time.Time) int64 { return int64(t.Sub(monoBase)) }

// monoMilli is mono(t) in whole milliseconds (the renewals' grid).
func monoMilli(t time.Time) int64 { return mono(t) / int64(time.Millisecond) }

// untilMilli is how long from now until the instant ms (of monoMilli).
func untilMilli(ms int64) time.Duration {
	return time.Duration(ms*int64(time.Millisecond) - mono(time.Now()))
}

// set has k tick at instant at: it puts k in the heap there, or moves it
// there if that is earlier than its place, or notes it (want). k.mu is
// held.
func (t *lockTimers) set(k *Lock, at time.Time) {
	m := mono(at)
	if m == 0 {
		m = -1 // 0 means "not set"; the instant is long past anyway
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if i := k.timerIdx - 1; i < 0 {
		t.push(timerEntry{m, m, k})
	} else if t.heap[i].want = m; m < t.heap[i].at {
		t.heap[i].at = m
		t.up(i)
	}
	t.arm(t.heap[k.timerIdx-1].at)
}

// arm sets the timer for instant m unless it is set for an earlier one;
// t.mu is held.
func (t *lockTimers) arm(m int64) {
	if t.at == 0 || m < t.at {
		t.at = m
		d := time.Duration(0) // an instant past fires at once
		if now := mono(time.Now()); m > now {
			d = time.Duration(m - now) // (m - now, with m long past, could wrap)
		}
		if t.timer == nil {
			t.timer = time.AfterFunc(d, t.fire)
		} else {
			t.timer.Reset(d)
		}
	}
}

func (t *lockTimers) push(e timerEntry) {
	t.heap = append(t.heap, e)
	e.k.timerIdx = len(t.heap)
	t.up(len(t.heap) - 1)
}

// remove takes k out of the heap, if it is in it. k.mu is held.
func (t *lockTimers) remove(k *Lock) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if i := k.timerIdx - 1; i >= 0 {
		t.removeAt(i)
	}
}

// removeAt removes the entry at i; t.mu is held. The last entry takes its
// place.
func (t *lockTimers) removeAt(i int) {
	last := len(t.heap) - 1
	if i != last {
		t.swap(i, last)
	}
	t.heap[last].k.timerIdx = 0
	t.heap[last] = timerEntry{} // no pointer kept to a lock that left
	t.heap = t.heap[:last]
	if i != last {
		t.down(i)
		t.up(i)
	}
}

// fire runs when the timer fires: the locks whose instant has come leave
// the heap and tick, those whose place came before their instant move to
// it, and the timer is set for the next place.
func (t *lockTimers) fire() {
	t.mu.Lock()
	now := mono(time.Now())
	var due []*Lock
	for len(t.heap) > 0 && t.heap[0].at <= now {
		if e := &t.heap[0]; e.want > now {
			e.at = e.want
			t.down(0)
			continue
		}
		due = append(due, t.heap[0].k)
		t.removeAt(0)
	}
	t.at = 0
	if len(t.heap) > 0 {
		t.at = t.heap[0].at
		t.timer.Reset(time.Duration(t.at - now))
	}
	t.mu.Unlock()
	for _, k := range due {
		go k.tick()
	}
}

// stop stops the timer (Close, once its locks have ended).
func (t *lockTimers) stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.timer != nil {
		t.timer.Stop()
	}
	for len(t.heap) > 0 {
		t.removeAt(len(t.heap) - 1)
	}
	t.at = 0
}

func (t *lockTimers) swap(i, j int) {
	h := t.heap
	h[i], h[j] = h[j], h[i]
	h[i].k.timerIdx = i + 1
	h[j].k.timerIdx = j + 1
}

func (t *lockTimers) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if t.heap[p].at <= t.heap[i].at {
			return
		}
		t.swap(i, p)
		i = p
	}
}

func (t *lockTimers) down(i int) {
	n := len(t.heap)
	for {
		c := 2*i + 1
		if c >= n {
			return
		}
		if c+1 < n && t.heap[c+1].at < t.heap[c].at {
			c++
		}
		if t.heap[i].at <= t.heap[c].at {
			return
		}
		t.swap(i, c)
		i = c
	}
}
