package main

import (
	"bufio"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
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

// TestWording: what the fourth copy of --limit 3 is told, --cluster against
// a standalone server, a Redlock whose nodes refuse, and the help of status
// and release for -q and -v.
func TestWording(t *testing.T) {
	t.Parallel()
	s := dlocktest.Start(t)
	t.Run("limit", func(t *testing.T) {
		l := newLocker(t, s)
		for range 3 {
			k, err := l.TryAcquire(context.Background(), "three", dlock.WithLimit(3))
			if err != nil {
				t.Fatal(err)
			}
			defer k.Release(context.Background())
		}
		code, _, stderr := dlockRun(t, "run", "--redis", s.URL(), "--limit", "3", "three", "--", "true")
		if code != exitNotAcquired || !strings.Contains(stderr, `dlock: all 3 permits of "three" are taken; the command did not run`) {
			t.Errorf("the fourth copy of --limit 3: exit %d, %q", code, stderr)
		}
		code, _, stderr = dlockRun(t, "run", "--redis", s.URL(), "--limit", "3", "--wait", "50ms", "three", "--", "true")
		if code != exitNotAcquired || !strings.Contains(stderr, `dlock: all 3 permits of "three" were still taken after waiting 50ms`) {
			t.Errorf("the fourth copy of --limit 3 with --wait: exit %d, %q", code, stderr)
		}
	})
	t.Run("shared", func(t *testing.T) {
		k, err := newLocker(t, s).TryAcquire(context.Background(), "readers")
		if err != nil {
			t.Fatal(err)
		}
		defer k.Release(context.Background())
		code, _, stderr := dlockRun(t, "run", "--redis", s.URL(), "--shared", "readers", "--", "true")
		if code != exitNotAcquired || !strings.Contains(stderr, `dlock: "readers" is held, or wanted by a waiting copy, without --shared; the command did not run`) {
			t.Errorf("--shared beside an exclusive holder: exit %d, %q", code, stderr)
		}
	})
	t.Run("cluster against a standalone server", func(t *testing.T) {
		code, _, stderr := dlockRun(t, "run", "--cluster", "--redis", s.URL(), "job", "--", "true")
		if code != exitConfig || !strings.Contains(stderr, "is not a node of a Redis Cluster") || !strings.Contains(stderr, "dlock: hint: drop --cluster") {
			t.Errorf("--cluster against a standalone server: exit %d, %q", code, stderr)
		}
	})
	t.Run("a Redlock refused", func(t *testing.T) {
		servers := dlocktest.StartN(t, 2, dlocktest.WithArgs("--requirepass", "pw"))
		code, _, stderr := dlockRun(t, "run", "--redis", servers[0].URL()+","+servers[1].URL(), "job", "--", "true")
		if code != exitConfig || !strings.Contains(stderr, "dlock: the Redlock's nodes refused dlock's commands (a quorum needs 2 of 2): node ") ||
			strings.Contains(stderr, "Redis at a Redlock") {
			t.Errorf("a Redlock whose nodes refuse: exit %d, %q", code, stderr)
		}
	})
	t.Run("help", func(t *testing.T) {
		for _, sub := range []string{"status", "release"} {
			_, stdout, _ := dlockRun(t, "help", sub)
			if strings.Contains(stdout, "forwarding signals") || !strings.Contains(stdout, "-v, --verbose") {
				t.Errorf("dlock help %s gives -v the help of run: %q", sub, stdout)
			}
		}
	})
}

// TestNewcomerMistakes: rediss:// to a port that speaks plain text is told
// so, with the fix, within the node timeout (it took 10s and ended in
// "context deadline exceeded" with the generic hint); a missing password
// gets the CLI's hint, not the library's advice to a Go program.
func TestNewcomerMistakes(t *testing.T) {
	t.Parallel()
	s := dlocktest.Start(t)
	start := time.Now()
	code, _, stderr := dlockRun(t, "run", "--redis", "rediss://"+s.Addr(), "job", "--", "true")
	took := time.Since(start)
	if code != exitUnavailable || !strings.Contains(stderr, "dlock: hint: the server at "+s.Addr()+" speaks plain text, not TLS: write redis:// instead of rediss://") {
		t.Errorf("rediss:// to a plain port: exit %d, %q", code, stderr)
	}
	if took > 5*time.Second {
		t.Errorf("rediss:// to a plain port took %s; the node timeout is 1s", took)
	}

	secured := dlocktest.Start(t, dlocktest.WithArgs("--requirepass", "pw"))
	code, _, stderr = dlockRun(t, "run", "--redis", secured.URL(), "job", "--", "true")
	if code != exitConfig || !strings.Contains(stderr, "dlock: hint: the server requires a password: give it in the URL") || strings.Contains(stderr, "client's options") {
		t.Errorf("no password: exit %d, %q", code, stderr)
	}
}
