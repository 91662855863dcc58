package history

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// checkElection checks the election's terms as the lock's sections are
// checked (one leader at a time, terms strictly increasing, progress), and
// counts the leadership requests: how often the candidate that asked led
// next (reported, not required: under faults another may win, or the
// leader may be lost before it resigns).
func (h *historyRun) checkElection(recs []Record, errorf func(format string, args ...any)) (string, int) {
	_, violations, _ := h.checkSections(recs, func(format string, args ...any) { errorf("election: "+format, args...) })
	var begins []Record
	terms, askedOff, requests, servedNext := 0, 0, 0, 0
	for _, r := range recs {
		switch {
		case r.Kind == "begin":
			terms++
			begins = append(begins, r)
		case r.Kind == "end" && r.Asked:
			askedOff++
		}
	}
	sort.Slice(begins, func(i, j int) bool { return begins[i].At < begins[j].At })
	for _, r := range recs {
		if r.Kind != "request" {
			continue
		}
		requests++
		i := sort.Search(len(begins), func(i int) bool { return begins[i].At > r.At })
		if i < len(begins) && begins[i].W == r.W {
			servedNext++
		}
	}
	return fmt.Sprintf("election: %d terms, %d leadership requests (RequestLeadership), %d resignations when asked, the asking candidate led next %d times, %d election violations",
		terms, requests, askedOff, servedNext, violations), violations
}

// limitChange is one SetLimit call of the changer.
type limitChange struct {
	n          int
	start, end int64
	ok         bool
}

// permit is one hold of a semaphore permit: from when its Acquire was
// called (asked), held from start to end (its guaranteed part).
type permit struct {
	w, g              int
	asked, start, end int64
}

// checkLimits checks the semaphore's holders against its limit changes
// (SetLimit's doc comment): at every moment a permit was granted, the
// holders never exceed the largest limit that any of them could have been
// counted against (the limit when its Acquire began, the limits of the
// changes under way then, or failed and not yet overwritten by a change
// that returned, and of the changes begun before it was granted); and,
// once a change returned, with none begun since, no Acquire that began
// after it is granted a permit while its limit's worth of permits is held
// (lowering the limit admits no one new until the holders are below it).
func (h *historyRun) checkLimits(recs []Record, errorf func(format string, args ...any)) (string, int) {
	changes, permits, attempts, failures := h.limitHistory(recs)
	sort.Slice(permits, func(i, j int) bool { return permits[i].start < permits[j].start })
	violations, most, clockOverlaps := 0, 0, 0
	for i, s := range permits {
		var live []permit
		for j := i; j >= 0 && j >= i-64; j-- {
			if q := permits[j]; q.end > s.start && !(j != i && h.pausedDuring(q.w, s.start, s.start)) {
				live = append(live, q)
			}
		}
		most = max(most, len(live))
		bound := 0
		for _, q := range live {
			bound = max(bound, limitsIn(changes, q.asked, q.start))
		}
		excess := len(live) > bound
		if n, since, settled := settledAt(changes, s.start); settled && s.asked > since && len(live) > n {
			// Admitted under the new limit, with n holders already.
			excess, bound = true, n
		}
		if !excess {
			continue
		}
		if h.clockJumpedDuring(live[len(live)-1].start, s.start) {
			clockOverlaps++
			continue
		}
		violations++
		errorf("semaphore: %d holders (bound %d) when worker %d/%d's permit began at %s%s", len(live), bound, s.w, s.g, time.Unix(0, s.start).Format("15:04:05.000"), h.limitDetail(live, changes, s.start))
	}
	okChanges := 0
	for _, c := range changes {
		if c.ok {
			okChanges++
		}
	}
	var fs []string
	for k, n := range failures {
		fs = append(fs, fmt.Sprintf("%s: %d", strings.TrimPrefix(k, "dlock: "), n))
	}
	sort.Strings(fs)
	return fmt.Sprintf("semaphore: %d permits, %d attempts (failed: %s), %d SetLimit calls (%d returned nil), most holders at once %d, over the limit after a server's clock jumped %d, %d semaphore violations",
		len(permits), attempts, strings.Join(fs, ", "), len(changes), okChanges, most, clockOverlaps, violations), violations
}

