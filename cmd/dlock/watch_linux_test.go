package main

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/dlocktest"
)

// TestStatusWatchTerminal: on a terminal, each refresh clears the screen
// and shows a header line with the time; with --json, never an escape code.
func TestStatusWatchTerminal(t *testing.T) {
	t.Parallel()
	s := dlocktest.Start(t)
	for _, tc := range []struct {
		name  string
		flags []string
		want  string // twice at least
	}{
		{"text", nil, clearScreen + watchHeader + s.Addr() + ", "},
		{"json", []string{"--json"}, `{"time":"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			master, slave := openPTY(t)
			defer master.Close()
			var mu sync.Mutex
			var out bytes.Buffer
			read := make(chan struct{}, 1)
			go func() {
				buf := make([]byte, 4096)
				for {
					n, err := master.Read(buf)
					mu.Lock()
					out.Write(buf[:n])
					mu.Unlock()
					select {
					case read <- struct{}{}:
					default:
					}
					if err != nil {
						return
					}
				}
			}()
			output := func() string {
				mu.Lock()
				defer mu.Unlock()
				return out.String()
			}

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var stderr syncBuffer
			done := make(chan int, 1)
			args := append([]string{"status", "--watch", "--interval", "10ms", "--redis", s.URL()}, tc.flags...)
			go func() { done <- run(ctx, append(args, "job"), strings.NewReader(""), slave, &stderr) }()
			timeout := time.After(20 * time.Second)
			for strings.Count(output(), tc.want) < 2 {
				select {
				case <-read:
				case <-timeout:
					t.Fatalf("no two refreshes within 20s: %q; stderr: %s", output(), stderr.String())
				}
			}
			cancel()
			if code := <-done; code != exitOK {
				t.Errorf("interrupted: exit %d, want 0", code)
			}
			slave.Close()
			got := output()
			if tc.name == "text" && !strings.Contains(got, "\r\n\r\nkey:      job\r\nheld:     no\r\n") {
				t.Errorf("no status under the header: %q", got)
			}
			if tc.name == "json" && strings.Contains(got, "\x1b") {
				t.Errorf("escape codes with --json: %q", got)
			}
		})
	}
}
