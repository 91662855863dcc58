package history

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/dlocktest"
)

// The history checker's clock faults (make reliability, DLOCK_RELIABILITY=1,
// where libfaketime must be installed): each server runs under libfaketime
// (see the root package's clock_test.go), and a fault jumps one server's clock forward by 3s
// (more than the checker's TTL: its keys expire at once), or steps it back
// by 2s (more than the fence's floor, a second; a small step, since a step
// back lengthens every key's life by as much). The checker counts an
// overlap whose earlier holder held while a clock jumped forward as the
// clock limit (DESIGN §6), not as a violation; the fences must still
// increase.

const (
	historyJumpForward = 3 // seconds
	historyStepBack    = 2
)

// historyClocks are the clock files of a run's servers and their offsets,
// in seconds (changed by the fault loop alone).
type historyClocks struct {
	preload string
	files   []string
	offsets []int
}

// newHistoryClocks returns the clocks of n servers, or nil outside make
// reliability.
func newHistoryClocks(t *testing.T, n int) *historyClocks {
	if os.Getenv("DLOCK_RELIABILITY") != "1" {
		return nil
	}
	preload, err := FakeClockLibs()
	if err != nil {
		t.Fatal(err)
	}
	c := &historyClocks{preload: preload, offsets: make([]int, n)}
	for range n {
		f := filepath.Join(t.TempDir(), "faketime")
		if err := os.WriteFile(f, []byte("+0\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		c.files = append(c.files, f)
	}
	return c
}

// options are server i's: libfaketime's environment (kept by a restart).
func (c *historyClocks) options(i int) []dlocktest.Option {
	if c == nil {
		return nil
	}
	return []dlocktest.Option{dlocktest.WithEnv("LD_PRELOAD="+c.preload, "FAKETIME_TIMESTAMP_FILE="+c.files[i],
		"FAKETIME_NO_CACHE=1", "FAKETIME_DONT_FAKE_MONOTONIC=1")}
}

// fault jumps node's clock forward or steps it back, and returns the
// fault's kind.
func (c *historyClocks) fault(node int, forward bool) string {
	kind := "redis-server clock jumped forward over the TTL"
	if forward {
		c.offsets[node] += historyJumpForward
	} else {
		kind = "redis-server clock stepped back"
		c.offsets[node] -= historyStepBack
	}
	_ = os.WriteFile(c.files[node], []byte(fmt.Sprintf("%+d\n", c.offsets[node])), 0o600)
	time.Sleep(10 * time.Millisecond)
	return kind
}

// clockJumpedDuring reports whether a server's clock jumped forward at some
// time in [from, to].
func (h *historyRun) clockJumpedDuring(from, to int64) bool {
	for _, f := range h.faults {
		if f.kind == "redis-server clock jumped forward over the TTL" && f.start.UnixNano() <= to && f.end.UnixNano() >= from {
			return true
		}
	}
	return false
}

// sharedMark marks a shared hold in the checker's details.
func sharedMark(shared bool) string {
	if shared {
		return ", shared"
	}
	return ""
}

// clockNote lists the first overlaps counted as the clock limit.
func clockNote(details []string) string {
	if len(details) == 0 {
		return ""
	}
	return "; overlaps after a forward jump: " + strings.Join(details, "; ")
}

// FakeClockLibs returns what LD_PRELOAD needs, or why it is missing.
func FakeClockLibs() (string, error) {
	var libs []string
	for _, pattern := range []string{"/usr/lib/*/libc_malloc_debug.so.0", "/usr/lib/*/faketime/libfaketime.so.1"} {
		m, _ := filepath.Glob(pattern)
		if len(m) == 0 {
			return "", fmt.Errorf("no %s (install Debian's libfaketime; glibc 2.34 or later)", pattern)
		}
		libs = append(libs, m[0])
	}
	return libs[0] + " " + libs[1], nil
}
