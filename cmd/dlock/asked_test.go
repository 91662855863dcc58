package main

import (
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/dlocktest"
)

// TestRunOnRequest: dlock request asks the holder; dlock run --on-request
// passes it on to its command as the signal named, once; dlock status
// shows the pending request (text and JSON); a free key is exit 3 and a
// signal dlock does not pass on a usage error.
func TestRunOnRequest(t *testing.T) {
	t.Parallel()
	s := dlocktest.Start(t)
	cmd := `trap "echo asked" USR1; trap "exit 0" TERM; echo ready; while :; do sleep 0.05; done`
	p := startDlock(t, "run", "--redis", s.URL(), "--on-request", "sigusr1", "job", "--", "sh", "-c", cmd)
	p.waitLine(t, "ready")
	if _, out, _ := dlockRun(t, "status", "--redis", s.URL(), "job"); strings.Contains(out, "asked") {
		t.Errorf("a request shown before any: %s", out)
	}
	if code, out, _ := dlockRun(t, "request", "--redis", s.URL(), "--reason", "deploy v2", "job"); code != exitOK || !strings.Contains(out, "asked the holder") {
		t.Fatalf("request: exit %d, %q", code, out)
	}
	p.waitLine(t, "asked")
	if _, out, _ := dlockRun(t, "status", "--redis", s.URL(), "job"); !strings.Contains(out, `"deploy v2"`) {
		t.Errorf("status does not show the request: %s", out)
	}
	_, out, _ := dlockRun(t, "status", "--json", "--redis", s.URL(), "job")
	var st statusJSON
	if err := json.Unmarshal([]byte(out), &st); err != nil || st.Asked == nil || st.Asked.Reason != "deploy v2" || st.Asked.From == "" {
		t.Errorf("status --json: %+v, %v", st.Asked, err)
	}
	// Once: a second request sends nothing more (the command would echo).
	dlockRun(t, "request", "--redis", s.URL(), "job")
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if rest := p.waitEOF(t, 10*time.Second); len(rest) != 0 {
		t.Errorf("more output after the first request: %q", rest)
	}
	if code := p.exitCode(t); code != 0 {
		t.Errorf("exit %d", code)
	}
	// Read once dlock has exited: its stderr is copied by then.
	if !strings.Contains(p.stderr.String(), `asked to release "job" ("deploy v2"): sending SIGUSR1`) {
		t.Errorf("dlock run's note: %q", p.stderr.String())
	}

	if code, out, _ := dlockRun(t, "request", "--redis", s.URL(), "job"); code != exitNotHeld || !strings.Contains(out, "not held") {
		t.Errorf("request for a free key: exit %d, %q; want %d", code, out, exitNotHeld)
	}
	if code, _, _ := dlockRun(t, "run", "--redis", s.URL(), "--on-request", "KILL", "job", "--", "true"); code != exitUsage {
		t.Errorf("--on-request KILL: exit %d, want %d", code, exitUsage)
	}
}
