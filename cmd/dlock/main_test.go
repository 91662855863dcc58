package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
)

// dlockBin is the dlock binary, built once by TestMain for the tests that
// need real processes (concurrency between processes, SIGKILL, signals).
var dlockBin string

func TestMain(m *testing.M) {
	code := func() int {
		if _, err := dlocktest.Binary(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		dir, err := os.MkdirTemp("", "dlock-cmd-test-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		dlockBin = filepath.Join(dir, "dlock")
		goTool, err := exec.LookPath("go")
		if err != nil {
			goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
		}
		if out, err := exec.Command(goTool, "build", "-o", dlockBin, ".").CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "build dlock: %v\n%s", err, out)
			return 1
		}
		return m.Run()
	}()
	if code == 0 {
		// go-redis keeps retrying a failed dial on a goroutine of its own
		// for up to a second after the client is closed.
		if err := goleak.Find(goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial")); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// syncBuffer is a bytes.Buffer safe for the concurrent writes of a command
// and of dlock's own messages.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// dlockRun calls run in the test's process, as main does.
func dlockRun(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errs syncBuffer
	code = run(context.Background(), args, strings.NewReader(""), &out, &errs)
	t.Logf("dlock %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, out.String(), errs.String())
	return code, out.String(), errs.String()
}

// newLocker returns a Locker on the servers, closed at the end of the test.
func newLocker(t *testing.T, servers ...*dlocktest.Server) *dlock.Locker {
	t.Helper()
	clients := dlocktest.Clients(t, servers...)
	var l *dlock.Locker
	if len(clients) == 1 {
		l = dlock.New(clients[0])
	} else {
		var err error
		if l, err = dlock.NewRedlock(clients); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// proc is a dlock process started by a test. Its stdout, which the command
// inherits, is a pipe read line by line: it reaches EOF only once dlock and
// every process of the command that kept it open have exited.
type proc struct {
	cmd    *exec.Cmd
	lines  chan string
	stderr syncBuffer
}

func startDlock(t *testing.T, args ...string) *proc {
	t.Helper()
	return startDlockEnv(t, nil, args...)
}

// startDlockEnv is startDlock with more environment variables.
func startDlockEnv(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(dlockBin, args...), lines: make(chan string, 1000)}
	p.cmd.Env = append(withoutDlockEnv(os.Environ()), env...)
	p.cmd.Stderr = &p.stderr
	p.cmd.WaitDelay = 5 * time.Second
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Stdout = w
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	go func() {
		defer r.Close()
		defer close(p.lines)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Kill()
			_ = p.cmd.Wait()
		}
		for range p.lines {
		}
	})
	return p
}

// waitLine waits for a line of output equal to want.
func (p *proc) waitLine(t *testing.T, want string) {
	t.Helper()
	p.waitMatch(t, fmt.Sprintf("%q", want), func(line string) (string, bool) { return "", line == want })
}

// waitPrefix waits for a line of output that begins with prefix and
// returns the rest of it.
func (p *proc) waitPrefix(t *testing.T, prefix string) string {
	t.Helper()
	return p.waitMatch(t, fmt.Sprintf("a line %q…", prefix), func(line string) (string, bool) { return strings.CutPrefix(line, prefix) })
}

// waitMatch waits for a line of output that match accepts, and returns
// what match returned for it; desc names it in a failure.
func (p *proc) waitMatch(t *testing.T, desc string, match func(line string) (string, bool)) string {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case line, ok := <-p.lines:
			if !ok {
				t.Fatalf("output ended before %s; stderr: %s", desc, p.stderr.String())
			}
			if rest, ok := match(line); ok {
				return rest
			}
		case <-timeout:
			t.Fatalf("no %s within 20s; stderr: %s", desc, p.stderr.String())
		}
	}
}

// waitEOF returns the rest of the output once every holder of the pipe has
// exited.
func (p *proc) waitEOF(t *testing.T, within time.Duration) []string {
	t.Helper()
	var rest []string
	timeout := time.After(within)
	for {
		select {
		case line, ok := <-p.lines:
			if !ok {
				return rest
			}
			rest = append(rest, line)
		case <-timeout:
			t.Fatalf("processes of the command still hold its stdout after %s; stderr: %s", within, p.stderr.String())
		}
	}
}

// exitCode waits for dlock and returns its exit status.
func (p *proc) exitCode(t *testing.T) int {
	t.Helper()
	_ = p.cmd.Wait()
	return p.cmd.ProcessState.ExitCode()
}

func TestRunSerialisesProcesses(t *testing.T) {
	t.Parallel()
	s := dlocktest.Start(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "counter"), []byte("0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A non-atomic read-modify-write of a file; mkdir fails if another
	// process is inside at the same time.
	script := `set -e
mkdir "$DIR/inside"
n=$(cat "$DIR/counter")
sleep 0.02
echo $((n + 1)) > "$DIR/counter"
echo "$DLOCK_FENCE" >> "$DIR/fences"
rmdir "$DIR/inside"`
	const procs, rounds = 8, 2
	runConcurrently(t, procs, rounds, []string{"DIR=" + dir},
		"run", "--redis", s.URL(), "--wait", "60s", "--ttl", "5s", "rmw", "--", "sh", "-c", script)
	counter, _ := os.ReadFile(filepath.Join(dir, "counter"))
	if got := strings.TrimSpace(string(counter)); got != fmt.Sprint(procs*rounds) {
		t.Errorf("counter = %s, want %d: updates were lost", got, procs*rounds)
	}
	fences, _ := os.ReadFile(filepath.Join(dir, "fences"))
	var last uint64
	lines := strings.Fields(string(fences))
	if len(lines) != procs*rounds {
		t.Errorf("%d fences recorded, want %d", len(lines), procs*rounds)
	}
	for _, f := range lines {
		var n uint64
		fmt.Sscan(f, &n)
		if n <= last {
			t.Errorf("fences %s: %d does not follow %d", strings.Join(lines, " "), n, last)
		}
		last = n
	}
}

func TestRunNotAcquired(t *testing.T) {
	t.Parallel()
	s := dlocktest.Start(t)
	l := newLocker(t, s)
	k, err := l.TryAcquire(context.Background(), "job")
	if err != nil {
		t.Fatal(err)
	}
	defer k.Release(context.Background())
	ran := filepath.Join(t.TempDir(), "ran")

	code, _, stderr := dlockRun(t, "run", "--redis", s.URL(), "job", "--", "touch", ran)
	if code != exitNotAcquired {
		t.Errorf("exit %d, want %d", code, exitNotAcquired)
	}
	if !strings.Contains(stderr, `dlock: "job" is held elsewhere; the command did not run`) {
		t.Errorf("stderr does not say why: %q", stderr)
	}

	start := time.Now()
	code, _, stderr = dlockRun(t, "run", "--redis", s.URL(), "--wait", "300ms", "-q", "job", "--", "touch", ran)
	if code != exitNotAcquired {
		t.Errorf("with --wait: exit %d, want %d", code, exitNotAcquired)
	}
	if waited := time.Since(start); waited < 300*time.Millisecond {
		t.Errorf("gave up after %s, before --wait 300ms", waited)
	}
	if stderr != "" {
		t.Errorf("--quiet printed %q", stderr)
	}
	if _, err := os.Stat(ran); err == nil {
		t.Error("the command ran without the lock")
	}
}

func TestRunExitStatus(t *testing.T) {
	t.Parallel()
	s := dlocktest.Start(t)
	for _, tc := range []struct {
		argv []string
		want int
	}{
		{[]string{"true"}, 0},
		{[]string{"sh", "-c", "exit 7"}, 7},
		{[]string{"sh", "-c", "kill -KILL $$"}, 128 + 9},
		{[]string{"sh", "-c", `test "$DLOCK_KEY" = job && test ${#DLOCK_TOKEN} = 32 && test "$DLOCK_FENCE" -gt 0`}, 0},
		{[]string{"dlock-no-such-command"}, exitNotFound},
	} {
		args := append([]string{"run", "--redis", s.URL(), "job", "--"}, tc.argv...)
		if code, _, _ := dlockRun(t, args...); code != tc.want {
			t.Errorf("%q: exit %d, want %d", tc.argv, code, tc.want)
		}
	}
	// Released every time: a new holder gets it at once.
	k, err := newLocker(t, s).TryAcquire(context.Background(), "job")
	if err != nil {
		t.Fatalf("the lock was not released: %v", err)
	}
	_ = k.Release(context.Background())
}

func TestRunLockLostKillsProcessGroup(t *testing.T) {
	t.Parallel()
	s := dlocktest.Start(t)
	// A background grandchild holds stdout too: EOF means the whole group
	// is gone.
	p := startDlock(t, "run", "--redis", s.URL(), "--ttl", "1s", "--kill-grace", "400ms", "job", "--",
		"sh", "-c", "sleep 60 & echo ready; wait")
	p.waitLine(t, "ready")
	n, err := newLocker(t, s).ForceRelease(context.Background(), "job")
	if err != nil || n != 1 {
		t.Fatalf("ForceRelease: %d, %v", n, err)
	}
	// Stopped well before the sleep: SIGTERM reaches the whole group (the
	// kill grace follows, for what ignores it).
	p.waitEOF(t, 10*time.Second)
	if code := p.exitCode(t); code != exitLockLost {
		t.Errorf("exit %d, want %d; stderr: %s", code, exitLockLost, p.stderr.String())
	}
	if !strings.Contains(p.stderr.String(), `dlock: lost the lock "job" while the command ran`) {
		t.Errorf("stderr does not say the lock was lost: %q", p.stderr.String())
	}
}

func TestRunKilledHolder(t *testing.T) {
	t.Parallel()
	s := dlocktest.Start(t)
	const ttl = 2 * time.Second
	p := startDlock(t, "run", "--redis", s.URL(), "--ttl", ttl.String(), "job", "--",
		"sh", "-c", "echo ready; exec sleep 60")
	p.waitLine(t, "ready")
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	// The command dies with its supervisor (parent-death signal): it held
	// stdout open.
	p.waitEOF(t, 10*time.Second)
	_ = p.cmd.Wait()

	start := time.Now()
	code, _, _ := dlockRun(t, "run", "--redis", s.URL(), "--wait", "30s", "--ttl", ttl.String(), "job", "--", "true")
	if code != 0 {
		t.Fatalf("next holder: exit %d", code)
	}
	waited := time.Since(start)
	t.Logf("the next holder waited %s (ttl %s)", waited, ttl)
	if waited > ttl+5*time.Second {
		t.Errorf("the next holder waited %s, well past the ttl %s", waited, ttl)
	}
}

func TestRunForwardsSignalsToGrandchildren(t *testing.T) {
	t.Parallel()
	s := dlocktest.Start(t)
	for _, sig := range []string{"TERM", "HUP", "USR2"} {
		t.Run(sig, func(t *testing.T) {
			t.Parallel()
			// The inner shell is the command's child: dlock's grandchild.
			inner := fmt.Sprintf(`trap "echo grandchild got %s; exit 0" %s; echo ready; while :; do sleep 0.05; done`, sig, sig)
			p := startDlock(t, "run", "--redis", s.URL(), "job-"+sig, "--", "sh", "-c", `sh -c '`+inner+`'`)
			p.waitLine(t, "ready")
			if err := p.cmd.Process.Signal(signalByName[sig]); err != nil {
				t.Fatal(err)
			}
			rest := p.waitEOF(t, 10*time.Second)
			if !strings.Contains(strings.Join(rest, "\n"), "grandchild got "+sig) {
				t.Errorf("the grandchild did not get SIG%s: output %q, stderr %q", sig, rest, p.stderr.String())
			}
			// The command itself (the outer shell) died of the signal.
			if code, want := p.exitCode(t), 128+int(signalByName[sig]); code != want {
				t.Errorf("exit %d, want %d", code, want)
			}
		})
	}
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	const secret = "s3cr3t-pw"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{}, "Usage:"},
		{[]string{"frobnicate"}, `dlock: unknown command "frobnicate"`},
		{[]string{"run"}, "dlock: missing KEY"},
		{[]string{"run", "job"}, "dlock: missing COMMAND"},
		{[]string{"run", "job", "--"}, "dlock: missing COMMAND"},
		{[]string{"run", "--ttl", "soon", "job", "--", "true"}, `dlock: --ttl "soon" is not a duration`},
		{[]string{"run", "--ttl", "1ms", "job", "--", "true"}, "dlock: --ttl 1ms is too short"},
		{[]string{"run", "--wait", "-1s", "job", "--", "true"}, "dlock: --wait -1s is negative"},
		{[]string{"run", "--frobnicate", "job", "--", "true"}, "dlock: unknown flag --frobnicate"},
		{[]string{"run", "job", "--ttl", "1s", "true"}, "dlock: flag --ttl after KEY with no --"},
		{[]string{"run", "job", "--ttl", "1s", "other", "--", "true"}, `dlock: unexpected "other" before --`},
		{[]string{"run", "job", "--ttl", "nope", "--", "true"}, `dlock: --ttl "nope" is not a duration`},
		{[]string{"run", "--redis", "http://:" + secret + "@127.0.0.1", "job", "--", "true"}, "dlock: bad Redis URL http://:xxxxx@127.0.0.1"},
		{[]string{"run", "--redis", "redis://:" + secret + "@127.0.0.1:port", "job", "--", "true"}, "dlock: bad Redis URL redis://:xxxxx@127.0.0.1:port"},
		{[]string{"run", "--redis", "redis://127.0.0.1/x", "job", "--", "true"}, "dlock: bad Redis URL"},
		{[]string{"run", "--redis", "redis://127.0.0.1:1,redis://127.0.0.1:1", "job", "--", "true"}, "name the same database"},
		{[]string{"status"}, "dlock: missing KEY"},
		{[]string{"status", "a", "b"}, "dlock: one KEY only"},
		{[]string{"status", "a", "--json", "b"}, "dlock: one KEY only"},
		{[]string{"status", "a", "--frobnicate"}, "dlock: unknown flag --frobnicate"},
		{[]string{"release", "job"}, "add --force to confirm"},
		{[]string{"demo", "extra"}, "dlock: unexpected argument"},
	} {
		code, _, stderr := dlockRun(t, tc.args...)
		if code != exitUsage {
			t.Errorf("dlock %q: exit %d, want %d", tc.args, code, exitUsage)
		}
		if !strings.Contains(stderr, tc.want) {
			t.Errorf("dlock %q: stderr %q does not contain %q", tc.args, stderr, tc.want)
		}
		if strings.Contains(stderr, secret) {
			t.Errorf("dlock %q printed the password: %q", tc.args, stderr)
		}
	}
}

