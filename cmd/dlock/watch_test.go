package main

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
)

// watchRun is dlock status --watch, run in the test's process. Its stdout
// hands each write, which is one refresh, to the test, and blocks until the
// test takes it: the test sets the pace, with no sleeps.
type watchRun struct {
	refreshes chan string
	stderr    syncBuffer
	cancel    context.CancelFunc
	stopped   chan struct{} // closed by interrupt: writes no longer block
	done      chan struct{} // closed when run has returned code
	code      int
	once      sync.Once
}

// refreshWriter is the stdout of a watchRun.
type refreshWriter struct{ w *watchRun }

func (r refreshWriter) Write(p []byte) (int, error) {
	select {
	case r.w.refreshes <- string(p):
	case <-r.w.stopped:
	}
	return len(p), nil
}

// startWatch runs dlock status --watch with args.
func startWatch(t *testing.T, args ...string) *watchRun {
	t.Helper()
	return startWatchOf(t, "status", args...)
}

// startWatchOf runs dlock SUB --watch with args.
func startWatchOf(t *testing.T, sub string, args ...string) *watchRun {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &watchRun{refreshes: make(chan string), cancel: cancel, stopped: make(chan struct{}), done: make(chan struct{})}
	args = append([]string{sub, "--watch"}, args...)
	go func() {
		defer close(w.done)
		w.code = run(ctx, args, strings.NewReader(""), refreshWriter{w}, &w.stderr)
	}()
	t.Cleanup(func() { w.interrupt(t) })
	return w
}

// next returns the next refresh.
func (w *watchRun) next(t *testing.T) string {
	t.Helper()
	select {
	case s := <-w.refreshes:
		return s
	case <-w.done:
		t.Fatalf("the watch ended with exit %d; stderr: %s", w.code, w.stderr.String())
	case <-time.After(20 * time.Second):
		t.Fatalf("no refresh within 20s; stderr: %s", w.stderr.String())
	}
	return ""
}

// wait returns the exit status of a watch that ends by itself, taking the
// refreshes it writes until then.
func (w *watchRun) wait(t *testing.T) int {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case <-w.refreshes:
		case <-w.done:
			return w.code
		case <-timeout:
			t.Fatalf("the watch did not end within 20s; stderr: %s", w.stderr.String())
		}
	}
}

// interrupt cancels the watch's context, as SIGINT does, and returns its
// exit status.
func (w *watchRun) interrupt(t *testing.T) int {
	t.Helper()
	w.once.Do(func() {
		w.cancel()
		close(w.stopped)
	})
	select {
	case <-w.done:
		return w.code
	case <-time.After(20 * time.Second):
		t.Fatalf("the watch did not end within 20s of its interrupt; stderr: %s", w.stderr.String())
	}
	return -1
}

const watchHeader = `Every 10ms: dlock status "job" on redis://`

// TestStatusWatch: the refreshes follow one another on a pipe, each under
// its header line, a blank line between them, with no escape codes; a lock
// acquired between refreshes shows up; an interrupt ends the watch with 0.
func TestStatusWatch(t *testing.T) {
	t.Parallel()
	s := dlocktest.Start(t)
	w := startWatch(t, "--interval", "10ms", "--redis", s.URL(), "job")
	first := w.next(t)
	if !strings.HasPrefix(first, watchHeader+s.Addr()+", ") || !strings.Contains(first, "\nkey:      job\nheld:     no\n") {
		t.Errorf("first refresh:\n%s", first)
	}
	k, err := newLocker(t, s).TryAcquire(context.Background(), "job", dlock.WithMetadata("host=h1 pid=42 cmd=stuck"))
	if err != nil {
		t.Fatal(err)
	}
	defer k.Release(context.Background())
	// The next refresh may have read the status before the acquisition;
	// the one after cannot have.
	w.next(t)
	later := w.next(t)
	if !strings.HasPrefix(later, "\n"+watchHeader) || !strings.Contains(later, "\nheld:     yes, ") || !strings.Contains(later, "\nholder:   host=h1 pid=42 cmd=stuck\n") {
		t.Errorf("refresh after the acquisition:\n%s", later)
	}
	for _, r := range []string{first, later} {
		if strings.Contains(r, "\x1b") {
			t.Errorf("escape codes in a refresh that is not on a terminal: %q", r)
		}
	}
	if code := w.interrupt(t); code != exitOK {
		t.Errorf("interrupted: exit %d, want 0", code)
	}
	if stderr := w.stderr.String(); stderr != "" {
		t.Errorf("stderr: %q", stderr)
	}
}

