package history

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// section is one holder's critical section.
type section struct {
	w          int
	fence      uint64
	start, end int64
	since      int64 // when the attempt that granted it began (0: not known)
	lost       bool
	late       bool // the worker saw the end after its validity (it was slow)
	shared     bool // a shared hold: it may overlap other shared ones
}

// check verifies the history, reporting each violation with errorf, and
// returns a summary.
func (h *historyRun) check(errorf func(format string, args ...any)) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	byKey := map[string][]Record{}
	for _, r := range h.recs {
		byKey[r.Key] = append(byKey[r.Key], r)
	}
	sum, violations, note := h.checkSections(byKey[""], errorf)
	if len(byKey[historyElection])+len(byKey[historySemaphore]) > 0 {
		es, ev := h.checkElection(byKey[historyElection], errorf)
		ss, sv := h.checkLimits(byKey[historySemaphore], errorf)
		sum, violations = sum+"; "+es+"; "+ss, violations+ev+sv
	}
	return fmt.Sprintf("%s, violations %d", sum, violations) + note
}

// checkSections checks the exclusive (or shared) sections of one key's
// records: exclusion, fence order, progress, bounded attempts. It returns
// a summary, the number of violations and a note on the clock limit.
func (h *historyRun) checkSections(recs []Record, errorf func(format string, args ...any)) (string, int, string) {
	var secs []section
	open := map[int]*section{}
	attempted := map[int]int64{} // each worker's last attempt's start
	attempts, adopted, failures := 0, 0, map[string]int{}
	var longest time.Duration
	for _, r := range recs {
		switch r.Kind {
		case "begin":
			if s := open[r.W]; s != nil {
				// The worker began again without ending: it was killed
				// (and started anew); its section ended at the kill.
				if k, ok := h.killedAfter(r.W, s.start); ok && k <= r.At {
					s.end = k
				} else {
					errorf("worker %d began fence %d without ending fence %d, and was not killed in between", r.W, r.Fence, s.fence)
					s.end = r.At
				}
				secs = append(secs, *s)
			}
			open[r.W] = &section{w: r.W, fence: r.Fence, start: r.At, shared: r.Shared, since: max(r.Since, attempted[r.W])}
		case "end":
			if r.Adopted {
				adopted++
			}
			if strings.HasPrefix(r.Err, "adopt: ") {
				failures[r.Err]++
			}
			if s := open[r.W]; s != nil && r.Fence != s.fence {
				errorf("worker %d ended fence %d with fence %d (a hand-over changed it)", r.W, s.fence, r.Fence)
			}
			if s := open[r.W]; s != nil {
				// Ownership is guaranteed until ValidUntil; a worker that
				// sees Lost later was slow (a pause), which the fences, not
				// the lock, must cover.
				s.end, s.lost = min(r.At, r.Valid), r.Lost
				s.late = r.At > r.Valid
				secs = append(secs, *s)
				delete(open, r.W)
			}
		case "attempt":
			attempted[r.W] = r.Since
			attempts++
			if r.Err != "" {
				failures[r.Err]++
			}
			d := time.Duration(r.At - r.Since)
			if d > AcquireTimeout+2*time.Second && !h.pausedDuring(r.W, r.Since, r.At) {
				errorf("worker %d waited %s in an Acquire with a %s context", r.W, d, AcquireTimeout)
			}
			longest = max(longest, d)
		}
	}
	// A section whose worker was killed ends at the kill.
	for w, s := range open {
		if k, ok := h.killedAfter(w, s.start); ok {
			s.end = k
			secs = append(secs, *s)
		}
	}
	sort.Slice(secs, func(i, j int) bool { return secs[i].start < secs[j].start })
	violations := 0
	// fences: every fence given (never twice, over a Redlock too).
	fences := map[uint64]bool{}
	lost, late, shared, sharedOverlaps, clockOverlaps := 0, 0, 0, 0, 0
	begunLate, begunLateUnpaused, last := 0, 0, -1
	var clockDetails []string
	for i, s := range secs {
		if s.lost {
			lost++
		}
		if s.late && !h.pausedDuring(s.w, s.start, s.end) {
			late++ // not paused by the test: the worker was slow
		}
		if s.shared {
			shared++
		}
		if fences[s.fence] {
			violations++
			errorf("fence %d issued twice", s.fence)
		}
		fences[s.fence] = true
		// Fences follow the order of the sections, except between shared
		// holds (granted at once, recorded in any order), and except for a
		// section whose begin was recorded after its validity had ended:
		// its worker was paused or slow between the grant and the record,
		// so the record does not tell when it was granted (the next
		// holder's larger fence is what refuses its writes). Such a
		// section is counted, and the sections after it are compared with
		// the last one recorded in time.
		if s.end <= s.start {
			begunLate++
			if !h.pausedDuring(s.w, s.since, s.start) {
				begunLateUnpaused++ // slow, not paused by the test: reported
			}
		} else {
			if last >= 0 {
				p := secs[last]
				if s.fence <= p.fence && !(s.shared && p.shared) {
					violations++
					errorf("fence %d (worker %d) after fence %d (worker %d)", s.fence, s.w, p.fence, p.w)
				}
			}
			last = i
		}
		// Overlap, of sections one of which is exclusive: allowed only
		// when the earlier holder was paused when the later one began (a
		// paused process cannot be excluded; the fences then tell them
		// apart).
		overlapped := false
		for j := i - 1; j >= 0 && j >= i-32 && s.end > s.start; j-- {
			q := secs[j]
			if q.end > s.start && q.shared && s.shared && !overlapped {
				overlapped = true
				sharedOverlaps++
			}
			if q.end > s.start && !(q.shared && s.shared) && !h.pausedDuring(q.w, s.start, s.start) {
				if h.clockJumpedDuring(q.start, s.start) {
					clockOverlaps++ // the clock limit of DESIGN §6, measured
					if len(clockDetails) < 3 {
						clockDetails = append(clockDetails, fmt.Sprintf("worker %d (fence %d%s) held until %s after worker %d (fence %d%s) began",
							q.w, q.fence, sharedMark(q.shared), time.Duration(q.end-s.start), s.w, s.fence, sharedMark(s.shared)))
					}
					continue
				}
				violations++
				errorf("overlap: worker %d (fence %d) held until %s after worker %d (fence %d) began",
					q.w, q.fence, time.Duration(q.end-s.start), s.w, s.fence)
			}
		}
	}
	// Progress: a gap between sections not explained by a fault (with a
	// TTL and 2s to recover after it) is a waiter that was not woken.
	worst := time.Duration(0)
	for i := 1; i < len(secs); i++ {
		gap := h.unexplained(secs[i-1].end, secs[i].start)
		worst = max(worst, gap)
		if gap > h.ttl+2*time.Second {
			violations++
			errorf("no holder for %s between fence %d and %d, with workers waiting and no fault to explain it", gap, secs[i-1].fence, secs[i].fence)
		}
	}
	if h.rw && shared >= 20 && sharedOverlaps == 0 {
		// (A short run under faults may hold too few shared sections to
		// tell.)
		violations++
		errorf("no two shared sections overlapped in %d: the shared holds were exclusive", shared)
	}
	kinds := map[string]int{}
	for _, f := range h.faults {
		kinds[f.kind]++
	}
	var ks []string
	for k, n := range kinds {
		ks = append(ks, fmt.Sprintf("%s %d", k, n))
	}
	sort.Strings(ks)
	var fs []string
	for k, n := range failures {
		fs = append(fs, fmt.Sprintf("%s: %d", strings.TrimPrefix(k, "dlock: "), n))
	}
	sort.Strings(fs)
	return fmt.Sprintf("%d acquisitions (%d shared, %d of them beside another; %d ended by Lost; %d not paused by the test but seen by their worker after the validity; %d recorded only after their validity, %d of them not paused by the test), %d attempts (failed: %s; longest %s), faults %d (%s), longest unexplained gap %s, %d sections handed over (Detach, Adopt), overlaps after a server's clock jumped forward (the clock limit) %d",
		len(secs), shared, sharedOverlaps, lost, late, begunLate, begunLateUnpaused, attempts, strings.Join(fs, ", "), longest.Round(time.Millisecond), len(h.faults), strings.Join(ks, ", "),
		worst.Round(time.Millisecond), adopted, clockOverlaps), violations, clockNote(clockDetails)
}