func TestUnreachable(t *testing.T) {
	t.Parallel()
	// A port nothing listens on.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	const secret = "s3cr3t-pw"
	url := "redis://:" + secret + "@" + addr
	for _, args := range [][]string{
		{"run", "--redis", url, "job", "--", "true"},
		{"run", "--redis", url, "--wait", "10s", "job", "--", "true"},
		{"status", "--redis", url, "job"},
		{"release", "--force", "--redis", url, "job"},
	} {
		code, _, stderr := dlockRun(t, args...)
		if code != exitUnavailable {
			t.Errorf("dlock %q: exit %d, want %d", args, code, exitUnavailable)
		}
		if !strings.Contains(stderr, "dlock: cannot reach Redis at redis://:xxxxx@"+addr) {
			t.Errorf("dlock %q: stderr %q", args, stderr)
		}
		if strings.Contains(stderr, secret) {
			t.Errorf("dlock %q printed the password: %q", args, stderr)
		}
	}
}

func TestRunRedisFromEnvironment(t *testing.T) {
	s := dlocktest.Start(t)
	t.Setenv("DLOCK_REDIS", s.URL())
	admin := s.Client()
	defer admin.Close()
	admin.Set(context.Background(), "dlock:{job}:fence", "5000000000000100", 0) // ahead of the clock
	if code, _, _ := dlockRun(t, "run", "job", "--", "true"); code != 0 {
		t.Fatalf("exit %d", code)
	}
	if code, _, _ := dlockRun(t, "run", "job", "--ttl", "5s", "--", "true"); code != 0 { // flags after KEY, before --
		t.Fatalf("exit %d", code)
	}
	st, err := newLocker(t, s).Status(context.Background(), "job")
	if err != nil || st.Fence != 5000000000000102 {
		t.Errorf("the lock was not taken on $DLOCK_REDIS: %+v, %v", st, err)
	}
}

