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
	secs, rs := h.sections(recs, errorf)
	c, violations := h.checkOrder(secs, errorf)
	worst, v := h.checkProgress(secs, c, errorf)
	violations += v
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
	for k, n := range rs.failures {
		fs = append(fs, fmt.Sprintf("%s: %d", strings.TrimPrefix(k, "dlock: "), n))
	}
	sort.Strings(fs)
	return fmt.Sprintf("%d acquisitions (%d shared, %d of them beside another; %d ended by Lost; %d not paused by the test but seen by their worker after the validity; %d recorded only after their validity, %d of them not paused by the test), %d attempts (failed: %s; longest %s), faults %d (%s), longest unexplained gap %s, %d sections handed over (Detach, Adopt), overlaps after a server's clock jumped forward (the clock limit) %d",
		len(secs), c.shared, c.sharedOverlaps, c.lost, c.late, c.begunLate, c.begunLateUnpaused, rs.attempts, strings.Join(fs, ", "), rs.longest.Round(time.Millisecond), len(h.faults), strings.Join(ks, ", "),
		worst.Round(time.Millisecond), rs.adopted, c.clockOverlaps), violations, clockNote(c.clockDetails)
}

// recordStats is what one key's records tell beside its sections.
type recordStats struct {
	attempts, adopted int
	failures          map[string]int // by error
	longest           time.Duration  // the longest attempt
}

// sections returns one key's sections in the order they began (a killed
// worker's ending at the kill), reporting an attempt that waited past its
// context.
func (h *historyRun) sections(recs []Record, errorf func(format string, args ...any)) ([]section, recordStats) {
	var secs []section
	open := map[int]*section{}
	attempted := map[int]int64{} // each worker's last attempt's start
	rs := recordStats{failures: map[string]int{}}
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
				rs.adopted++
			}
			if strings.HasPrefix(r.Err, "adopt: ") {
				rs.failures[r.Err]++
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
			rs.attempts++
			if r.Err != "" {
				rs.failures[r.Err]++
			}
			d := time.Duration(r.At - r.Since)
			if d > AcquireTimeout+2*time.Second && !h.pausedDuring(r.W, r.Since, r.At) {
				errorf("worker %d waited %s in an Acquire with a %s context", r.W, d, AcquireTimeout)
			}
			rs.longest = max(rs.longest, d)
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
	return secs, rs
}

// sectionCounts counts the sections by what happened to them.
type sectionCounts struct {
	lost, late, shared, sharedOverlaps, clockOverlaps int
	begunLate, begunLateUnpaused                      int
	clockDetails                                      []string // the first overlaps after a clock jump
}

// checkOrder checks the sections' fences (each given once, increasing with
// the sections) and their exclusion, and counts them; it returns the
// counts and the number of violations.
func (h *historyRun) checkOrder(secs []section, errorf func(format string, args ...any)) (sectionCounts, int) {
	var c sectionCounts
	violations, last := 0, -1
	fences := map[uint64]bool{} // every fence given (never twice, over a Redlock too)
	for i, s := range secs {
		if s.lost {
			c.lost++
		}
		if s.late && !h.pausedDuring(s.w, s.start, s.end) {
			c.late++ // not paused by the test: the worker was slow
		}
		if s.shared {
			c.shared++
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
			c.begunLate++
			if !h.pausedDuring(s.w, s.since, s.start) {
				c.begunLateUnpaused++ // slow, not paused by the test: reported
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
		violations += h.checkOverlaps(secs, i, &c, errorf)
	}
	return c, violations
}

// checkOverlaps checks section i against the 32 before it: sections one of
// which is exclusive may overlap only when the earlier holder was paused
// when the later one began (a paused process cannot be excluded; the
// fences then tell them apart), or after a server's clock jumped (the
// clock limit, counted). It returns the number of violations.
func (h *historyRun) checkOverlaps(secs []section, i int, c *sectionCounts, errorf func(format string, args ...any)) int {
	s, violations, overlapped := secs[i], 0, false
	for j := i - 1; j >= 0 && j >= i-32 && s.end > s.start; j-- {
		q := secs[j]
		if q.end > s.start && q.shared && s.shared && !overlapped {
			overlapped = true
			c.sharedOverlaps++
		}
		if q.end > s.start && !(q.shared && s.shared) && !h.pausedDuring(q.w, s.start, s.start) {
			if h.clockJumpedDuring(q.start, s.start) {
				c.clockOverlaps++ // the clock limit of DESIGN §6, measured
				if len(c.clockDetails) < 3 {
					c.clockDetails = append(c.clockDetails, fmt.Sprintf("worker %d (fence %d%s) held until %s after worker %d (fence %d%s) began",
						q.w, q.fence, sharedMark(q.shared), time.Duration(q.end-s.start), s.w, s.fence, sharedMark(s.shared)))
				}
				continue
			}
			violations++
			errorf("overlap: worker %d (fence %d) held until %s after worker %d (fence %d) began",
				q.w, q.fence, time.Duration(q.end-s.start), s.w, s.fence)
		}
	}
	return violations
}

// checkProgress checks that the key never stayed free, with workers
// waiting, longer than a fault explains (a gap not explained by a fault,
// with a TTL and 2s to recover after it, is a waiter that was not woken),
// and that shared holds were shared. It returns the longest unexplained
// gap and the number of violations.
func (h *historyRun) checkProgress(secs []section, c sectionCounts, errorf func(format string, args ...any)) (time.Duration, int) {
	worst, violations := time.Duration(0), 0
	for i := 1; i < len(secs); i++ {
		gap := h.unexplained(secs[i-1].end, secs[i].start)
		worst = max(worst, gap)
		if gap > h.ttl+2*time.Second {
			violations++
			errorf("no holder for %s between fence %d and %d, with workers waiting and no fault to explain it", gap, secs[i-1].fence, secs[i].fence)
		}
	}
	if h.rw && c.shared >= 20 && c.sharedOverlaps == 0 {
		// (A short run under faults may hold too few shared sections to
		// tell.)
		violations++
		errorf("no two shared sections overlapped in %d: the shared holds were exclusive", c.shared)
	}
	return worst, violations
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
