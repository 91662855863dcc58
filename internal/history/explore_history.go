package history

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/dlock-dev/dlock"
)

// histLines are the lines of a violation's history, with their times.
type histLines struct {
	x  *exploreRun
	ls []histLine
}

type histLine struct {
	at int64
	s  string
}

func (h *histLines) add(at int64, format string, args ...any) {
	h.ls = append(h.ls, histLine{at, h.x.since(at).Round(time.Microsecond).String() + ": " + fmt.Sprintf(format, args...)})
}

// historyOf is a minimal history of a violation of key at t: from 300ms
// before the first of the holds involved was asked for (or 2s before t),
// to t: the holds of key, the faults on its commands and the servers',
// the limit changes, the Closes of Lockers and the failed calls on key
// (and, with MONITOR, what the servers ran and the slots sent), in time
// order, after the holds involved.
func (x *exploreRun) historyOf(key string, t int64, involved []*hold) []string {
	from := t - int64(2*time.Second)
	for _, h := range involved {
		from = min(from, h.asked-int64(300*time.Millisecond))
	}
	to := t + int64(50*time.Millisecond)
	h := &histLines{x: x}
	x.histCalls(h, key, from, to)
	x.histFaults(h, key, from, to)
	x.histServers(h, key, from, to, involved)
	sort.Slice(h.ls, func(i, j int) bool { return h.ls[i].at < h.ls[j].at })
	var out []string
	for _, q := range involved {
		if q != nil {
			out = append(out, fmt.Sprintf("involved: %s, asked at %s, granted at %s, guaranteed until %s, %s at %s", q, x.since(q.asked), x.since(q.begin), x.since(q.gEnd()), q.how, x.since(q.end)))
		}
	}
	ls := h.ls
	if len(ls) > 250 {
		out = append(out, fmt.Sprintf("(%d lines before)", len(ls)-250))
		ls = ls[len(ls)-250:]
	}
	for _, l := range ls {
		out = append(out, l.s)
	}
	return out
}

// histCalls adds the holds of key, the limit changes, the Closes and the
// failed calls on key.
func (x *exploreRun) histCalls(h *histLines, key string, from, to int64) {
	for _, q := range x.holds {
		if q.key == key && q.begin <= to && q.gEnd() >= from {
			h.add(q.begin, "%s granted (asked at %s), guaranteed until %s, %s at %s", q, x.since(q.asked), x.since(q.gEnd()), q.how, x.since(q.end))
		}
	}
	for _, c := range x.limits {
		if key == kSem && c.start <= to && c.end >= from {
			h.add(c.start, "SetLimit(%d) on slot %d, until %s (nil: %v)", c.n, slots, x.since(c.end), c.ok)
		}
	}
	for _, c := range x.closes {
		if c.start <= to && c.end >= from {
			h.add(c.start, "Close of slot %d/%d, until %s (nil: %v)", c.slot, c.gen, x.since(c.end), c.ok)
		}
	}
	for _, c := range x.claims {
		if c.key == key && c.err != nil && !isErr(c.err, dlock.ErrClosed) && c.end <= to && c.end >= from {
			h.add(c.end, "%s %q (%s) on slot %d, called at %s, returned: %v", c.op, c.key, c.shape, c.slot, x.since(c.start), c.err)
		}
	}
}

// histFaults adds the faults on key's commands and the servers', repeats
// of one fault within 500ms on one line.
func (x *exploreRun) histFaults(h *histLines, key string, from, to int64) {
	type run struct {
		line, n int
		last    int64
	}
	runs := map[faultRec]*run{}
	for _, f := range x.injected {
		if (f.key != key && f.slot >= 0) || f.start > to || f.end < from {
			continue
		}
		k := faultRec{kind: f.kind, slot: f.slot, node: f.node, what: f.what}
		if r := runs[k]; r != nil && f.start-r.last < int64(500*time.Millisecond) {
			r.n++
			r.last = f.start
			h.ls[r.line].s = fmt.Sprintf("%s: fault: %s, slot %d node %d, %s (%d commands, the last at %s)", x.since(h.ls[r.line].at).Round(time.Microsecond), f.kind, f.slot, f.node, f.what, r.n, x.since(f.start))
			continue
		}
		runs[k] = &run{line: len(h.ls), n: 1, last: f.start}
		h.add(f.start, "fault: %s, slot %d node %d, %s, until %s", f.kind, f.slot, f.node, f.what, x.since(f.end))
	}
}

// histServers adds (with MONITOR) what the servers ran: the writes of the
// key itself (not of its counter, waiters or tombstones), and the scripts
// of the tokens of the holds involved; and what the slots sent of those
// tokens.
func (x *exploreRun) histServers(h *histLines, key string, from, to int64, involved []*hold) {
	var tokens []string
	for _, q := range involved {
		if q != nil {
			tokens = append(tokens, q.token)
		}
	}
	self := `"dlock:{` + key + `}"`
	for _, m := range x.ran(key, from, to) {
		if strings.Contains(m.text, "[0 lua]") && strings.Contains(m.text, self) && !strings.Contains(m.text, `"NX"`) || containsAny(m.text, tokens) {
			h.add(m.at, "node %d ran %s", m.node, m.text)
		}
	}
	x.mon.mu.Lock()
	defer x.mon.mu.Unlock()
	for _, m := range x.mon.sent {
		if m.key == key && m.at >= from && m.at <= to && containsAny(m.text, tokens) {
			h.add(m.at, "slot %d sent node %d %s", m.slot, m.node, m.text)
		}
	}
}