// TestStatusWatchJSON: with --json, each refresh is one JSON object on one
// line, with its time.
func TestStatusWatchJSON(t *testing.T) {
	t.Parallel()
	servers := dlocktest.StartN(t, 3)
	urls := servers[0].URL() + "," + servers[1].URL() + "," + servers[2].URL()
	w := startWatch(t, "--json", "--interval", "10ms", "--redis", urls, "job")
	var k *dlock.Lock
	var last time.Time
	for i := range 4 {
		line := w.next(t)
		if !strings.HasSuffix(line, "}\n") || strings.Count(line, "\n") != 1 {
			t.Fatalf("refresh %d is not one line of JSON: %q", i, line)
		}
		var st statusJSON
		dec := json.NewDecoder(strings.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&st); err != nil {
			t.Fatalf("refresh %d does not parse: %v\n%s", i, err, line)
		}
		at, err := time.Parse(time.RFC3339Nano, st.Time)
		if err != nil || at.Before(last) {
			t.Errorf("refresh %d: time %q (%v), previous %s", i, st.Time, err, last)
		}
		last = at
		if st.Key != "job" || st.Quorum != 2 || len(st.Nodes) != 3 {
			t.Errorf("refresh %d: %+v", i, st)
		}
		switch i {
		case 0:
			if st.Held {
				t.Errorf("refresh 0: held before anyone took it: %+v", st)
			}
			if k, err = newLocker(t, servers...).TryAcquire(context.Background(), "job"); err != nil {
				t.Fatal(err)
			}
			defer k.Release(context.Background())
		case 2, 3: // refresh 1 may have read the status before the acquisition
			if !st.Held || st.Fence < k.Fence() || st.TTLms <= 0 {
				t.Errorf("refresh %d after the acquisition (fence %d): %+v", i, k.Fence(), st)
			}
		}
	}
	if code := w.interrupt(t); code != exitOK {
		t.Errorf("interrupted: exit %d, want 0", code)
	}
}

