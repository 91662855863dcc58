package main

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
)

// guardCommand is the hidden subcommand that stands in for Linux's
// parent-death signal on systems that have none: "dlock __guard -- COMMAND
// [ARG]...", started by dlock run in the command's process group, with the
// read end of a pipe as fd 3. Only dlock holds the write end, so the read
// reaches EOF when dlock is gone, however it died (even by SIGKILL); the
// guard then kills its whole process group, the command and what it
// started. Signals dlock sends to the group reach the command directly; the
// guard only waits for the command and exits with its status.
const guardCommand = "__guard"

// guarded reports whether dlock run starts a command that is not attached
// to the terminal through a guard: where the system has no parent-death
// signal, or when $DLOCK_GUARD is 1 (to test the guard on Linux).
func guarded() bool { return !hasPdeathsig || os.Getenv("DLOCK_GUARD") == "1" }

// guardFD is the guard's end of the pipe.
const guardFD = 3

// guard runs COMMAND and kills the process group when dlock is gone.
func (c *cli) guard(args []string) int {
	if len(args) < 2 || args[0] != "--" {
		c.errorf("%s is for dlock's own use", guardCommand)
		return exitUsage
	}
	argv := args[1:]
	watch := os.NewFile(guardFD, "dlock")
	syscall.CloseOnExec(guardFD) // not for the command
	// The group's signals are for the command: the guard waits for it.
	signal.Notify(make(chan os.Signal, 1), forwarded...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = c.stdin, c.stdout, c.stderr
	if err := cmd.Start(); err != nil {
		c.errorf("cannot run %s: %s", argv[0], errText(err))
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
			return exitNotFound
		}
		return exitCannotExec
	}
	go func() {
		_, _ = io.Copy(io.Discard, watch) // EOF: dlock is gone
		_ = syscall.Kill(0, syscall.SIGKILL)
	}()
	_ = cmd.Wait()
	return exitStatus(cmd.ProcessState)
}
