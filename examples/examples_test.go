package examples_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/dlocktest"
)

// examples are the programs, each with what its output must show: lines
// that must come in this order (each a regular expression matching a whole
// line; other lines may come between them), and lines that must come a
// given number of times, in any order.
var examples = []struct {
	name    string
	inOrder []string
	counts  map[string]int
}{
	{
		name: "cron",
		inOrder: []string{
			`3 instances run the job "example:cron:nightly-report" every 500ms, from .*`,
			`tick 1: the job ran 1 time\(s\)`,
			`tick 2: the job ran 1 time\(s\)`,
			`tick 3: the job ran 1 time\(s\)`,
			`ran the job once per tick`,
		},
		// Which instance wins a tick is up to the scheduler (each tick
		// has another one first, 40ms ahead): not checked.
		counts: map[string]int{
			`instance-\d: tick 1: got the lock \(fence \d+\), running the job`: 1,
			`instance-\d: tick 2: got the lock \(fence \d+\), running the job`: 1,
			`instance-\d: tick 3: got the lock \(fence \d+\), running the job`: 1,
			`instance-\d: tick \d: job done, lock released`:                    3,
			`instance-\d: tick 1: skipped, another instance runs it`:           2,
			`instance-\d: tick 2: skipped, another instance runs it`:           2,
			`instance-\d: tick 3: skipped, another instance runs it`:           2,
		},
	},
	{
		name: "payout",
		inOrder: []string{
			`worker-a: account 1: paid 30, balance 70 \(fence \d+\)`,
			`worker-a: account 2: paid 45, balance 55 \(fence \d+\)`,
			`worker-a: account 3: paid 20, balance 80 \(fence \d+\)`,
			`worker-a: account 2: took the lock \(fence \d+\) to pay 25, then paused past its lease`,
			`worker-b: account 2: took the lock \(fence \d+ > \d+\), paid 25`,
			`worker-a: account 2: refused stale write: fence \d+, the row has seen \d+; the payout is not made twice`,
			`account 1: balance 70`,
			`account 2: balance 30`,
			`account 3: balance 80`,
			`paid each payout once`,
		},
	},
	{
		name: "ratelimit",
		inOrder: []string{
			`8 workers call an API that allows 3 calls at once, .*`,
			`8 calls, at most 3 at once \(limit 3\), 0 refused by the API`,
		},
		counts: map[string]int{
			`worker-\d\.\d: got a permit, calling the API: [123] of 3 in flight`: 8,
			`worker-\d\.\d: call done, releasing the permit`:                     8,
		},
	},
	{
		name: "leader",
		inOrder: []string{
			`observer: no leader`,
			`candidate-a: elected, term \d+`,
			`observer: leader is candidate-a \(term \d+\)`,
			`candidate-b: campaigning, waits while candidate-a leads`,
			`candidate-a: scheduled job 3 as leader of term \d+`,
			`candidate-a: resigned`,
			`observer: leader is candidate-b \(term \d+\)`,
			`candidate-b: took over, term \d+ \(after \d+\)`,
			`Leader: candidate-b, term \d+`,
			`candidate-b: resigned`,
			`observer: no leader`,
			`the leadership passed from candidate-a to candidate-b`,
		},
	},
	{
		name: "fencedredis",
		inOrder: []string{
			`writer-a: took the lock \(fence \d+\), wrote "draft by writer-a"`,
			`writer-a: pauses past its lease`,
			`writer-b: took the lock \(fence \d+\), wrote "final by writer-b"`,
			`writer-a: refused stale write: fence \d+, the value has seen \d+`,
			`the report is "final by writer-b"`,
			`writer-b: counter 0 -> 1 \(fence \d+\)`,
			`writer-b: counter 1 -> 2 \(fence \d+\)`,
		},
	},
}

var (
	// binDir holds the examples' binaries, built once by TestMain.
	binDir string
	// redisAddr is the redis-server that TestMain starts for the examples.
	redisAddr string
)