// killedAfter returns the first time worker w was killed after from.
func (h *historyRun) killedAfter(w int, from int64) (int64, bool) {
	for _, k := range h.killed[w] {
		if k.UnixNano() > from {
			return k.UnixNano(), true
		}
	}
	return 0, false
}

// pausedDuring reports whether worker w was paused at some time in [from, to].
func (h *historyRun) pausedDuring(w int, from, to int64) bool {
	for _, p := range h.paused[w] {
		if p.start.UnixNano() <= to && p.end.UnixNano() >= from {
			return true
		}
	}
	return false
}

// unexplained is the part of [from, to] that no fault, with a TTL and 2s of
// recovery after it, covers.
func (h *historyRun) unexplained(from, to int64) time.Duration {
	if to <= from {
		return 0
	}
	type span struct{ a, b int64 }
	var cover []span
	for _, f := range h.faults {
		cover = append(cover, span{f.start.UnixNano(), f.end.Add(h.ttl + 2*time.Second).UnixNano()})
	}
	sort.Slice(cover, func(i, j int) bool { return cover[i].a < cover[j].a })
	left, at := time.Duration(0), from
	for _, c := range cover {
		if c.b <= at || c.a >= to {
			continue
		}
		if c.a > at {
			left += time.Duration(c.a - at)
		}
		at = max(at, c.b)
		if at >= to {
			return left
		}
	}
	return left + time.Duration(to-at)
}
