package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/dlock-dev/dlock"
)

// clearScreen moves the cursor home and clears the terminal.
const clearScreen = "\x1b[H\x1b[2J"

// watchStatus is dlock status --watch: the status of key, again every
// interval until SIGINT or SIGTERM (or ctx) ends it, with status 0 (see
// watch).
func (c *cli) watchStatus(ctx context.Context, t *target, key string, asJSON bool, every time.Duration) int {
	w := watched{sub: "status", title: fmt.Sprintf("dlock status %q on %s", key, t.describe()), what: fmt.Sprintf("status of %q", key)}
	return c.watch(ctx, t, w, asJSON, every, func(ctx context.Context, now string) (any, func(io.Writer), error) {
		st, out, err := snapshot(ctx, t, key)
		if err != nil {
			return nil, nil, err
		}
		out.Time = now
		return out, func(w io.Writer) { writeStatus(w, st, out) }, nil
	})
}

// refresher reads what a watch shows, at now (its time in JSON): the JSON
// value and the text, nil when there is nothing to show, and an error (with
// something to show: a part of it).
type refresher func(ctx context.Context, now string) (js any, text func(io.Writer), err error)

// watched names what a watch shows: the subcommand (sub), the header
// line's title, and what an error is about; report, if not nil, reports a
// refresh's failure in place of reportRedisFailure.
type watched struct {
	sub, title, what string
	report           func(err error, hint bool) int
}

// watch shows what refresh reads, again every interval until SIGINT or
// SIGTERM (or ctx) ends it, with status 0: dlock status --watch and dlock
// list --watch.
//
// On a terminal each refresh replaces the last, under a header line with the
// time; otherwise the refreshes follow one another, each under its header
// line, a blank line between them; with --json each is one JSON object on
// one line (NDJSON), with its time, and no header. Each refresh is one write
// to stdout. A refresh that finds Redis unavailable is reported on stderr
// and the watch goes on (the hint once, until a refresh succeeds again, when
// the output is not a terminal); Redis refusing the commands (78) or a bad
// argument (64) ends it. It also ends, with 0, when stdout is a pipe that its
// reader closed (dlock status --watch --json job | jq ... | head -1).
func (c *cli) watch(ctx context.Context, t *target, w watched, asJSON bool, every time.Duration, refresh refresher) int {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	tty := !asJSON && isTerminal(c.stdout)
	timeFormat := "2006-01-02 15:04:05 MST"
	if every < time.Second {
		timeFormat = "2006-01-02 15:04:05.000 MST"
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	failing := false
	for n := 0; ; n++ {
		now := time.Now()
		js, text, err := refresh(ctx, now.Format(jsonTime))
		if ctx.Err() != nil {
			return exitOK // interrupted during the refresh: no half display
		}
		switch {
		case err == nil:
		case errors.Is(err, dlock.ErrInvalid):
			return c.usageError(w.sub, "%s", errText(err))
		case errors.Is(err, dlock.ErrMisconfigured):
			return c.redisFailure(t, err) // waiting will not help
		}

		var buf bytes.Buffer
		switch {
		case asJSON:
			if js != nil {
				_ = json.NewEncoder(&buf).Encode(js)
			}
		default:
			if tty {
				buf.WriteString(clearScreen)
			} else if n > 0 {
				buf.WriteString("\n")
			}
			fmt.Fprintf(&buf, "Every %s: %s, %s\n", every, w.title, now.Format(timeFormat))
			if tty {
				buf.WriteString("\n")
			}
			if text != nil {
				text(&buf)
			}
		}
		if buf.Len() > 0 {
			if _, werr := c.stdout.Write(buf.Bytes()); werr != nil {
				if errors.Is(werr, syscall.EPIPE) {
					return exitOK // the reader stopped watching
				}
				c.errorf("cannot write the %s: %s", w.sub, errText(werr))
				return exitFailure
			}
		}

		report := w.report
		if report == nil {
			report = func(err error, hint bool) int { return c.reportRedisFailure(t, err, hint) }
		}
		if err != nil {
			if report(err, tty || !failing) < 0 {
				c.errorf("%s: %s", w.what, errText(err))
			}
		}
		failing = err != nil

		select {
		case <-ctx.Done():
			return exitOK
		case <-tick.C:
		}
	}
}

// viewFlags are --json, --watch (-w) and --interval, of dlock status and
// dlock list: how they show what they read.
type viewFlags struct {
	asJSON, watch bool
	interval      time.Duration
}

func (v *viewFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&v.asJSON, "json", false, "print JSON")
	fs.BoolVar(&v.watch, "watch", false, "refresh until interrupted")
	fs.BoolVar(&v.watch, "w", false, "refresh until interrupted")
	fs.DurationVar(&v.interval, "interval", time.Second, "time between refreshes, with --watch")
}

// check returns the exit status of a usage error of sub's view flags (args:
// what follows them in the example of --interval), or -1.
func (v *viewFlags) check(c *cli, fs *flag.FlagSet, sub, args string) int {
	switch {
	case v.interval <= 0:
		return c.usageError(sub, "--interval %s must be longer than 0: write, for example, 500ms, 1s or 5s", v.interval)
	case flagSet(fs, "interval") && !v.watch:
		return c.usageError(sub, "--interval goes with --watch: dlock %s --watch --interval %s%s", sub, v.interval, args)
	}
	return -1
}
