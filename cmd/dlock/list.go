package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/dlock-dev/dlock"
)

// listJSON is the output of dlock list --json.
type listJSON struct {
	Time    string       `json:"time,omitempty"` // with --watch: when the refresh began
	Pattern string       `json:"pattern"`
	Locks   []statusJSON `json:"locks"`
	// Complete is false when a node could not be scanned whole: the
	// locks that only it holds may be missing (the error is on stderr).
	Complete bool `json:"complete"`
}

// list is dlock list.
func (c *cli) list(ctx context.Context, args []string) int {
	fs := newFlagSet("list")
	var rf redisFlags
	rf.register(fs, c)
	var view viewFlags
	view.register(fs)
	asJSON, interval, watch := &view.asJSON, &view.interval, &view.watch
	pos, code := c.positionals(fs, args)
	if code >= 0 {
		return code
	}
	if len(pos) > 1 {
		return c.usageError("list", "one PATTERN only, got %q (quote a pattern with * so that the shell leaves it alone)", pos)
	}
	pattern := "*"
	if len(pos) == 1 && pos[0] != "" {
		pattern = pos[0]
	}
	if code := view.check(c, fs, "list", ""); code >= 0 {
		return code
	}
	t, code := c.open(ctx, "list", &rf)
	if t == nil {
		return code
	}
	defer t.Close()
	if code := c.inspected(t); code >= 0 {
		return code
	}
	c.debugf("listing the locks %q on %s", pattern, t.describe())
	refresh := func(ctx context.Context, now string) (any, func(io.Writer), error) {
		locks, err := t.locker.List(ctx, pattern)
		out := listOut(locks, pattern, err == nil)
		out.Time = now
		return out, func(w io.Writer) { writeList(w, locks, out) }, err
	}
	report := func(err error, hint bool) int { return c.listFailure(t, err, hint) }
	if *watch {
		w := watched{sub: "list", title: fmt.Sprintf("dlock list %q on %s", pattern, t.describe()), what: fmt.Sprintf("list %q", pattern),
			report: report}
		return c.watch(ctx, t, w, *asJSON, *interval, refresh)
	}
	js, text, err := refresh(ctx, "")
	if err != nil && errors.Is(err, dlock.ErrInvalid) {
		return c.usageError("list", "%s", errText(err))
	}
	if *asJSON {
		enc := json.NewEncoder(c.stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(js)
	} else {
		text(c.stdout)
	}
	if err != nil {
		if code := report(err, true); code >= 0 {
			return code
		}
		c.errorf("list %q: %s", pattern, errText(err))
		return exitFailure
	}
	return exitOK
}

// listFailure reports the failure of a list as reportRedisFailure does,
// but for nodes that could not be scanned, which make it incomplete
// whatever the quorum (69).
func (c *cli) listFailure(t *target, err error, hint bool) int {
	if !errors.Is(err, dlock.ErrUnavailable) {
		return c.reportRedisFailure(t, err, hint)
	}
	c.errorf("the list is incomplete, some nodes could not be scanned whole: %s", nodeErrorsText(err))
	if hint {
		c.hintf("check --redis or $DLOCK_REDIS, and that the servers are up and answering")
	}
	return exitUnavailable
}

// listOut is the JSON form of a list.
func listOut(locks []dlock.Status, pattern string, complete bool) listJSON {
	out := listJSON{Pattern: pattern, Locks: make([]statusJSON, 0, len(locks)), Complete: complete}
	for _, st := range locks {
		out.Locks = append(out.Locks, statusOut(st))
	}
	return out
}

// writeList writes the text form of a list to out: one line per lock.
func writeList(out io.Writer, locks []dlock.Status, js listJSON) {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "LOCK\tSHAPE\tHELD\tTTL\tFENCE\tHOLDERS\tWAITERS\tASKED\n")
	for i, st := range locks {
		ttl := "-"
		if st.Held || st.TTL != 0 {
			ttl = ttlText(st.TTL)
		}
		asked := "-"
		if st.Asked != nil {
			asked = fmt.Sprintf("%q by %s", st.Asked.Reason, st.Asked.From)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", quoteName(st.Key), shape(st), heldText(st, js.Locks[i]), ttl,
			st.Fence, holdersText(st), waitersText(st), asked)
	}
	_ = w.Flush()
	what := "locks"
	if len(locks) == 1 {
		what = "lock"
	}
	fmt.Fprintf(out, "%d %s matching %q\n", len(locks), what, js.Pattern)
	if !js.Complete {
		fmt.Fprintf(out, "(incomplete: a node could not be scanned whole; see the error)\n")
	}
}

// quoteName shows a lock's name as is, or quoted when it has spaces or
// characters that a terminal does not show.
func quoteName(name string) string {
	if strings.ContainsFunc(name, func(r rune) bool { return r <= ' ' || r == 0x7f || r == '"' }) {
		return fmt.Sprintf("%q", name)
	}
	return name
}

// shape names what kind of lock st is.
func shape(st dlock.Status) string {
	switch {
	case st.Shared:
		return "shared"
	case st.Limit > 1:
		return fmt.Sprintf("semaphore of %d", st.Limit)
	case st.Held:
		return "lock"
	}
	return "-" // free: it has waiters only
}

// heldText says whether st is held, and on several nodes how many hold it.
func heldText(st dlock.Status, js statusJSON) string {
	text := "no"
	switch {
	case js.Reserved:
		text = "reserved"
	case st.Held:
		text = "yes"
	}
	if len(st.Nodes) > 1 {
		held := 0
		for _, n := range st.Nodes {
			if n.Err == nil && n.Held {
				held++
			}
		}
		text += fmt.Sprintf(" (%d/%d nodes)", held, len(st.Nodes))
	}
	return text
}

// holdersText names the holders of st (their metadata), at most 3.
func holdersText(st dlock.Status) string {
	if len(st.Permits) > 0 {
		names := make([]string, len(st.Permits))
		for i, p := range st.Permits {
			names[i] = p.Metadata
		}
		return fmt.Sprintf("%d: %s", len(names), firstNames(names))
	}
	if st.Held && st.Metadata != "" {
		return quoteName(st.Metadata)
	}
	return "-"
}

// waitersText counts the waiters of st, and names the first 3 in queue
// order.
func waitersText(st dlock.Status) string {
	if st.Waiters == 0 {
		return "0"
	}
	names := make([]string, len(st.Queue))
	for i, q := range st.Queue {
		names[i] = q.Metadata
	}
	if len(names) == 0 {
		return fmt.Sprint(st.Waiters)
	}
	return fmt.Sprintf("%d: %s", st.Waiters, firstNames(names))
}

// firstNames shows the first 3 of names ("?" for one without metadata),
// and how many more there are.
func firstNames(names []string) string {
	var shown []string
	for i, n := range names {
		if i == 3 {
			shown = append(shown, fmt.Sprintf("+%d", len(names)-3))
			break
		}
		if n == "" {
			n = "?"
		}
		shown = append(shown, quoteName(n))
	}
	return strings.Join(shown, ", ")
}
