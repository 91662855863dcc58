package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/quorum"
)

// keyArg parses the flags of an admin subcommand, before or after its one
// KEY argument, and returns the key, or the exit status to end with.
func (c *cli) keyArg(fs *flag.FlagSet, args []string) (string, int) {
	pos, code := c.positionals(fs, args)
	if code >= 0 {
		return "", code
	}
	switch {
	case len(pos) == 0:
		return "", c.usageError(fs.Name(), "missing KEY: dlock %s [flags] KEY", fs.Name())
	case len(pos) > 1:
		return "", c.usageError(fs.Name(), "one KEY only, got %q", pos)
	case pos[0] == "":
		return "", c.usageError(fs.Name(), "KEY must not be empty")
	}
	return pos[0], -1
}

// positionals parses the flags of a subcommand, before, between or after
// its positional arguments (all of them after "--"), and returns those
// arguments, or the exit status to end with.
func (c *cli) positionals(fs *flag.FlagSet, args []string) ([]string, int) {
	var pos []string
	for {
		if code := c.parseFlags(fs, args); code >= 0 {
			return nil, code
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, -1
		}
		if i := len(args) - len(rest); i > 0 && args[i-1] == "--" {
			return append(pos, rest...), -1 // all positional after --
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
}

// statusJSON is the output of dlock status --json.
type statusJSON struct {
	Time     string       `json:"time,omitempty"` // with --watch: when the refresh began
	Key      string       `json:"key"`
	Held     bool         `json:"held"`
	Reserved bool         `json:"reserved"`
	TTLms    int64        `json:"ttl_ms"`
	Fence    uint64       `json:"fence"`
	Waiters  int64        `json:"waiters"`
	Queue    []waiterJSON `json:"queue,omitempty"`
	Metadata string       `json:"metadata,omitempty"`
	Limit    int          `json:"limit,omitempty"`
	Shared   bool         `json:"shared,omitempty"`
	Writers  int64        `json:"writers,omitempty"`
	Permits  []permitJSON `json:"permits,omitempty"`
	Asked    *askedJSON   `json:"asked,omitempty"`
	Quorum   int          `json:"quorum"`
	Nodes    []nodeJSON   `json:"nodes"`
}

// permitJSON is one holder of a semaphore (dlock run --limit), or a shared
// holder (--shared).
type permitJSON struct {
	Metadata string `json:"metadata,omitempty"`
	TTLms    int64  `json:"ttl_ms"`
	Fence    uint64 `json:"fence,omitempty"`
}

// waiterJSON is one waiting process (dlock run --wait, or a program's
// Acquire), in queue order.
type waiterJSON struct {
	Metadata string `json:"metadata,omitempty"`
	Since    string `json:"since"`
	Shared   bool   `json:"shared,omitempty"`
}

// askedJSON is a pending release request (dlock request).
type askedJSON struct {
	Reason string `json:"reason"`
	From   string `json:"from"`
}

type nodeJSON struct {
	Addr     string `json:"addr"`
	Held     bool   `json:"held"`
	Reserved bool   `json:"reserved"`
	TTLms    int64  `json:"ttl_ms"`
	Fence    uint64 `json:"fence"`
	Waiters  int64  `json:"waiters"`
	Error    string `json:"error,omitempty"`
}

// status is dlock status.
func (c *cli) status(ctx context.Context, args []string) int {
	fs := newFlagSet("status")
	var rf redisFlags
	rf.register(fs, c)
	var view viewFlags
	view.register(fs)
	asJSON, interval := &view.asJSON, &view.interval
	held := fs.Bool("held", false, "exit 0 if the lock is held, 3 if it is free")
	key, code := c.keyArg(fs, args)
	if code >= 0 {
		return code
	}
	if code := view.check(c, fs, "status", " "+key); code >= 0 {
		return code
	}
	watch := view.watch
	if *held && watch {
		return c.usageError("status", "--held answers once; it does not go with --watch")
	}
	t, code := c.open(ctx, "status", &rf)
	if t == nil {
		return code
	}
	defer t.Close()
	if code := c.inspected(t); code >= 0 {
		return code
	}
	c.debugf("reading the status of %q from %s", key, t.describe())
	if watch {
		return c.watchStatus(ctx, t, key, *asJSON, *interval)
	}
	st, out, err := snapshot(ctx, t, key)
	if err != nil {
		if errors.Is(err, dlock.ErrInvalid) {
			return c.usageError("status", "%s", errText(err))
		}
		if code := c.redisFailure(t, err); code >= 0 {
			return code
		}
		c.errorf("status of %q: %s", key, errText(err))
		return exitFailure
	}
	switch {
	case *asJSON:
		enc := json.NewEncoder(c.stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(out)
	case !c.quiet || !*held:
		writeStatus(c.stdout, st, out)
	}
	if *held && !st.Held {
		return exitNotHeld
	}
	return exitOK
}

// jsonTime is the layout of the times of the JSON output.
const jsonTime = "2006-01-02T15:04:05.000Z07:00"

// snapshot reads the status of key, and returns it also in its JSON form.
func snapshot(ctx context.Context, t *target, key string) (dlock.Status, statusJSON, error) {
	st, err := t.locker.Status(ctx, key)
	if err != nil {
		return st, statusJSON{}, err
	}
	return st, statusOut(st), nil
}

// statusOut is the JSON form of st.
func statusOut(st dlock.Status) statusJSON {
	out := statusJSON{Key: st.Key, Held: st.Held, TTLms: st.TTL.Milliseconds(), Fence: st.Fence, Metadata: st.Metadata,
		Waiters: st.Waiters, Quorum: quorum.For(len(st.Nodes), st.Limit), Nodes: make([]nodeJSON, len(st.Nodes)), Limit: st.Limit,
		Shared: st.Shared, Writers: st.Writers}
	for _, p := range st.Permits {
		out.Permits = append(out.Permits, permitJSON{Metadata: p.Metadata, TTLms: p.TTL.Milliseconds(), Fence: p.Fence})
	}
	for _, w := range st.Queue {
		out.Queue = append(out.Queue, waiterJSON{Metadata: w.Metadata, Since: w.Since.Format(jsonTime), Shared: w.Shared})
	}
	if st.Asked != nil {
		out.Asked = &askedJSON{Reason: st.Asked.Reason, From: st.Asked.From}
	}
	reserved := 0
	for i, n := range st.Nodes {
		out.Nodes[i] = nodeJSON{Addr: n.Addr, Held: n.Held, Reserved: n.Reserved,
			TTLms: n.TTL.Milliseconds(), Fence: n.Fence, Waiters: n.Waiters}
		if n.TTL < 0 {
			out.Nodes[i].TTLms = -1
		}
		if n.Err != nil {
			out.Nodes[i].Error = errText(n.Err)
		}
		if n.Reserved {
			reserved++
		}
	}
	out.Reserved = st.Held && reserved >= out.Quorum
	return out
}

// writeStatus writes the text form of a status to w.
func writeStatus(out io.Writer, st dlock.Status, js statusJSON) {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "key:\t%s\n", st.Key)
	switch {
	case js.Reserved:
		fmt.Fprintf(w, "held:\treserved for a woken waiter, which takes it within moments\n")
	case st.Held:
		fmt.Fprintf(w, "held:\tyes, %s left\n", ttlText(st.TTL))
	default:
		fmt.Fprintf(w, "held:\tno\n")
	}
	if st.Held && st.Metadata != "" && st.Limit == 0 {
		fmt.Fprintf(w, "holder:\t%s\n", st.Metadata)
	}
	if st.Limit > 0 || st.Shared {
		if st.Shared {
			fmt.Fprintf(w, "shared:\t%d holders\n", len(st.Permits))
		} else {
			fmt.Fprintf(w, "permits:\t%d of %d taken\n", len(st.Permits), st.Limit)
		}
		for _, p := range st.Permits {
			holder := p.Metadata
			if holder == "" {
				holder = "(no metadata)"
			}
			fence := ""
			if p.Fence > 0 {
				fence = fmt.Sprintf(", fence %d", p.Fence)
			}
			fmt.Fprintf(w, "  holder:\t%s, %s left%s\n", holder, ttlText(p.TTL), fence)
		}
	}
	if st.Asked != nil {
		fmt.Fprintf(w, "asked:\tto release, by %s: %q\n", st.Asked.From, st.Asked.Reason)
	}
	fmt.Fprintf(w, "fence:\t%d\t(the counter: at least the latest acquisition's fence)\n", st.Fence)
	fmt.Fprintf(w, "waiters:\t%d\n", st.Waiters)
	for _, q := range st.Queue {
		who := q.Metadata
		if who == "" {
			who = "(no metadata)"
		}
		if q.Shared {
			who += " (shared)"
		}
		fmt.Fprintf(w, "  waiter:\t%s, waiting %s (since %s)\n", who, ttlText(max(time.Since(q.Since), 0)), q.Since.Local().Format("15:04:05"))
	}
	if st.Writers > 0 {
		fmt.Fprintf(w, "writers:\t%d waiting, no new shared holds until they have had it\n", st.Writers)
	}
	if len(st.Nodes) > 1 {
		fmt.Fprintf(w, "nodes:\t%d, quorum %d\n\n", len(st.Nodes), js.Quorum)
		fmt.Fprintf(w, "  NODE\tHELD\tTTL\tFENCE\tWAITERS\n")
		var failed []string
		for _, n := range st.Nodes {
			if n.Err != nil {
				fmt.Fprintf(w, "  %s\tno answer\t-\t-\t-\n", n.Addr)
				failed = append(failed, fmt.Sprintf("  %s: %s\n", n.Addr, errText(n.Err)))
				continue
			}
			held := "no"
			if n.Reserved {
				held = "reserved"
			} else if n.Held {
				held = "yes"
			}
			ttl := "-"
			if n.Held {
				ttl = ttlText(n.TTL)
			}
			fmt.Fprintf(w, "  %s\t%s\t%s\t%d\t%d\n", n.Addr, held, ttl, n.Fence, n.Waiters)
		}
		_ = w.Flush()
		if len(failed) > 0 {
			fmt.Fprintf(out, "\n%s", strings.Join(failed, ""))
		}
	}
	_ = w.Flush()
}

// ttlText shows a remaining TTL; a key without one was not set by dlock.
func ttlText(d time.Duration) string {
	if d < 0 {
		return "no TTL (not a dlock lock?)"
	}
	if d >= time.Second {
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Millisecond).String()
}

// release is dlock release --force, and dlock release --token (see
// withToken).
func (c *cli) release(ctx context.Context, args []string) int {
	fs := newFlagSet("release")
	var rf redisFlags
	rf.register(fs, c)
	force := fs.Bool("force", false, "delete whoever holds it")
	token := fs.String("token", "", "release only if held by this token")
	var shape shapeFlags
	shape.register(fs)
	key, code := c.keyArg(fs, args)
	if code >= 0 {
		return code
	}
	switch {
	case *force && flagSet(fs, "token"):
		return c.usageError("release", "--force and --token do not combine: --token releases only the hold of that token, --force whoever holds it")
	case flagSet(fs, "token") && *token == "":
		return c.usageError("release", "--token needs the token that dlock acquire printed")
	case flagSet(fs, "token"):
		return c.withToken(ctx, fs, &rf, &shape, "release", key, *token, releaseTTL)
	case flagSet(fs, "limit") || flagSet(fs, "shared"):
		return c.usageError("release", "--limit and --shared go with --token; --force deletes every holder of %q", key)
	case !*force:
		return c.usageError("release", "release deletes the lock %q whoever holds it; add --force to confirm (or --token T to release the hold of that token only)", key)
	}
	t, code := c.open(ctx, "release", &rf)
	if t == nil {
		return code
	}
	defer t.Close()
	if code := c.inspected(t); code >= 0 {
		return code
	}
	c.debugf("deleting the lock %q on %s", key, t.describe())
	// What is about to be deleted, to say so; a snapshot, best effort.
	st, _ := t.locker.Status(ctx, key)
	n, err := t.locker.ForceRelease(ctx, key)
	if err != nil && errors.Is(err, dlock.ErrInvalid) {
		return c.usageError("release", "%s", errText(err))
	}
	if err != nil && n == 0 {
		if code := c.redisFailure(t, err); code >= 0 {
			return code
		}
	}
	switch {
	case n == 0:
		fmt.Fprintf(c.stdout, "dlock: lock %q was not held; nothing deleted\n", key)
	default:
		what := fmt.Sprintf("fence %d", st.Fence)
		if st.Held && st.TTL > 0 {
			what += fmt.Sprintf(", %s left", ttlText(st.TTL))
		}
		fmt.Fprintf(c.stdout, "dlock: deleted lock %q on %d of %d node(s) (%s)\n", key, n, len(t.clients), what)
		c.warnf("a live holder sees its lock lost at its next renewal, or at its release (dlock run then exits 76), and may act as the holder until then")
	}
	if err != nil {
		c.errorf("some nodes could not be reached: %s", errText(err))
		return exitFailure
	}
	return exitOK
}