func TestStatusJSON(t *testing.T) {
	t.Parallel()
	servers := dlocktest.StartN(t, 3)
	urls := servers[0].URL() + "," + servers[1].URL() + "," + servers[2].URL()
	k, err := newLocker(t, servers...).TryAcquire(context.Background(), "job")
	if err != nil {
		t.Fatal(err)
	}
	defer k.Release(context.Background())

	code, stdout, _ := dlockRun(t, "status", "--redis", urls, "job", "--json") // flags after KEY too
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	var st statusJSON
	if err := json.Unmarshal([]byte(stdout), &st); err != nil {
		t.Fatalf("status --json does not parse: %v\n%s", err, stdout)
	}
	if !st.Held || st.Fence < k.Fence() || st.TTLms <= 0 || st.Quorum != 2 || len(st.Nodes) != 3 {
		t.Errorf("status %+v, want held with fence ≥ %d on 3 nodes", st, k.Fence())
	}
	// A quorum granted it; the last node may answer after Acquire returned.
	held := 0
	for _, n := range st.Nodes {
		if n.Error != "" {
			t.Errorf("node %+v", n)
		}
		if n.Held {
			held++
		}
	}
	if held < st.Quorum {
		t.Errorf("%d nodes hold the lock, fewer than the quorum %d", held, st.Quorum)
	}

	code, stdout, _ = dlockRun(t, "status", "--redis", urls, "job")
	if code != 0 || !strings.Contains(stdout, "held:     yes") || !strings.Contains(stdout, servers[2].Addr()) {
		t.Errorf("status: exit %d:\n%s", code, stdout)
	}
}