func TestMain(m *testing.M) {
	os.Exit(func() int {
		dir, err := os.MkdirTemp("", "dlock-examples-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		if err := build(dir); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		binDir = dir
		return dlocktest.Main(m, 1, func(s []*dlocktest.Server) { redisAddr = s[0].Addr() })
	}())
}

// build builds every example into dir, with the race detector when the
// tests have it, so that a data race in an example fails its test.
func build(dir string) error {
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	args := []string{"build", "-o", dir + string(filepath.Separator)}
	if raceEnabled {
		args = append(args, "-race")
	}
	for _, ex := range examples {
		args = append(args, "./"+ex.name)
	}
	if out, err := exec.Command(goTool, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

// runExample runs the example name with $REDIS_ADDR set to addr and
// returns its stdout, its stderr and its exit code.
func runExample(t *testing.T, name, addr string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, name))
	cmd.Env = append(os.Environ(), "REDIS_ADDR="+addr)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	cmd.WaitDelay = time.Second
	start := time.Now()
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("%s did not finish in 30s\nstdout:\n%s\nstderr:\n%s", name, out.String(), errOut.String())
	}
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatalf("%s: %v", name, err)
	}
	t.Logf("%s ran in %s", name, time.Since(start).Round(time.Millisecond))
	return out.String(), errOut.String(), cmd.ProcessState.ExitCode()
}

// TestExamples runs every example against a real redis-server and checks
// its output.
func TestExamples(t *testing.T) {
	for _, ex := range examples {
		t.Run(ex.name, func(t *testing.T) {
			t.Parallel()
			stdout, stderr, code := runExample(t, ex.name, redisAddr)
			if code != 0 || stderr != "" {
				t.Fatalf("exit code %d, want 0; stderr:\n%s\nstdout:\n%s", code, stderr, stdout)
			}
			lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
			if problems := check(lines, ex.inOrder, ex.counts); len(problems) > 0 {
				t.Errorf("%s\noutput:\n%s", strings.Join(problems, "\n"), stdout)
			}
		})
	}
}

// check returns what is wrong with lines: a line of inOrder missing, or out
// of order, or a line of counts that comes a number of times other than
// the one given.
func check(lines, inOrder []string, counts map[string]int) []string {
	var problems []string
	i := 0
	for _, want := range inOrder {
		re := regexp.MustCompile("^" + want + "$")
		for i < len(lines) && !re.MatchString(lines[i]) {
			i++
		}
		if i == len(lines) {
			problems = append(problems, fmt.Sprintf("no line %q (in this order)", want))
			i = 0 // look for the others from the start
			continue
		}
		i++
	}
	for want, n := range counts {
		re := regexp.MustCompile("^" + want + "$")
		got := 0
		for _, l := range lines {
			if re.MatchString(l) {
				got++
			}
		}
		if got != n {
			problems = append(problems, fmt.Sprintf("%d lines %q, want %d", got, want, n))
		}
	}
	return problems
}

// TestExamplesWithoutRedis: an example that cannot reach Redis says so, with
// a hint, and exits 1.
func TestExamplesWithoutRedis(t *testing.T) {
	const addr = "127.0.0.1:1" // nothing listens on port 1
	for _, ex := range examples {
		t.Run(ex.name, func(t *testing.T) {
			t.Parallel()
			stdout, stderr, code := runExample(t, ex.name, addr)
			want := regexp.MustCompile(`^` + ex.name + `: no Redis at 127\.0\.0\.1:1 \(set REDIS_ADDR to its host:port\): .*\n$`)
			if code != 1 || !want.MatchString(stderr) {
				t.Errorf("exit code %d, want 1; stderr %q, want a match of %q; stdout:\n%s", code, stderr, want, stdout)
			}
		})
	}
}

// TestCheck: check finds what is missing, out of order or miscounted.
func TestCheck(t *testing.T) {
	lines := []string{"a 1", "b", "c", "b"}
	for _, tc := range []struct {
		inOrder []string
		counts  map[string]int
		want    int
	}{
		{inOrder: []string{`a \d`, "c"}, counts: map[string]int{"b": 2}, want: 0},
		{inOrder: []string{"c", `a \d`}, want: 1},
		{inOrder: []string{"a"}, want: 1},
		{counts: map[string]int{"b": 1, "d": 0, "e": 1}, want: 2},
	} {
		if got := check(lines, tc.inOrder, tc.counts); len(got) != tc.want {
			t.Errorf("check(%q, %q, %v) = %q, want %d problem(s)", lines, tc.inOrder, tc.counts, got, tc.want)
		}
	}
}
