package main

import "syscall"

// commandAttr puts the command in its own process group, so that a signal
// reaches a shell's children too, and has it killed if dlock dies (the
// parent-death signal), since its lock will then expire and another host
// start the same job.
func commandAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
