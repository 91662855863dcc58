package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
)

// openPTY opens a pseudo-terminal pair.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	var unlock int32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, m.Fd(), syscall.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); e != 0 {
		t.Fatal(e)
	}
	var n uint32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, m.Fd(), syscall.TIOCGPTN, uintptr(unsafe.Pointer(&n))); e != 0 {
		t.Fatal(e)
	}
	s, err := os.OpenFile("/dev/pts/"+strconv.Itoa(int(n)), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	return m, s
}

// terminal is an interactive bash with job control on a pseudo-terminal,
// typed into as a user would.
type terminal struct {
	t      *testing.T
	master *os.File
	mu     sync.Mutex
	out    strings.Builder
	seen   int // output before this was matched already
}

func newTerminal(t *testing.T) *terminal {
	t.Helper()
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	master, slave := openPTY(t)
	sh := exec.Command("bash", "--norc", "--noprofile", "-i")
	sh.Stdin, sh.Stdout, sh.Stderr = slave, slave, slave
	sh.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	sh.Env = append(withoutDlockEnv(os.Environ()), "PS1=$ ", "TERM=dumb",
		"PATH="+filepath.Dir(dlockBin)+string(os.PathListSeparator)+os.Getenv("PATH"))
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	slave.Close()
	term := &terminal{t: t, master: master}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 4096)
		for {
			n, err := master.Read(buf)
			term.mu.Lock()
			term.out.Write(buf[:n])
			term.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() {
		// Every process of the session: bash and the jobs it started
		// (a stopped one too).
		killSession(sh.Process.Pid)
		_ = sh.Wait()
		_ = master.SetReadDeadline(time.Now())
		master.Close()
		<-done
	})
	return term
}

