package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/dlock-dev/dlock"
)

// clearScreen moves the cursor home and clears the terminal.
const clearScreen = "\x1b[H\x1b[2J"

// watchStatus is dlock status --watch: the status of key, again every
// interval until SIGINT or SIGTERM (or ctx) ends it, with status 0.
//
// On a terminal each refresh replaces the last, under a header line with the
// time; otherwise the refreshes follow one another, each under its header
// line, a blank line between them; with --json each is one JSON object on
// one line (NDJSON), with its time, and no header. Each refresh is one write
// to stdout. A refresh that finds Redis unavailable is reported on stderr
// and the watch goes on (the hint once, until a refresh succeeds again, when
// the output is not a terminal); Redis refusing the commands (78) or a bad
// key (64) ends it. It also ends, with 0, when stdout is a pipe that its
// reader closed (dlock status --watch --json job | jq ... | head -1).
func (c *cli) watchStatus(ctx context.Context, t *target, key string, asJSON bool, every time.Duration) int {
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
		st, out, err := snapshot(ctx, t, key)
		if ctx.Err() != nil {
			return exitOK // interrupted during the refresh: no half display
		}
		switch {
		case err == nil:
		case errors.Is(err, dlock.ErrInvalid):
			return c.usageError("status", "%s", errText(err))
		case errors.Is(err, dlock.ErrMisconfigured):
			return c.redisFailure(t, err) // waiting will not help
		}

		var buf bytes.Buffer
		switch {
		case asJSON:
			if err == nil {
				out.Time = now.Format("2006-01-02T15:04:05.000Z07:00")
				_ = json.NewEncoder(&buf).Encode(out)
			}
		default:
			if tty {
				buf.WriteString(clearScreen)
			} else if n > 0 {
				buf.WriteString("\n")
			}
			fmt.Fprintf(&buf, "Every %s: dlock status %q on %s, %s\n", every, key, t.describe(), now.Format(timeFormat))
			if tty {
				buf.WriteString("\n")
			}
			if err == nil {
				writeStatus(&buf, st, out)
			}
		}
		if buf.Len() > 0 {
			if _, werr := c.stdout.Write(buf.Bytes()); werr != nil {
				if errors.Is(werr, syscall.EPIPE) {
					return exitOK // the reader stopped watching
				}
				c.errorf("cannot write the status: %s", errText(werr))
				return exitFailure
			}
		}

		if err != nil {
			if c.reportRedisFailure(t, err, tty || !failing) < 0 {
				c.errorf("status of %q: %s", key, errText(err))
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
