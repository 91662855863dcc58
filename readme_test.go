package dlock_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/dlocktest"
)

// TestREADMEProgram: the README's first program runs as pasted, against a
// Redis at the address it names, and prints what the README says it
// prints. It is built in a module of its own, as a user's, whose
// github.com/dlock-dev/dlock is this working tree.
func TestREADMEProgram(t *testing.T) {
	if testing.Short() {
		t.Skip("short: builds a program")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	program, output := readmeProgram(t)
	root, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "main.go"), program)
	writeFile(t, filepath.Join(dir, "go.mod"), userGoMod(t, root))
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "go.sum"), string(sum))

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	build := exec.CommandContext(ctx, gobin, "build", "-o", "try", ".")
	build.Dir = dir
	build.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build of the README's program: %v\n%s", err, out)
	}

	dlocktest.StartAt(t, "127.0.0.1:6379") // where the program looks
	run := exec.CommandContext(ctx, filepath.Join(dir, "try"))
	var stderr strings.Builder
	run.Stderr = &stderr
	got, err := run.Output()
	if err != nil {
		t.Fatalf("the README's program: %v\n%s", err, stderr.String())
	}
	if string(got) != output {
		t.Errorf("the README's program printed\n%s\nthe README says\n%s", got, output)
	}
}

// readmeProgram returns the README's first Go block that is a whole
// program, and the output shown in the text block after it ("$ go run ."
// and the lines it prints).
func readmeProgram(t *testing.T) (program, output string) {
	t.Helper()
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(readme)
	start := strings.Index(text, "```go\npackage main\n")
	if start < 0 {
		t.Fatal("README.md has no Go block with a whole program (package main)")
	}
	text = text[start+len("```go\n"):]
	end := strings.Index(text, "\n```\n")
	program, text = text[:end+1], text[end+len("\n```\n"):]
	const run = "```text\n$ go run .\n"
	if !strings.HasPrefix(strings.TrimLeft(text, "\n"), run) {
		t.Fatalf("README.md: the program is not followed by its output (%q)", run)
	}
	text = strings.TrimLeft(text, "\n")[len(run):]
	return program, text[:strings.Index(text, "```\n")]
}

// userGoMod is the go.mod of a user's module that requires this working
// tree's module as github.com/dlock-dev/dlock, and the go-redis it requires.
func userGoMod(t *testing.T, root string) string {
	t.Helper()
	mod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	var goRedis string
	for _, l := range strings.Split(string(mod), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "github.com/redis/go-redis/v9" {
			goRedis = f[1]
		}
	}
	if goRedis == "" {
		t.Fatal("go.mod requires no github.com/redis/go-redis/v9")
	}
	return "module try\n\ngo 1.23\n\n" +
		"require (\n\tgithub.com/dlock-dev/dlock v0.0.0\n\tgithub.com/redis/go-redis/v9 " + goRedis + "\n)\n\n" +
		"replace github.com/dlock-dev/dlock => " + root + "\n"
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