// limitHistory reads the semaphore's records: the limit changes, the
// permits (a killed worker's ending at the kill), the attempts and the
// failures by class.
func (h *historyRun) limitHistory(recs []Record) ([]limitChange, []permit, int, map[string]int) {
	var changes []limitChange
	var permits []permit
	open := map[[2]int]*permit{}
	attempts, failures := 0, map[string]int{}
	for _, r := range recs {
		switch r.Kind {
		case "limit-call":
			changes = append(changes, limitChange{n: r.Limit, start: r.At, end: r.At})
		case "limit":
			if len(changes) > 0 && changes[len(changes)-1].start == r.Since {
				c := &changes[len(changes)-1]
				c.end, c.ok = r.At, r.Err == ""
			}
			if r.Err != "" {
				failures[r.Err]++
			}
		case "attempt":
			attempts++
			if r.Err != "" {
				failures[r.Err]++
			}
		case "begin":
			id := [2]int{r.W, r.G}
			if p := open[id]; p != nil {
				// Killed and started anew: it ended at the kill.
				if k, ok := h.killedAfter(r.W, p.start); ok && k <= r.At {
					p.end = k
					permits = append(permits, *p)
				}
			}
			open[id] = &permit{w: r.W, g: r.G, asked: r.Since, start: r.At}
		case "end":
			if p := open[[2]int{r.W, r.G}]; p != nil {
				p.end = min(r.At, r.Valid)
				permits = append(permits, *p)
				delete(open, [2]int{r.W, r.G})
			}
		}
	}
	for _, p := range open {
		if k, ok := h.killedAfter(p.w, p.start); ok {
			p.end = k
			permits = append(permits, *p)
		}
	}
	return changes, permits, attempts, failures
}

// limitsAt is the largest limit an acquisition that began at t could have
// been counted against: the limit of the last change that returned before
// t (historyLimit before any), and of every change begun before t that had
// not returned then, or failed and was not followed by one that returned
// before t (what it changed, on some nodes, is unknown).
func limitsAt(changes []limitChange, t int64) int {
	bound, lastOK := historyLimit, int64(0)
	for _, c := range changes {
		if c.ok && c.end <= t {
			bound, lastOK = c.n, c.end
		}
	}
	bound = max(bound, historyLimit) // an idle key takes the limit asked
	for _, c := range changes {
		if c.start <= t && ((c.ok && c.end > t) || (!c.ok && c.start >= startOfLastOK(changes, lastOK))) {
			bound = max(bound, c.n)
		}
	}
	return bound
}

// limitsIn is the largest limit an acquisition that began at from and was
// granted at to could have been counted against: limitsAt(from), and the
// limit of every change begun between.
func limitsIn(changes []limitChange, from, to int64) int {
	bound := limitsAt(changes, from)
	for _, c := range changes {
		if c.start > from && c.start <= to {
			bound = max(bound, c.n)
		}
	}
	return bound
}

// startOfLastOK is when the change that returned at end began (0: none).
func startOfLastOK(changes []limitChange, end int64) int64 {
	for _, c := range changes {
		if c.ok && c.end == end {
			return c.start
		}
	}
	return 0
}

// settledAt reports the limit at t when it is settled: a change returned
// before t (when), and no change began after it, nor failed since the one
// before it that returned.
func settledAt(changes []limitChange, t int64) (n int, when int64, settled bool) {
	last := -1
	for i, c := range changes {
		if c.start > t {
			break
		}
		last = i
	}
	if last < 0 || !changes[last].ok || changes[last].end > t {
		return 0, 0, false
	}
	// A failed change before it leaves nodes that the last one may not
	// have reached (it needs a quorum only): not settled until then.
	if last > 0 && !changes[last-1].ok {
		return 0, 0, false
	}
	return changes[last].n, changes[last].end, true
}

// limitDetail shows the holders and the changes near t, for a violation.
func (h *historyRun) limitDetail(live []permit, changes []limitChange, t int64) string {
	ts := func(x int64) string { return time.Unix(0, x).Format("05.000") }
	var b strings.Builder
	for _, q := range live {
		fmt.Fprintf(&b, "\n\tworker %d/%d: asked %s, held %s-%s", q.w, q.g, ts(q.asked), ts(q.start), ts(q.end))
	}
	for _, c := range changes {
		if c.end > t-3e9 && c.start < t+1e9 {
			fmt.Fprintf(&b, "\n\tSetLimit(%d) %s-%s ok %v", c.n, ts(c.start), ts(c.end), c.ok)
		}
	}
	for _, f := range h.faults {
		if f.end.UnixNano() > t-3e9 && f.start.UnixNano() < t+1e9 {
			fmt.Fprintf(&b, "\n\t%s (worker %d, node %d) %s-%s", f.kind, f.w, f.node, ts(f.start.UnixNano()), ts(f.end.UnixNano()))
		}
	}
	return b.String()
}
