package main

import (
	"bufio"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/dlock-dev/dlock/dlocktest"
)

// TestRunLockTakenWhileRunning: a lock deleted with release --force while
// the command runs, with the default TTL, so that no renewal comes before
// the command ends: the final release finds the lock gone, and nothing
// proves that the command ran under it to its end. Exit 76, not the
// command's 0.
func TestRunLockTakenWhileRunning(t *testing.T) {
	t.Parallel()
	s := dlocktest.Start(t)
	// The command says it runs, then waits for a line on its stdin: the
	// test ends it once the lock is gone.
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdinR.Close()
	defer stdinW.Close()
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer outR.Close()
	var errs syncBuffer
	done := make(chan int, 1)
	go func() {
		defer outW.Close()
		done <- run(context.Background(), []string{"run", "--redis", s.URL(), "job", "--", "sh", "-c", "echo ready; read line"},
			stdinR, outW, &errs)
	}()
	lines := bufio.NewScanner(outR)
	if !lines.Scan() || lines.Text() != "ready" {
		t.Fatalf("the command did not start: %q; stderr: %s", lines.Text(), errs.String())
	}
	if code, stdout, _ := dlockRun(t, "release", "--force", "--redis", s.URL(), "job"); code != exitOK || !strings.Contains(stdout, "deleted") {
		t.Fatalf("release --force: exit %d, %q", code, stdout)
	}
	if _, err := stdinW.WriteString("end\n"); err != nil {
		t.Fatal(err)
	}
	code := <-done
	t.Logf("stderr: %s", errs.String())
	if code != exitLockLost {
		t.Errorf("exit %d, want %d: the lock was deleted while the command ran", code, exitLockLost)
	}
	if !strings.Contains(errs.String(), `dlock: the lock "job" was gone when the command ended`) {
		t.Errorf("stderr does not say the lock was gone: %q", errs.String())
	}
}
