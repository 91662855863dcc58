package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/dlocktest"
)

// TestExitStatusByClass: 75 only for a busy lock (silent with -q), 69 when
// Redis cannot be reached, 78 when it refuses the commands; 69 and 78 are
// printed also with -q, so that a misconfigured fleet is never silent.
func TestExitStatusByClass(t *testing.T) {
	t.Parallel()
	s := dlocktest.Start(t)
	secured := dlocktest.Start(t, dlocktest.WithArgs("--requirepass", "secret"))
	dead := dlocktest.Start(t)
	dead.Kill()
	admin := s.Client()
	defer admin.Close()
	admin.HSet(context.Background(), "dlock:{hash}", "field", "value")
	k, err := newLocker(t, s).TryAcquire(context.Background(), "busy")
	if err != nil {
		t.Fatal(err)
	}
	defer k.Release(context.Background())

	for _, tc := range []struct {
		name  string
		url   string
		key   string
		code  int
		quiet bool   // prints nothing with -q
		says  string // on stderr, also with -q
		hint  string
	}{
		{"busy", s.URL(), "busy", exitNotAcquired, true, "", ""},
		{"connection refused", dead.URL(), "job", exitUnavailable, false, "cannot reach Redis", "server is up"},
		{"wrong password", "redis://:wrong@" + secured.Addr(), "job", exitConfig, false, "WRONGPASS", "password"},
		{"no password", secured.URL(), "job", exitConfig, false, "unauthenticated", "requires a password"},
		{"wrong type at the key", s.URL(), "hash", exitConfig, false, "WRONGTYPE", "another type"},
		{"database out of range", s.URL() + "/99", "job", exitConfig, false, "DB index", "database number"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, wait := range []string{"0s", "200ms"} {
				code, _, stderr := dlockRun(t, "run", "-q", "--wait", wait, "--redis", tc.url, tc.key, "--", "true")
				if code != tc.code {
					t.Errorf("--wait %s: exit %d, want %d", wait, code, tc.code)
				}
				if tc.quiet && stderr != "" {
					t.Errorf("--wait %s: -q printed %q for a busy lock", wait, stderr)
				}
				if !tc.quiet && (!strings.Contains(stderr, tc.says) || !strings.Contains(stderr, tc.hint)) {
					t.Errorf("--wait %s: -q printed %q, want %q and a hint about %q", wait, stderr, tc.says, tc.hint)
				}
			}
			want := tc.code
			if want == exitNotAcquired {
				want = exitOK
			}
			if code, _, _ := dlockRun(t, "status", "--redis", tc.url, tc.key); code != want {
				t.Errorf("status: exit %d, want %d", code, want)
			}
		})
	}
}