// TestStatusWatchUnavailable: a refresh that reaches no Redis reports the
// error on stderr (the hint once while the failures last), and the watch
// goes on: when Redis is back, so is the status. Killed, then frozen.
func TestStatusWatchUnavailable(t *testing.T) {
	t.Parallel()
	s := dlocktest.Start(t)
	w := startWatch(t, "--interval", "10ms", "--redis", s.URL(), "job")
	const failure = "dlock: cannot reach Redis at redis://"
	const hint = "dlock: hint: check --redis"
	failed := func(r string) bool { return !strings.Contains(r, "key:") }
	// untilRecovered takes refreshes until one shows the status again
	// (go-redis may wait before it dials again).
	untilRecovered := func() {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for failed(w.next(t)) {
			if time.Now().After(deadline) {
				t.Fatalf("the status did not come back; stderr: %s", w.stderr.String())
			}
		}
	}
	if r := w.next(t); failed(r) {
		t.Fatalf("first refresh: %q; stderr: %s", r, w.stderr.String())
	}

	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	w.next(t) // read before the kill, or not
	for range 3 {
		if r := w.next(t); !failed(r) || !strings.HasPrefix(r, "\n"+watchHeader) {
			t.Errorf("refresh of a killed Redis: %q", r)
		}
	}
	// A refresh's error is on stderr before the next refresh is written:
	// those of the first two failed ones are there.
	stderr := w.stderr.String()
	if n := strings.Count(stderr, failure+s.Addr()); n < 2 {
		t.Errorf("%d errors for 2 failed refreshes; stderr: %s", n, stderr)
	}
	if n := strings.Count(stderr, hint); n != 1 {
		t.Errorf("%d hints, want 1 while the failures last; stderr: %s", n, stderr)
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	untilRecovered()

	if err := s.Freeze(); err != nil {
		t.Fatal(err)
	}
	w.next(t) // read before the freeze, or not
	for range 2 {
		if r := w.next(t); !failed(r) {
			t.Errorf("refresh of a frozen Redis: %q", r)
		}
	}
	if n := strings.Count(w.stderr.String(), hint); n != 2 {
		t.Errorf("%d hints, want one for each run of failures; stderr: %s", n, w.stderr.String())
	}
	// Interrupted while a refresh waits for the frozen server, or between.
	if code := w.interrupt(t); code != exitOK {
		t.Errorf("interrupted: exit %d, want 0", code)
	}
}

// TestStatusWatchMisconfigured: Redis refusing the commands ends the watch
// at once with 78, at its first refresh or later.
func TestStatusWatchMisconfigured(t *testing.T) {
	t.Parallel()
	secured := dlocktest.Start(t, dlocktest.WithArgs("--requirepass", "secret"))
	w := startWatch(t, "--interval", "10ms", "--redis", secured.URL(), "job")
	select {
	case r := <-w.refreshes:
		t.Errorf("no password: a refresh: %q", r)
	case <-w.done:
	case <-time.After(20 * time.Second):
	}
	if code := w.wait(t); code != exitConfig || !strings.Contains(w.stderr.String(), "dlock: Redis at redis://"+secured.Addr()+" refused dlock's commands") {
		t.Errorf("no password: exit %d, stderr %q", code, w.stderr.String())
	}

	s := dlocktest.Start(t)
	w = startWatch(t, "--interval", "10ms", "--redis", s.URL(), "job")
	w.next(t)
	admin := s.Client()
	defer admin.Close()
	if err := admin.HSet(context.Background(), "dlock:{job}", "field", "value").Err(); err != nil {
		t.Fatal(err)
	}
	if code := w.wait(t); code != exitConfig {
		t.Errorf("a value of another type at the key: exit %d, want %d", code, exitConfig)
	}
	if stderr := w.stderr.String(); !strings.Contains(stderr, "WRONGTYPE") || !strings.Contains(stderr, "dlock: hint: a Redis key of this lock holds a value of another type") {
		t.Errorf("stderr: %q", stderr)
	}
}

func TestStatusWatchUsage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"status", "--watch", "--interval", "0s", "job"}, "dlock: --interval 0s must be longer than 0"},
		{[]string{"status", "-w", "--interval", "-1s", "job"}, "dlock: --interval -1s must be longer than 0"},
		{[]string{"status", "--watch", "--interval", "soon", "job"}, `dlock: --interval "soon" is not a duration`},
		{[]string{"status", "--interval", "5s", "job"}, "dlock: --interval goes with --watch"},
		{[]string{"status", "--watch", "a", "b"}, "dlock: one KEY only"},
	} {
		code, stdout, stderr := dlockRun(t, tc.args...)
		if code != exitUsage || stdout != "" {
			t.Errorf("dlock %q: exit %d, stdout %q, want %d", tc.args, code, stdout, exitUsage)
		}
		if !strings.Contains(stderr, tc.want) || !strings.Contains(stderr, "dlock: hint: run 'dlock help status' for usage") {
			t.Errorf("dlock %q: stderr %q does not contain %q", tc.args, stderr, tc.want)
		}
	}
}

// TestStatusWatchSignals: the dlock binary, watching, exits 0 on SIGINT and
// on SIGTERM.
func TestStatusWatchSignals(t *testing.T) {
	t.Parallel()
	s := dlocktest.Start(t)
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		p := startDlock(t, "status", "--watch", "--interval", "20ms", "--redis", s.URL(), "job")
		p.waitLine(t, "key:      job")
		if err := p.cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		p.waitEOF(t, 10*time.Second)
		if code := p.exitCode(t); code != exitOK {
			t.Errorf("%s: exit %d, want 0; stderr: %s", sig, code, p.stderr.String())
		}
		if stderr := p.stderr.String(); stderr != "" {
			t.Errorf("%s: stderr %q", sig, stderr)
		}
	}
}

// TestStatusWatchClosedPipe: dlock status --watch --json job | head -1 ends
// when head does, with 0, instead of writing to a closed pipe forever.
func TestStatusWatchClosedPipe(t *testing.T) {
	t.Parallel()
	s := dlocktest.Start(t)
	cmd := exec.Command(dlockBin, "status", "--watch", "--json", "--interval", "10ms", "--redis", s.URL(), "job")
	cmd.Env = withoutDlockEnv(os.Environ())
	var stderr syncBuffer
	cmd.Stderr = &stderr
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, `{"time":`) {
		t.Errorf("first line %q, %v", line, err)
	}
	r.Close()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case <-exited:
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
		t.Fatal("dlock status --watch went on writing to a closed pipe")
	}
	if code := cmd.ProcessState.ExitCode(); code != exitOK || stderr.String() != "" {
		t.Errorf("exit %d, stderr %q", code, stderr.String())
	}
}