// killSession sends SIGKILL to every process of the session sid, found in
// /proc (the test's own processes only: the session is the test's bash).
func killSession(sid int) {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if fields := procStat(pid); len(fields) > 3 && fields[3] == strconv.Itoa(sid) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

func (term *terminal) typ(s string) {
	if _, err := term.master.Write([]byte(s)); err != nil {
		term.t.Fatal(err)
	}
}

// expect waits for want in the output that follows the last match.
func (term *terminal) expect(want string) {
	term.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		term.mu.Lock()
		out := term.out.String()
		i := strings.Index(out[term.seen:], want)
		if i >= 0 {
			term.seen += i + len(want)
		}
		term.mu.Unlock()
		if i >= 0 {
			return
		}
		if time.Now().After(deadline) {
			term.t.Fatalf("no %q on the terminal within 20s; it shows:\n%s", want, out[term.seen:])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestInteractive: with a terminal on stdin, dlock run behaves like flock(1)
// under a shell: the command reads the terminal, Ctrl-C reaches it, Ctrl-Z
// stops the job and fg resumes it; a lock lost while the job was stopped
// stops the command when it resumes (exit 76).
func TestInteractive(t *testing.T) {
	t.Parallel()
	s := dlocktest.Start(t)
	admin := s.Client()
	defer admin.Close()
	held := func(key string) func() bool {
		return func() bool { return admin.Exists(context.Background(), "dlock:{"+key+"}").Val() == 1 }
	}
	term := newTerminal(t)
	run := "dlock run --redis " + s.URL() + " "
	reader := ` -- sh -c 'read l; echo got-"$l"'; echo "status=$?"` + "\n"

	t.Run("the command reads the terminal", func(t *testing.T) {
		term.typ(run + "read" + reader)
		waitUntil(t, held("read"), "the lock to be taken")
		term.typ("hello\n")
		term.expect("got-hello")
		term.expect("status=0")
	})
	t.Run("Ctrl-C reaches the command", func(t *testing.T) {
		term.typ(run + "interrupt -- sleep 60; echo \"status=$?\"\n")
		waitUntil(t, held("interrupt"), "the lock to be taken")
		term.typ("\x03")
		term.expect("status=130")
		waitUntil(t, func() bool { return !held("interrupt")() }, "the lock to be released")
	})
	t.Run("Ctrl-Z stops the job, fg resumes it", func(t *testing.T) {
		// Without "; echo" on the line: bash goes on with a list when a
		// job of it stops; fg reports the job's status.
		term.typ(run + "--ttl 30s stop -- sh -c 'read l; echo got-\"$l\"'\n")
		waitUntil(t, held("stop"), "the lock to be taken")
		term.typ("\x1a")
		term.expect("Stopped")
		term.typ("fg; echo \"status=$?\"\n")
		term.typ("later\n")
		term.expect("got-later")
		term.expect("status=0")
	})
	t.Run("lost while stopped: stopped on fg, exit 76", func(t *testing.T) {
		// The command says it runs (a word the typed line does not show
		// as such) before Ctrl-Z: the key in Redis alone does not tell
		// that dlock has its answer, and a job stopped before it did
		// learns it too late (exit 69, not 76).
		term.typ(run + "--ttl 500ms lost -- sh -c 'echo \"run\"\"ning\"; read l; echo got-\"$l\"'\n")
		waitUntil(t, held("lost"), "the lock to be taken")
		term.expect("running")
		term.typ("\x1a")
		term.expect("Stopped")
		// Stopped past its TTL: the lock expires and another process
		// takes it.
		l := dlock.New(admin)
		defer l.Close()
		k, err := l.Acquire(ctxTimeout(t, 10*time.Second), "lost")
		if err != nil {
			t.Fatal(err)
		}
		defer k.Release(context.Background())
		term.typ("fg; echo \"status=$?\"\n")
		term.expect("status=76")
	})
}

// waitUntil polls cond, an observation of Redis, for up to 10s.
func waitUntil(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// TestInteractiveLostStopsTheJob: the same as
// TestRunLockLostKillsProcessGroup, with a terminal on stdin (interactive
// mode: the command shares dlock's process group, and only the command's
// own pid is signalled). After the lock is lost and dlock exits 76, the
// command's background child is still running without the lock.
func TestInteractiveLostStopsTheJob(t *testing.T) {
	s := dlocktest.Start(t)
	master, slave := openPTY(t)
	defer master.Close()
	defer slave.Close()
	var outMu sync.Mutex
	var out strings.Builder
	go func() { // drain the terminal
		buf := make([]byte, 4096)
		for {
			n, err := master.Read(buf)
			outMu.Lock()
			out.Write(buf[:n])
			outMu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	defer func() { outMu.Lock(); t.Logf("terminal: %q", out.String()); outMu.Unlock() }()
	pidFile := filepath.Join(t.TempDir(), "pid")
	cmd := exec.Command(dlockBin, "run", "--redis", s.URL(), "--ttl", "4s", "--kill-grace", "1s", "job", "--",
		"sh", "-c", "sleep 60 & echo $! > "+pidFile+"; wait")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // its own group, for clean-up by the test
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var sleepPid int
	deadline := time.Now().Add(10 * time.Second)
	for sleepPid == 0 && time.Now().Before(deadline) {
		b, _ := os.ReadFile(pidFile)
		sleepPid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		time.Sleep(20 * time.Millisecond)
	}
	if sleepPid == 0 {
		t.Fatal("no grandchild")
	}
	defer syscall.Kill(sleepPid, syscall.SIGKILL) // the grandchild this test started
	n, err := newLocker(t, s).ForceRelease(context.Background(), "job")
	if err != nil || n != 1 {
		t.Fatalf("ForceRelease: %d, %v", n, err)
	}
	_ = cmd.Wait()
	code := cmd.ProcessState.ExitCode()
	time.Sleep(200 * time.Millisecond)
	alive := running(sleepPid)
	t.Logf("dlock exited %d; grandchild %d alive: %v", code, sleepPid, alive)
	if code != exitLockLost {
		t.Errorf("exit %d, want %d", code, exitLockLost)
	}
	if alive {
		t.Errorf("the command's child (pid %d) still runs after dlock reported the lock lost and exited", sleepPid)
	}
}

// running reports whether pid runs: exists and is not a zombie (an orphan
// that was killed may wait a while for its reaping).
func running(pid int) bool {
	fields := procStat(pid)
	return len(fields) > 0 && fields[0] != "Z"
}

// procStat returns the fields of /proc/PID/stat after "pid (comm)": state,
// ppid, pgrp, session, ... (comm may hold spaces); nil if pid is gone.
func procStat(pid int) []string {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil
	}
	return strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
}
