package main

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/dlocktest"
)

// TestRunShared: dlock run --shared runs beside other --shared holders,
// never beside an exclusive one; a waiting exclusive copy stops new shared
// holds; dlock status shows the shared holders and the waiting writer;
// --shared with --limit is a usage error.
func TestRunShared(t *testing.T) {
	t.Parallel()
	s := dlocktest.Start(t)
	url := s.URL()
	a := startDlock(t, "run", "--redis", url, "--shared", "rw", "--", "sh", "-c", "echo in; sleep 60")
	a.waitLine(t, "in")
	if code, out, _ := dlockRun(t, "run", "--redis", url, "--shared", "rw", "--", "echo", "beside"); code != 0 || !strings.Contains(out, "beside") {
		t.Errorf("a second --shared copy: exit %d, want 0", code)
	}
	if code, _, _ := dlockRun(t, "run", "--redis", url, "rw", "--", "true"); code != exitNotAcquired {
		t.Errorf("an exclusive copy beside a shared holder: exit %d, want %d", code, exitNotAcquired)
	}
	if code, _, _ := dlockRun(t, "run", "--redis", url, "--shared", "--limit", "2", "rw", "--", "true"); code != exitUsage {
		t.Errorf("--shared --limit 2: exit %d, want %d", code, exitUsage)
	}
	w := startDlock(t, "run", "--redis", url, "--wait", "60s", "rw", "--", "echo", "writer")
	var out string
	for range 500 {
		_, out, _ = dlockRun(t, "status", "--redis", url, "rw")
		if strings.Contains(out, "writers:") {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(out, "shared:") || !strings.Contains(out, "1 holders") || !strings.Contains(out, "cmd=sh") || !strings.Contains(out, "writers:") {
		t.Errorf("dlock status with a shared holder and a waiting writer:\n%s", out)
	}
	if code, _, _ := dlockRun(t, "run", "--redis", url, "--shared", "rw", "--", "true"); code != exitNotAcquired {
		t.Errorf("a new --shared copy while a writer waits: exit %d, want %d", code, exitNotAcquired)
	}
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	w.waitLine(t, "writer")
	if code := w.exitCode(t); code != 0 {
		t.Errorf("the writer: exit %d", code)
	}
}
