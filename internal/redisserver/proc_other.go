//go:build unix && !linux

package redisserver

import "syscall"

// procAttr puts a server in its own process group. Without Linux's
// parent-death signal, a server outlives a test process that is killed
// before its Cleanup runs.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
