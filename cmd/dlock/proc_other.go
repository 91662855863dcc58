//go:build unix && !linux

package main

import "syscall"

// commandAttr, with ownGroup, puts the command in its own process group, so
// that a signal reaches a shell's children too. Other Unixes have no
// parent-death signal: if dlock is killed with SIGKILL, the command goes on
// running while its lock expires (forwarded signals and a lost lock still
// reach it).
func commandAttr(ownGroup bool) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: ownGroup}
}
