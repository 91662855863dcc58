package history

// What the servers ran, for the histories of violations: with
// $DLOCK_EXPLORE_MONITOR=1 the explorer reads each server's MONITOR and
// keeps the writes to the lock keys (the scripts' own commands, as Redis
// ran them, in its order), so that a history shows which command, of which
// token, freed a key or cut its TTL.

import (
	"bufio"
	"fmt"
	"net"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
)

// monLine is one command a server ran.
type monLine struct {
	at   int64
	node int
	text string
}

type monitors struct {
	mu    sync.Mutex
	lines []monLine
	sent  []sentLine
}

// monitorWrites are the commands kept (scripts', and their writes).
var monitorWrites = []string{`"HSET"`, `"SET"`, `"DEL"`, `"PEXPIRE"`, `"PEXPIREAT"`, `"ZADD"`, `"ZREM"`, `"ZREMRANGEBYSCORE"`, `"evalsha"`, `"eval"`}

// startMonitors reads each server's MONITOR until the run stops.
func (x *exploreRun) startMonitors() {
	for i, a := range x.addrs {
		go x.monitor(i, a)
	}
}

func (x *exploreRun) monitor(i int, addr string) {
	for !x.stopped() {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		go func() {
			<-x.stop
			c.Close()
		}()
		fmt.Fprintf(c, "MONITOR\r\n")
		r := bufio.NewReaderSize(c, 1<<16)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				break
			}
			x.monitorLine(i, line)
		}
		c.Close()
	}
}

// monitorLine keeps a line of MONITOR ("+SECONDS.MICROS [DB ADDR] ...").
func (x *exploreRun) monitorLine(i int, line string) {
	sp := strings.IndexByte(line, ' ')
	if len(line) < 2 || line[0] != '+' || sp < 0 {
		return
	}
	keep := false
	for _, w := range monitorWrites {
		if strings.Contains(line[sp:], w) {
			keep = true
			break
		}
	}
	if !keep {
		return
	}
	ts, err := strconv.ParseFloat(line[1:sp], 64)
	if err != nil {
		return
	}
	text := strings.TrimSpace(line[sp+1:])
	for sha, name := range scriptNames {
		if s, ok := sha.(string); ok && len(s) == 40 {
			text = strings.Replace(text, `"`+s+`"`, name, 1)
		}
	}
	if len(text) > 220 {
		text = text[:220] + "…"
	}
	x.mon.mu.Lock()
	defer x.mon.mu.Unlock()
	if len(x.mon.lines) >= 400000 {
		x.mon.lines = append(x.mon.lines[:0], x.mon.lines[200000:]...)
	}
	x.mon.lines = append(x.mon.lines, monLine{at: int64(ts * 1e9), node: i, text: text})
}

// ran are the lines of key that the servers ran in [from, to].
func (x *exploreRun) ran(key string, from, to int64) []monLine {
	x.mon.mu.Lock()
	defer x.mon.mu.Unlock()
	tag := "{" + key + "}"
	var out []monLine
	for _, l := range x.mon.lines {
		if l.at >= from && l.at <= to && strings.Contains(l.text, tag) {
			out = append(out, l)
		}
	}
	return out
}

// sentLine is a command the wrapper sent, with $DLOCK_EXPLORE_MONITOR=1:
// its slot, script and first argument (a token, mostly).
type sentLine struct {
	at         int64
	slot, node int
	key, text  string
}

// noteSent records cmds sent by slot s to node n (MONITOR runs only).
func (x *exploreRun) noteSent(s, n int, cmds [][]any, kind string) {
	if !x.monitoring {
		return
	}
	args := cmds[0]
	text := scriptOf(cmds)
	if k, ok := node0Int(args); ok && len(args) > 3+k {
		text += fmt.Sprintf(" %v", args[3+k])
		// The token, where it is not the first argument.
		for _, a := range args[4+k:] {
			if s, ok := a.(string); ok && len(s) == 32 && strings.Trim(s, "0123456789abcdef") == "" {
				text += " " + s
				break
			}
		}
	}
	if kind != "" {
		text += " [" + kind + "]"
	}
	if strings.HasPrefix(text, "release.lua") || strings.HasPrefix(text, "unlock.lua") {
		text += " from " + callers()
	}
	x.mon.mu.Lock()
	defer x.mon.mu.Unlock()
	if len(x.mon.sent) >= 400000 {
		x.mon.sent = append(x.mon.sent[:0], x.mon.sent[200000:]...)
	}
	x.mon.sent = append(x.mon.sent, sentLine{at: now(), slot: s, node: n, key: keyOf(args), text: text})
}

