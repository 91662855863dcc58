package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestMakeDemoInstallsOnlyRedis: make demo runs the scripts it runs (make
// -n), and of the packages they install only redis-server (README: "the
// commands install Debian's redis-server when it is missing"); the clock
// faults' libfaketime is for the tests, not the demo.
func TestMakeDemoInstallsOnlyRedis(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("make", "-n", "-C", root, "--no-print-directory", "demo").CombinedOutput()
	if err != nil {
		t.Fatalf("make -n demo: %v\n%s", err, out)
	}
	install := regexp.MustCompile(`apt-get install[^\n]*`)
	var packages []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		cmd := strings.Fields(line)
		if len(cmd) == 0 {
			continue
		}
		if strings.HasPrefix(cmd[0], "./scripts/") {
			src, err := os.ReadFile(filepath.Join(root, cmd[0]))
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range install.FindAllString(string(src), -1) {
				for _, w := range strings.Fields(m)[2:] {
					if strings.ContainsAny(w, "()<>|&;") {
						break // the end of the command
					}
					if !strings.HasPrefix(w, "-") && w != "redis-server" {
						packages = append(packages, w)
					}
				}
			}
			continue
		}
		if line != "go run ./cmd/dlock demo" {
			t.Errorf("make demo runs %q, want only the scripts that make sure redis-server is there and the demo", line)
		}
	}
	if len(packages) > 0 {
		t.Errorf("make demo installs %v besides redis-server", packages)
	}
}
