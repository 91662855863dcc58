package dlock

import (
	"math/rand/v2"
	"testing"
	"time"
)

// TestLockTimersHeap: the Locker's timers keep their heap ordered, each
// lock's place in it and its instant (at or after its place) through random
// moves and removals, hold no lock that left, and stop empty.
func TestLockTimersHeap(t *testing.T) {
	var ts lockTimers
	defer ts.stop()
	locks := make([]*Lock, 200)
	for i := range locks {
		locks[i] = &Lock{}
	}
	base := time.Now().Add(time.Hour) // never due during the test
	in := map[*Lock]bool{}
	want := map[*Lock]int64{}
	r := rand.New(rand.NewPCG(1, 2))
	check := func(step int) {
		t.Helper()
		if len(ts.heap) != len(in) {
			t.Fatalf("step %d: %d entries, %d locks in", step, len(ts.heap), len(in))
		}
		for i, e := range ts.heap {
			if e.k.timerIdx != i+1 || !in[e.k] {
				t.Fatalf("step %d: entry %d: timerIdx %d, in %v", step, i, e.k.timerIdx, in[e.k])
			}
			if e.want != want[e.k] || e.at > e.want {
				t.Fatalf("step %d: entry %d: place %d, instant %d, want the instant %d at or after the place", step, i, e.at, e.want, want[e.k])
			}
			if p := (i - 1) / 2; i > 0 && ts.heap[p].at > e.at {
				t.Fatalf("step %d: entry %d (%d) before its parent %d (%d)", step, i, e.at, p, ts.heap[p].at)
			}
		}
		for _, k := range locks {
			if !in[k] && k.timerIdx != 0 {
				t.Fatalf("step %d: a lock out of the heap has timerIdx %d", step, k.timerIdx)
			}
		}
		if len(ts.heap) > 0 && ts.at > ts.heap[0].at {
			t.Fatalf("step %d: the timer is set for %d, after the earliest instant %d", step, ts.at, ts.heap[0].at)
		}
	}
	for step := range 5000 {
		k := locks[r.IntN(len(locks))]
		if r.IntN(3) == 0 {
			ts.remove(k)
			delete(in, k)
		} else {
			at := base.Add(time.Duration(r.IntN(1000)) * time.Millisecond)
			ts.set(k, at)
			in[k], want[k] = true, mono(at)
		}
		check(step)
	}
	ts.stop()
	in = map[*Lock]bool{}
	check(-1)
	if cap(ts.heap) > 0 && ts.heap[:cap(ts.heap)][0].k != nil {
		t.Error("the stopped heap keeps a pointer to a lock")
	}
}

// TestLockTimersFire: when the timer fires, a lock whose instant has come
// leaves the heap (and ticks), and a lock that moved later since it took
// its place is put back at its instant instead.
func TestLockTimersFire(t *testing.T) {
	var ts lockTimers
	defer ts.stop()
	// Released locks: their tick does nothing.
	due, moved, later := &Lock{state: stateReleased}, &Lock{state: stateReleased}, &Lock{state: stateReleased}
	now := time.Now()
	for _, x := range []struct {
		k  *Lock
		at time.Time
	}{{later, now.Add(time.Hour)}, {due, now.Add(-time.Millisecond)}, {moved, now.Add(-time.Millisecond)}, {moved, now.Add(2 * time.Hour)}} {
		x.k.mu.Lock()
		ts.set(x.k, x.at)
		x.k.mu.Unlock()
	}
	// The timer may fire meanwhile too (if it ticks the moved lock before
	// its move, the move puts it back): the outcome is the same.
	ts.fire()
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if due.timerIdx != 0 {
		t.Error("the lock whose instant came is still in the heap")
	}
	if len(ts.heap) != 2 || ts.heap[0].k != later || ts.heap[1].k != moved || ts.heap[1].at != mono(now.Add(2*time.Hour)) {
		t.Errorf("heap %+v: want the later lock, then the moved one at its new instant", ts.heap)
	}
	if ts.at != mono(now.Add(time.Hour)) {
		t.Errorf("the timer is set for %d, want the earliest place %d", ts.at, mono(now.Add(time.Hour)))
	}
}

// TestZeroValidityIsLost: a lock that no quorum is known to hold (its
// validity the zero time) is due to be reported lost at once: the margin
// subtracted from a saturated duration must not wrap to centuries.
func TestZeroValidityIsLost(t *testing.T) {
	k := &Lock{ttl: 2 * time.Second}
	if d := k.untilLostAt(time.Now()); d > 0 {
		t.Errorf("untilLostAt with a zero validity = %v, want ≤ 0: lost", d)
	}
}

// TestLockTimersLongPast: an instant long past (arm's for a zero validity)
// fires at once, and does not keep the timer from firing for the others.
func TestLockTimersLongPast(t *testing.T) {
	var ts lockTimers
	defer ts.stop()
	zero, other := &Lock{state: stateReleased}, &Lock{state: stateReleased} // their ticks do nothing
	zero.mu.Lock()
	ts.set(zero, time.Time{}.Add(-50*time.Millisecond))
	zero.mu.Unlock()
	other.mu.Lock()
	ts.set(other, time.Now().Add(10*time.Millisecond))
	other.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ts.mu.Lock()
		left := len(ts.heap)
		ts.mu.Unlock()
		if left == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d locks still in the heap 10s on (zero %v, other %v): the timer is stuck", left, zero.timerIdx != 0, other.timerIdx != 0)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