// TestClosedStderr: dlock run -v ... 2>&1 | head -1 closes dlock's stderr
// early; dlock must not die of SIGPIPE (its command would die with it and
// the lock stay for its TTL): the command runs to its end, and the lock is
// released.
func TestClosedStderr(t *testing.T) {
	t.Parallel()
	s := dlocktest.Start(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r.Close() // nobody reads: every write of dlock to stderr fails
	done := filepath.Join(t.TempDir(), "done")
	cmd := exec.Command(dlockBin, "run", "-v", "--redis", s.URL(), "job", "--",
		"sh", "-c", "sleep 0.3; touch "+done)
	cmd.Env = withoutDlockEnv(os.Environ())
	cmd.Stderr = w
	err = cmd.Run()
	w.Close()
	if err != nil {
		t.Errorf("dlock with a closed stderr: %v", err)
	}
	if _, err := os.Stat(done); err != nil {
		t.Error("the command did not run to its end")
	}
	admin := s.Client()
	defer admin.Close()
	if admin.Exists(context.Background(), "dlock:{job}").Val() != 0 {
		t.Error("the lock was not released")
	}
}

// TestKeyBeforeDashes: with -- present, KEY must come before it.
func TestKeyBeforeDashes(t *testing.T) {
	t.Parallel()
	code, _, stderr := dlockRun(t, "run", "--redis", "redis://127.0.0.1:1", "--", "nice", "date")
	if code != exitUsage || !strings.Contains(stderr, "missing KEY before --") {
		t.Errorf("dlock run -- nice date: exit %d, %q; want 64 and a message about KEY", code, stderr)
	}
	code, _, stderr = dlockRun(t, "status", "--redis", "127.0.0.1:6379", "k")
	if code != exitUsage || !strings.Contains(stderr, "write redis://127.0.0.1:6379") {
		t.Errorf("a URL without a scheme: exit %d, %q; want 64 and the URL to write", code, stderr)
	}
}

// TestFrozenRedisBound: against a frozen Redis, a refusal takes at most
// --wait plus two node timeouts (1s each at the default TTL: the attempt,
// then the clean-up of what it may have set, which Close waits for), and
// exits 69 (docs/reliability.md, C26).
func TestFrozenRedisBound(t *testing.T) {
	t.Parallel()
	s := dlocktest.Start(t)
	if err := s.Freeze(); err != nil {
		t.Fatal(err)
	}
	defer s.Thaw()
	for _, wait := range []time.Duration{0, 2 * time.Second} {
		start := time.Now()
		code, _, _ := dlockRun(t, "run", "-q", "--wait", wait.String(), "--redis", s.URL(), "job", "--", "true")
		el := time.Since(start)
		if code != exitUnavailable {
			t.Errorf("--wait %s on a frozen Redis: exit %d, want %d", wait, code, exitUnavailable)
		}
		// The bound is wait + 2s; the slack is for a loaded machine.
		t.Logf("--wait %s on a frozen Redis: exit %d after %s", wait, code, el.Round(time.Millisecond))
		if limit := wait + 2*time.Second + 1500*time.Millisecond; el > limit {
			t.Errorf("--wait %s on a frozen Redis took %s, more than --wait plus two node timeouts", wait, el.Round(time.Millisecond))
		}
	}
}

// TestStatusShowsHolder: dlock run stores who holds the lock; dlock status
// shows it.
func TestStatusShowsHolder(t *testing.T) {
	t.Parallel()
	s := dlocktest.Start(t)
	p := startDlock(t, "run", "--redis", s.URL(), "job", "--", "sh", "-c", "echo started; sleep 30")
	p.waitLine(t, "started")
	host, _ := os.Hostname()
	want := fmt.Sprintf("host=%s pid=%d cmd=sh", host, p.cmd.Process.Pid) // no arguments: they may hold secrets
	code, stdout, _ := dlockRun(t, "status", "--redis", s.URL(), "job")
	if code != exitOK || !strings.Contains(stdout, "holder:   "+want) {
		t.Errorf("status: exit %d, %q; want the holder %q", code, stdout, want)
	}
	code, stdout, _ = dlockRun(t, "status", "--json", "--redis", s.URL(), "job")
	if code != exitOK || !strings.Contains(stdout, `"metadata": "`+want+`"`) {
		t.Errorf("status --json: exit %d, %q; want the metadata", code, stdout)
	}
	_ = p.cmd.Process.Signal(os.Interrupt)
	_ = p.cmd.Wait()
	if code, _, _ := dlockRun(t, "run", "--redis", s.URL(), "--metadata", strings.Repeat("x", 1025), "job", "--", "true"); code != exitUsage {
		t.Errorf("--metadata over 1024 bytes: exit %d, want %d", code, exitUsage)
	}
}

// TestGuard: where there is no parent-death signal (forced here on Linux),
// a guard kills the command, and what it started, when dlock is killed; the
// command's status, signals and start errors come through unchanged.
func TestGuard(t *testing.T) {
	t.Parallel()
	s := dlocktest.Start(t)
	guard := []string{"DLOCK_GUARD=1"}
	// Not exec: the sleep is the command's child, in its group.
	p := startDlockEnv(t, guard, "run", "--redis", s.URL(), "--ttl", "2s", "job", "--", "sh", "-c", "echo ready; sleep 60; echo survived")
	p.waitLine(t, "ready")
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	// stdout closes once the command and its sleep are gone.
	rest := p.waitEOF(t, 10*time.Second)
	_ = p.cmd.Wait()
	if strings.Contains(strings.Join(rest, " "), "survived") {
		t.Error("the command outlived its SIGKILLed supervisor")
	}

	for _, tc := range []struct {
		argv []string
		code int
	}{
		{[]string{"sh", "-c", "exit 3"}, 3},
		{[]string{"sh", "-c", "kill -TERM $$"}, 128 + 15},
		{[]string{"no-such-command-dlock"}, exitNotFound},
	} {
		cmd := exec.Command(dlockBin, append([]string{"run", "--redis", s.URL(), "status", "--"}, tc.argv...)...)
		cmd.Env = append(withoutDlockEnv(os.Environ()), guard...)
		_ = cmd.Run()
		if code := cmd.ProcessState.ExitCode(); code != tc.code {
			t.Errorf("%q through the guard: exit %d, want %d", tc.argv, code, tc.code)
		}
	}
	// A signal to dlock reaches the command once (not twice through the guard).
	p = startDlockEnv(t, guard, "run", "--redis", s.URL(), "sig", "--", "sh", "-c",
		`n=0; trap 'n=$((n+1))' USR1; echo ready; while [ $n -lt 1 ]; do sleep 0.05; done; sleep 0.3; echo "got $n"`)
	p.waitLine(t, "ready")
	if err := p.cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	p.waitLine(t, "got 1")
}

// TestStatusHeld: dlock status --held answers "is it held?" by its exit
// status (0 held, 3 free), silently with -q; not with --watch.
func TestStatusHeld(t *testing.T) {
	t.Parallel()
	s := dlocktest.Start(t)
	if code, stdout, _ := dlockRun(t, "status", "-q", "--held", "--redis", s.URL(), "backup"); code != exitNotHeld || stdout != "" {
		t.Errorf("a free lock: exit %d, stdout %q; want %d and nothing printed", code, stdout, exitNotHeld)
	}
	if code, stdout, _ := dlockRun(t, "status", "--held", "--redis", s.URL(), "backup"); code != exitNotHeld || stdout == "" {
		t.Errorf("a free lock without -q: exit %d, stdout %q; want %d and the status", code, stdout, exitNotHeld)
	}
	k, err := newLocker(t, s).TryAcquire(context.Background(), "backup")
	if err != nil {
		t.Fatal(err)
	}
	defer k.Release(context.Background())
	if code, _, _ := dlockRun(t, "status", "-q", "--held", "--redis", s.URL(), "backup"); code != exitOK {
		t.Errorf("a held lock: exit %d, want 0", code)
	}
	if code, _, _ := dlockRun(t, "status", "--redis", s.URL(), "free"); code != exitOK {
		t.Errorf("without --held, a free lock: exit %d, want 0", code)
	}
	if code, _, _ := dlockRun(t, "status", "--held", "--watch", "--redis", s.URL(), "backup"); code != exitUsage {
		t.Errorf("--held --watch: exit %d, want %d", code, exitUsage)
	}
}
