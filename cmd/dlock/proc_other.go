//go:build unix && !linux

package main

import "syscall"

// hasPdeathsig: other Unixes have no parent-death signal; dlock run starts
// the command through a guard instead (see guard.go).
const hasPdeathsig = false

// commandAttr, with ownGroup, puts the command in its own process group, so
// that a signal reaches a shell's children too.
func commandAttr(ownGroup bool) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: ownGroup}
}
