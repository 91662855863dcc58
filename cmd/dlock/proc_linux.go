package main

import (
	"os"
	"syscall"
	"unsafe"
)

// hasPdeathsig: Linux kills the command when dlock dies (see commandAttr).
const hasPdeathsig = true

// commandAttr has the command killed if dlock dies (the parent-death
// signal), since its lock will then expire and another host start the same
// job; with ownGroup, it also puts the command in its own process group, so
// that a signal reaches a shell's children too.
func commandAttr(ownGroup bool) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: ownGroup, Pdeathsig: syscall.SIGKILL}
}

// isTTY reports whether f is a terminal.
func isTTY(f *os.File) bool {
	var t syscall.Termios
	_, _, errno := syscall.Syscall(syscall.SYS_IOCTL, f.Fd(), syscall.TCGETS, uintptr(unsafe.Pointer(&t)))
	return errno == 0
}