func TestReleaseForce(t *testing.T) {
	t.Parallel()
	s := dlocktest.Start(t)
	k, err := newLocker(t, s).TryAcquire(context.Background(), "job", dlock.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := dlockRun(t, "release", "--force", "--redis", s.URL(), "job")
	if code != 0 || !strings.Contains(stdout, fmt.Sprintf(`dlock: deleted lock "job" on 1 of 1 node(s) (fence %d`, k.Fence())) {
		t.Errorf("exit %d, stdout %q", code, stdout)
	}
	if !strings.Contains(stderr, "a live holder sees its lock lost") {
		t.Errorf("no warning about the live holder: %q", stderr)
	}
	select {
	case <-k.Lost():
	case <-time.After(10 * time.Second):
		t.Error("the holder did not learn that its lock was deleted")
	}
	code, stdout, _ = dlockRun(t, "release", "--force", "--redis", s.URL(), "job")
	if code != 0 || !strings.Contains(stdout, "was not held") {
		t.Errorf("second release: exit %d, stdout %q", code, stdout)
	}
}

func TestHelpAndVersion(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"help"}, {"--help"}, {"help", "run"}, {"run", "-h"}, {"status", "--help"}, {"help", "demo"}} {
		code, stdout, _ := dlockRun(t, args...)
		if code != 0 || !strings.Contains(stdout, "Usage") {
			t.Errorf("dlock %q: exit %d, stdout %q", args, code, stdout)
		}
	}
	code, stdout, _ := dlockRun(t, "version")
	if code != 0 || !strings.HasPrefix(stdout, "dlock ") {
		t.Errorf("version: exit %d, %q", code, stdout)
	}
}

