package main

import (
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/dlocktest"
)

// TestRunKillGraceWhileRenewalsFail: with Redis frozen, the command gets
// SIGTERM at least --kill-grace before the lock could expire, so a TERM
// trap that needs most of the grace finishes; one that ignores TERM is
// killed before the lock could expire. The earliest expiry is not known to
// the test (the last confirmed renewal began before the freeze, at most one
// TTL/3 before it), so the bounds checked are the ones the freeze gives:
// TERM no later than freeze + TTL - grace, the group gone no later than
// freeze + TTL (with slack for a loaded machine only where it cannot hide
// the old behaviour, which sent SIGTERM about 50ms before the expiry).
func TestRunKillGraceWhileRenewalsFail(t *testing.T) {
	t.Parallel()
	const (
		ttl   = 3 * time.Second
		grace = time.Second
		trap  = 700 * time.Millisecond // what the TERM trap needs
	)
	for _, tc := range []struct {
		name, script string
	}{
		{"trap", `trap 'echo term; sleep 0.7; echo cleaned; exit 0' TERM; echo ready $$; while :; do sleep 0.05; done`},
		{"ignores", `trap 'echo term' TERM; echo ready $$; while :; do sleep 0.05; done`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := dlocktest.Start(t)
			p := startDlock(t, "run", "--redis", s.URL(), "--ttl", ttl.String(), "--kill-grace", grace.String(),
				"job", "--", "sh", "-c", tc.script)
			pid := p.waitPrefix(t, "ready ")
			frozen := time.Now()
			if err := s.Freeze(); err != nil {
				t.Fatal(err)
			}
			defer s.Thaw()
			p.waitLine(t, "term")
			term := time.Since(frozen)
			// dlock keeps stdout open until it exits, after a release that
			// the frozen Redis does not answer: the command's end is
			// measured by polling its shell's pid (a measurement, not a
			// synchronisation).
			var gone time.Duration
			for n, _ := strconv.Atoi(pid); ; time.Sleep(5 * time.Millisecond) {
				if syscall.Kill(n, 0) != nil {
					gone = time.Since(frozen)
					break
				}
				if time.Since(frozen) > 3*ttl {
					t.Fatalf("the command still runs %s after the freeze", 3*ttl)
				}
			}
			rest := p.waitEOF(t, 2*ttl)
			code := p.exitCode(t)
			t.Logf("freeze → SIGTERM %s → group gone %s (latest possible expiry: %s after the freeze); rest %q; stderr: %s",
				term.Round(time.Millisecond), gone.Round(time.Millisecond), ttl, rest, p.stderr.String())
			if term > ttl-grace {
				t.Errorf("SIGTERM %s after the freeze: later than --kill-grace (%s) before the latest possible expiry (%s)", term, grace, ttl)
			}
			if tc.name == "trap" && !strings.Contains(strings.Join(rest, "\n"), "cleaned") {
				t.Errorf("the TERM trap (%s of a %s grace) did not finish; output after TERM: %q", trap, grace, rest)
			}
			if gone > ttl+500*time.Millisecond {
				t.Errorf("the command's group was gone %s after the freeze, after the lock could have expired (%s)", gone, ttl)
			}
			if code != exitLockLost {
				t.Errorf("exit %d, want %d", code, exitLockLost)
			}
			if !strings.Contains(p.stderr.String(), "SIGTERM") {
				t.Errorf("stderr does not say the command was stopped: %q", p.stderr.String())
			}
		})
	}
}

// TestRunKillGraceMustFit: a grace longer than half the TTL could stop a
// command whose renewals are merely due; it is refused at start, saying
// what fits. Without --kill-grace, the default is cut to fit a short TTL.
func TestRunKillGraceMustFit(t *testing.T) {
	t.Parallel()
	s := dlocktest.Start(t)
	code, _, stderr := dlockRun(t, "run", "--redis", s.URL(), "--ttl", "4s", "--kill-grace", "3s", "job", "--", "true")
	if code != exitUsage || !strings.Contains(stderr, "at most 2s") {
		t.Errorf("--ttl 4s --kill-grace 3s: exit %d, stderr %q; want %d saying at most 2s", code, stderr, exitUsage)
	}
	if code, _, _ := dlockRun(t, "run", "--redis", s.URL(), "--ttl", "4s", "--kill-grace", "2s", "job", "--", "true"); code != 0 {
		t.Errorf("--ttl 4s --kill-grace 2s: exit %d, want 0", code)
	}
	if code, _, _ := dlockRun(t, "run", "--redis", s.URL(), "--ttl", "2s", "job", "--", "true"); code != 0 {
		t.Errorf("--ttl 2s without --kill-grace: exit %d, want 0", code)
	}
}