// node0Int is the number of keys of an EVALSHA or EVAL command.
func node0Int(args []any) (int, bool) {
	name, _ := args[0].(string)
	if len(args) < 3 || (!strings.EqualFold(name, "evalsha") && !strings.EqualFold(name, "eval")) {
		return 0, false
	}
	switch v := args[2].(type) {
	case string:
		n, err := strconv.Atoi(v)
		return n, err == nil
	case int:
		return v, true
	}
	return 0, false
}

// callers names the library's functions on the stack, innermost first.
func callers() string {
	pcs := make([]uintptr, 32)
	n := runtime.Callers(3, pcs)
	frames := runtime.CallersFrames(pcs[:n])
	var names []string
	for {
		f, more := frames.Next()
		if strings.Contains(f.Function, "dlock-dev/dlock.") {
			names = append(names, strings.TrimPrefix(f.Function, "github.com/dlock-dev/dlock."))
		}
		if !more {
			break
		}
	}
	return strings.Join(names, " < ")
}

// checkDeadTokens (with MONITOR): no server sets a key to a token after
// its hold was released (Release returned nil) once it ran a release of
// that token (the release buries the token where a command of the hold
// may still run: such a command, run after it, is refused); and a key set
// to a dead token by a command that ran before the release reached that
// node (a command sent before the release, on a node that the Release did
// not wait for) is cleared within deadTokenBound. The servers' own record,
// not the library's.
func (x *exploreRun) checkDeadTokens() {
	if !x.monitoring {
		return
	}
	freed := map[string]*hold{}
	for _, h := range x.holds {
		if h.free != 0 {
			freed[h.token] = h
		}
	}
	x.mon.mu.Lock()
	lines := x.mon.lines
	x.mon.mu.Unlock()
	type nodeToken struct {
		node  int
		token string
	}
	released := map[nodeToken]int64{} // the first release of the token a node ran after its Release began
	seen := map[string]bool{}
	for j, l := range lines {
		if !strings.Contains(l.text, "[0 lua]") && (strings.Contains(l.text, "release.lua") || strings.Contains(l.text, "unlock.lua")) {
			for _, q := range hexToken.FindAllString(l.text, -1) {
				tok := strings.Trim(q, `"`)
				if h := freed[tok]; h != nil && l.at >= h.end {
					if _, ok := released[nodeToken{l.node, tok}]; !ok {
						released[nodeToken{l.node, tok}] = l.at
					}
				}
			}
			continue
		}
		tok := setToken(l.text)
		h := freed[tok]
		if h == nil || l.at <= h.free || seen[tok] {
			continue
		}
		if r, ok := released[nodeToken{l.node, tok}]; ok && r < l.at {
			seen[tok] = true
			x.report("dead token", l.at, h.key, []*hold{h}, "node %d set %q to the token of %s %s after its Release returned nil, after it ran a release of it", l.node, h.key, h, time.Duration(l.at-h.free).Round(time.Millisecond))
			continue
		}
		if until, cleared := x.clearedAfter(lines[j+1:], l.node, h.key, tok, l.at); !cleared {
			seen[tok] = true
			x.report("dead token", l.at, h.key, []*hold{h}, "node %d set %q to the token of %s %s after its Release returned nil, not cleared by %s", l.node, h.key, h, time.Duration(l.at-h.free).Round(time.Millisecond), x.since(until))
		}
	}
}

// hexToken is a token in a line of MONITOR.
var hexToken = regexp.MustCompile(`"[0-9a-f]{32}"`)

// deadTokenBound is how soon a dead token that a command sent before its
// release set must be cleared: the clean-up runs once that command's
// answer came (or as soon as the node answers again), with room for a
// loaded machine.
const deadTokenBound = 2 * time.Second

// setToken is the token a line sets a lock key to (a script's SET, not a
// SET NX: an acquisition's first grant), or "".
func setToken(text string) string {
	i := strings.Index(text, `[0 lua] "SET" "dlock:{`)
	if i < 0 || strings.Contains(text, `"NX"`) {
		return ""
	}
	f := strings.Fields(text[i:])
	if len(f) < 5 {
		return ""
	}
	return strings.Trim(f[4], `"`)
}

// clearedAfter reports whether node cleared key of token within
// deadTokenBound of at (lines are what the servers ran after): deleted it,
// or set it to another value; a run that ended sooner counts as cleared.
func (x *exploreRun) clearedAfter(lines []monLine, node int, key, token string, at int64) (int64, bool) {
	until := at + int64(deadTokenBound)
	self := `"dlock:{` + key + `}"`
	for _, l := range lines {
		if l.at > until {
			return until, false
		}
		if l.node != node || !strings.Contains(l.text, "[0 lua]") || !strings.Contains(l.text, self) {
			continue
		}
		if strings.Contains(l.text, `"DEL"`) || strings.Contains(l.text, `"SET"`) && !strings.Contains(l.text, token) {
			return until, true
		}
	}
	return until, true // the run ended first
}