func TestDemo(t *testing.T) {
	t.Parallel()
	code, stdout, stderr := dlockRun(t, "demo", "--short")
	if code != 0 {
		t.Fatalf("demo: exit %d\n%s\n%s", code, stdout, stderr)
	}
	for _, want := range []string{"counter = 100 of 100", "updates lost", "3 of 3 attempts refused", "before the key could expire: ok", "4. Summary", "redis-servers stopped"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("demo output lacks %q", want)
		}
	}
	if strings.Contains(stdout, "FAILED") {
		t.Error("a demo check failed")
	}
}

var signalByName = map[string]syscall.Signal{"TERM": syscall.SIGTERM, "HUP": syscall.SIGHUP, "USR2": syscall.SIGUSR2}

// TestRunLimit: dlock run --limit 2 with 6 concurrent processes: at most 2
// run the command at once, and all run it; a different limit is refused.
func TestRunLimit(t *testing.T) {
	t.Parallel()
	s := dlocktest.Start(t)
	dir := t.TempDir()
	// Each copy takes one of two slots with mkdir (atomic); a third copy
	// inside at the same time finds both taken and fails.
	script := `if mkdir "$DIR/a" 2>/dev/null; then slot=a; elif mkdir "$DIR/b" 2>/dev/null; then slot=b; else echo "a third copy ran" >&2; exit 3; fi
sleep 0.1
echo x >> "$DIR/ran"
rmdir "$DIR/$slot"`
	const procs = 6
	runConcurrently(t, procs, 1, []string{"DIR=" + dir},
		"run", "--redis", s.URL(), "--limit", "2", "--wait", "60s", "--ttl", "5s", "two", "--", "sh", "-c", script)
	ran, _ := os.ReadFile(filepath.Join(dir, "ran"))
	if n := strings.Count(string(ran), "x"); n != procs {
		t.Errorf("%d copies ran, want %d", n, procs)
	}

	// A holder with --limit 2 and another host asking with --limit 3.
	hold := exec.Command(dlockBin, "run", "--redis", s.URL(), "--limit", "2", "two", "--", "sleep", "5")
	hold.Env = withoutDlockEnv(os.Environ())
	if err := hold.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = hold.Process.Kill(); _ = hold.Wait() }()
	waitStatus := func() string {
		for range 200 {
			out, _ := exec.Command(dlockBin, "status", "--redis", s.URL(), "two").CombinedOutput()
			if strings.Contains(string(out), "permits:") {
				return string(out)
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatal("dlock status never showed the permit")
		return ""
	}
	if out := waitStatus(); !strings.Contains(out, "1 of 2 taken") || !strings.Contains(out, "cmd=sleep") {
		t.Errorf("dlock status:\n%s", out)
	}
	other := exec.Command(dlockBin, "run", "--redis", s.URL(), "--limit", "3", "two", "--", "true")
	other.Env = withoutDlockEnv(os.Environ())
	out, _ := other.CombinedOutput()
	if code := other.ProcessState.ExitCode(); code != exitConfig || !strings.Contains(string(out), "limit 2") || !strings.Contains(string(out), "limit 3") || strings.Contains(string(out), "for usage") {
		t.Errorf("--limit 3 on a key held with --limit 2: exit %d, %s", code, out)
	}
}

// runConcurrently runs dlock with args from procs goroutines at once, rounds
// times each, with env added to the environment, and reports every failure.
func runConcurrently(t *testing.T, procs, rounds int, env []string, args ...string) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan string, procs*rounds)
	for range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				cmd := exec.Command(dlockBin, args...)
				cmd.Env = append(withoutDlockEnv(os.Environ()), env...)
				if out, err := cmd.CombinedOutput(); err != nil {
					errs <- fmt.Sprintf("%v: %s", err, out)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// TestDemoFencedCounter: the demo's counter refuses a holder that goes on
// after a later holder read it (a lower fence), so that a holder paused
// past its lock's expiry loses no update; fence 0 (no lock) is never
// refused while no fenced holder came.
func TestDemoFencedCounter(t *testing.T) {
	var c fencedCounter
	if v, ok := c.read(0); !ok || v != 0 {
		t.Fatalf("read(0) = %d, %v", v, ok)
	}
	if !c.write(0, 1) {
		t.Fatal("write(0) refused")
	}
	v, ok := c.read(5) // the late holder (fence 5) read first
	if !ok {
		t.Fatal("read(5) refused")
	}
	if w, ok := c.read(7); !ok || w != v { // the next holder reads
		t.Fatalf("read(7) = %d, %v", w, ok)
	}
	if c.write(5, v+1) {
		t.Fatal("the late holder's write (fence 5) was taken after fence 7 read")
	}
	if !c.write(7, v+1) || c.value != v+1 || c.refused != 1 {
		t.Fatalf("value %d, refused %d", c.value, c.refused)
	}
	if _, ok := c.read(6); ok {
		t.Fatal("read(6) after fence 7 was taken")
	}
}
