package main

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
)

// shellIdiom returns the shell idiom of docs/cli.md that takes a lock
// across shell steps: its lines from the one that runs
// $(dlock acquire ...) to the one that sets token (the same line, or a
// later one).
func shellIdiom(t *testing.T) []string {
	t.Helper()
	doc, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	var idiom []string
	for _, line := range strings.Split(string(doc), "\n") {
		if idiom == nil && !strings.Contains(line, "$(dlock acquire") {
			continue
		}
		idiom = append(idiom, line)
		if strings.Contains(line, "token=") {
			return idiom
		}
	}
	t.Fatalf("docs/cli.md has no line with $(dlock acquire ...) followed by one that sets token: %q", idiom)
	return nil
}

// TestShellIdiom: the idiom that docs/cli.md, dlock help and dlock help
// acquire show for a lock across shell steps stops the script when dlock
// acquire fails, in dash and in bash, with and without set -e: a busy lock
// ends it with 75, Redis down with 69, and the step after the idiom never
// runs; an acquired lock runs the step with the token and the fence set,
// and the token releases the lock.
func TestShellIdiom(t *testing.T) {
	t.Parallel()
	idiom := shellIdiom(t)
	for _, line := range idiom {
		code := strings.TrimSpace(line)
		if !strings.Contains(usage, "    "+code+"\n") || !strings.Contains(subUsage["acquire"], "    "+code+"\n") {
			t.Errorf("dlock help or dlock help acquire does not show the idiom's line %q", code)
		}
	}
	s := dlocktest.Start(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "redis://" + ln.Addr().String()
	ln.Close() // nothing listens there now

	holder := newLocker(t, s)
	const step = `printf 'step %s %s\n' "$token" "$fence" >>"$STEP"` + "\n" + `dlock release --token "$token" deploy` + "\n"
	for _, shell := range []string{"dash", "bash"} {
		path, err := exec.LookPath(shell)
		if err != nil {
			t.Errorf("%s is not installed", shell)
			continue
		}
		for _, prelude := range []string{"", "set -e\n"} {
			script := prelude + strings.Join(idiom, "\n") + "\n" + step
			for _, tc := range []struct {
				name  string
				redis string
				busy  bool
				want  int
			}{
				{"busy", s.URL(), true, exitNotAcquired},
				{"down", down, false, exitUnavailable},
				{"free", s.URL(), false, exitOK},
			} {
				name := shell + "/" + tc.name
				if prelude != "" {
					name += "/set -e"
				}
				t.Run(name, func(t *testing.T) {
					if tc.busy {
						k, err := holder.TryAcquire(context.Background(), "deploy", dlock.WithTTL(time.Minute))
						if err != nil {
							t.Fatal(err)
						}
						defer k.Release(context.Background())
					}
					code, ran := runIdiom(t, path, script, tc.redis)
					if code != tc.want {
						t.Errorf("exit %d, want %d", code, tc.want)
					}
					if tc.want != exitOK {
						if ran != "" {
							t.Errorf("the step ran after a failed acquire: %q", ran)
						}
						return
					}
					if !regexp.MustCompile(`^step [0-9a-f]{32} [1-9][0-9]*\n$`).MatchString(ran) {
						t.Errorf("the step ran with %q, want the token and the fence", ran)
					}
				})
			}
		}
	}
}

// runIdiom runs script with the shell at path, dlock (the tree's) on its
// PATH and DLOCK_REDIS=redis, and returns its exit status and what its
// step wrote ("" if it did not run).
func runIdiom(t *testing.T, path, script, redis string) (code int, ran string) {
	t.Helper()
	stepFile := filepath.Join(t.TempDir(), "step")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, "-c", script)
	cmd.Env = append(withoutDlockEnv(os.Environ()), "PATH="+filepath.Dir(dlockBin)+string(os.PathListSeparator)+os.Getenv("PATH"),
		"DLOCK_REDIS="+redis, "STEP="+stepFile)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	b, _ := os.ReadFile(stepFile)
	t.Logf("%s: exit %d, step %q; output: %s", filepath.Base(path), code, b, out)
	return code, string(b)
}
