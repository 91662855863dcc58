package main

import (
	"context"
	"os"
	"path/filepath"
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

// TestRunKillGraceMustFit: a grace that leaves a renewal less than its
// node timeout could stop a command whose renewals are merely slow; it is
// refused at start, saying what fits (1.774s for a TTL of 4s: 2·TTL/3, less
// the drift, the node timeout and the kill margin). Without --kill-grace,
// the default is cut to fit a short TTL.
func TestRunKillGraceMustFit(t *testing.T) {
	t.Parallel()
	s := dlocktest.Start(t)
	if got := maxGrace(4 * time.Second); got != 1774*time.Millisecond {
		t.Errorf("maxGrace(4s) = %s, want 1.774s", got)
	}
	for _, ttl := range []time.Duration{10 * time.Millisecond, 300 * time.Millisecond, time.Second, 30 * time.Second} {
		if g := maxGrace(ttl); g <= 0 || g >= 2*ttl/3 {
			t.Errorf("maxGrace(%s) = %s, want within (0, 2·TTL/3)", ttl, g)
		}
	}
	code, _, stderr := dlockRun(t, "run", "--redis", s.URL(), "--ttl", "4s", "--kill-grace", "3s", "job", "--", "true")
	if code != exitUsage || !strings.Contains(stderr, "at most 1.774s") {
		t.Errorf("--ttl 4s --kill-grace 3s: exit %d, stderr %q; want %d saying at most 1.774s", code, stderr, exitUsage)
	}
	if code, _, _ := dlockRun(t, "run", "--redis", s.URL(), "--ttl", "4s", "--kill-grace", "1774ms", "job", "--", "true"); code != 0 {
		t.Errorf("--ttl 4s --kill-grace 1774ms: exit %d, want 0", code)
	}
	if code, _, stderr := dlockRun(t, "run", "--redis", s.URL(), "--ttl", "2s", "--limit", "0", "job", "--", "true"); code != exitUsage || !strings.Contains(stderr, "--limit 0") {
		t.Errorf("--ttl 2s --limit 0: exit %d, stderr %q; want %d from dlock's own check", code, stderr, exitUsage)
	}
	if code, _, _ := dlockRun(t, "run", "--redis", s.URL(), "--ttl", "2s", "job", "--", "true"); code != 0 {
		t.Errorf("--ttl 2s without --kill-grace: exit %d, want 0", code)
	}
}

// TestRunHealthyNotStopped: renewals that are confirmed within their node
// timeout never stop the command, at a short TTL (whose default grace is
// cut to fit) and behind a slow network path.
func TestRunHealthyNotStopped(t *testing.T) {
	t.Parallel()
	s := dlocktest.Start(t)
	for _, tc := range []struct {
		oneWay time.Duration
		args   []string
	}{
		// 600ms, not shorter: the grace leaves a renewal its node timeout
		// (TTL/5, here 120ms), and a loaded 2-core CI machine running the
		// other packages' tests can hold a renewal up that long (at 300ms,
		// 60ms, one run stopped the command).
		{0, []string{"--ttl", "600ms"}},
		{60 * time.Millisecond, []string{"--ttl", "1s"}},                           // node timeout 200ms
		{150 * time.Millisecond, []string{"--ttl", "2s", "--kill-grace", "800ms"}}, // node timeout 400ms
	} {
		p, err := dlocktest.NewProxy(s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		args := append([]string{"run", "--redis", "redis://" + p.Addr()}, tc.args...)
		d := startDlock(t, append(args, "job", "--", "sh", "-c", "echo ready; sleep 2.5")...)
		d.waitLine(t, "ready")
		p.SetLatency(tc.oneWay)
		d.waitEOF(t, 15*time.Second)
		if code := d.exitCode(t); code != 0 {
			t.Errorf("round trip %s %v, renewals confirmed: exit %d; stderr %s", 2*tc.oneWay, tc.args, code, d.stderr.String())
		}
	}
}

// TestRunSignalWhileCheckingURLs: a signal that comes once the lock is
// acquired, while the check of the URLs still waits for a frozen node,
// ends the run: the command does not run, and the lock is released.
func TestRunSignalWhileCheckingURLs(t *testing.T) {
	t.Parallel()
	ss := dlocktest.StartN(t, 3)
	if err := ss[2].Freeze(); err != nil {
		t.Fatal(err)
	}
	defer ss[2].Thaw()
	p := startDlock(t, "run", "-v", "--redis", ss[0].URL()+","+ss[1].URL()+","+ss[2].URL(), "job", "--", "echo", "ran")
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(p.stderr.String(), "checking the Redis URLs") {
		if time.Now().After(deadline) {
			t.Fatalf("no acquisition while the URLs are checked; stderr: %s", p.stderr.String())
		}
		time.Sleep(5 * time.Millisecond) // polls dlock's output, which has no channel
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	rest := p.waitEOF(t, 10*time.Second)
	if code := p.exitCode(t); code != 128+int(syscall.SIGTERM) || len(rest) > 0 {
		t.Errorf("exit %d, output %q; want %d and no run; stderr: %s", code, rest, 128+int(syscall.SIGTERM), p.stderr.String())
	}
	if !strings.Contains(p.stderr.String(), "the command did not run") {
		t.Errorf("stderr does not say the command did not run: %s", p.stderr.String())
	}
}

// TestRunForceReleaseGrace: a lock that a quorum says is gone (release
// --force) has no validity left to protect: the command gets SIGTERM and
// then its whole --kill-grace before SIGKILL, so that its TERM trap, which
// needs part of the grace, finishes (it writes a file); one that ignores
// SIGTERM is killed once the grace is over. Exit 76 either way.
func TestRunForceReleaseGrace(t *testing.T) {
	t.Parallel()
	const (
		ttl   = 3 * time.Second // renewed every second: the loss is seen within one
		grace = time.Second
	)
	for _, tc := range []struct {
		name, script string
	}{
		{"trap", `trap 'sleep 0.3; echo cleaned > "$OUT"; exit 0' TERM; echo ready; while :; do sleep 0.05; done`},
		{"ignores", `trap 'echo term > "$OUT"' TERM; echo ready; while :; do sleep 0.05; done`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := dlocktest.Start(t)
			out := filepath.Join(t.TempDir(), "out")
			p := startDlockEnv(t, []string{"OUT=" + out}, "run", "--redis", s.URL(), "--ttl", ttl.String(), "--kill-grace", grace.String(),
				"job", "--", "sh", "-c", tc.script)
			p.waitLine(t, "ready")
			n, err := newLocker(t, s).ForceRelease(context.Background(), "job")
			if err != nil || n != 1 {
				t.Fatalf("ForceRelease: %d, %v", n, err)
			}
			released := time.Now()
			p.waitEOF(t, 10*time.Second)
			took := time.Since(released)
			code := p.exitCode(t)
			wrote, _ := os.ReadFile(out)
			t.Logf("release --force → the command's group gone %s; it wrote %q; stderr: %s", took.Round(time.Millisecond), wrote, p.stderr.String())
			if code != exitLockLost {
				t.Errorf("exit %d, want %d", code, exitLockLost)
			}
			if !strings.Contains(p.stderr.String(), "SIGKILL in "+grace.String()) {
				t.Errorf("stderr does not say SIGKILL comes after the grace (%s): %q", grace, p.stderr.String())
			}
			switch tc.name {
			case "trap":
				if string(wrote) != "cleaned\n" {
					t.Errorf("the TERM trap did not finish within the grace: the file holds %q", wrote)
				}
			case "ignores":
				if string(wrote) != "term\n" {
					t.Errorf("the command did not get SIGTERM before SIGKILL: the file holds %q", wrote)
				}
				if took < grace {
					t.Errorf("a command that ignores SIGTERM was gone %s after the release, before its grace (%s) was over", took, grace)
				}
			}
		})
	}
}
