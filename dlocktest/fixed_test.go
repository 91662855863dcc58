package dlocktest

import (
	"bufio"
	"context"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// freeAddr returns a loopback address with a port nothing listens on; the
// test's lock files go to a directory of its own.
func freeAddr(t *testing.T) string {
	t.Helper()
	t.Setenv("TMPDIR", t.TempDir())
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestStartAtShared: the tests of one process that want one address share
// its server, which stops with the last of them.
func TestStartAtShared(t *testing.T) {
	addr := freeAddr(t)
	t.Run("outer", func(t *testing.T) {
		s := StartAt(t, addr)
		if s.Addr() != addr {
			t.Fatalf("server at %s, want %s", s.Addr(), addr)
		}
		t.Run("inner", func(t *testing.T) {
			if s2 := StartAt(t, addr); s2 != s {
				t.Error("a second server at one address in one process")
			}
		})
		c := s.Client()
		defer c.Close()
		if err := c.Ping(context.Background()).Err(); err != nil {
			t.Fatalf("after the inner test's cleanup: %v", err)
		}
	})
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("%s still in use after the last test that wanted it: %v", addr, err)
	}
	l.Close()
}

// TestStartAtInUse: an address that another program listens on is an
// error, and its lock file is given back.
func TestStartAtInUse(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if _, err := acquireAt(addr); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("acquireAt an address in use: %v", err)
	}
	l.Close()
	if _, err := acquireAt(addr); err != nil {
		t.Fatalf("acquireAt once the other program is gone: %v", err)
	}
	releaseAt(addr)
}

// TestStartAtTakesTurns: a process waits for another that has the
// address, and gets it once that one is done.
func TestStartAtTakesTurns(t *testing.T) {
	if addr := os.Getenv("DLOCKTEST_HOLD"); addr != "" {
		holdAt(t, addr)
		return
	}
	addr := freeAddr(t)
	child := exec.Command(os.Args[0], "-test.run=^TestStartAtTakesTurns$")
	child.Env = append(os.Environ(), "DLOCKTEST_HOLD="+addr)
	stdin, err := child.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer child.Wait()
	if line, _ := bufio.NewReader(stdout).ReadString('\n'); line != "held\n" {
		stdin.Close()
		t.Fatalf("the other process: %q", line)
	}
	got := make(chan error, 1)
	go func() {
		_, err := acquireAt(addr)
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("acquired an address another process holds: %v", err)
	case <-time.After(500 * time.Millisecond):
	}
	stdin.Close() // the other process lets go
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
		releaseAt(addr)
	case <-time.After(10 * time.Second):
		t.Fatal("not acquired within 10s of the other process's end")
	}
}

// holdAt is the other process of TestStartAtTakesTurns: it holds addr
// until its stdin closes.
func holdAt(t *testing.T, addr string) {
	s := StartAt(t, addr)
	os.Stdout.WriteString("held\n")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	_ = s
}

func TestSelects(t *testing.T) {
	for _, c := range []struct {
		pattern, name string
		doubt, want   bool
	}{
		{"", "ExampleNew", true, true},
		{"", "ExampleNew", false, false},
		{"TestX|ExampleNew", "ExampleNew", true, true},
		{"^Test", "ExampleNew", true, false},
		{"Example", "ExampleLocker_Do", false, true},
		{"TestX/sub", "ExampleNew", true, true},
		{"TestX/sub", "ExampleNew", false, false},
		{"(", "ExampleNew", true, true},
	} {
		if got := selects(c.pattern, c.name, c.doubt); got != c.want {
			t.Errorf("selects(%q, %q, %v) = %v, want %v", c.pattern, c.name, c.doubt, got, c.want)
		}
	}
}
