package redisserver

import "syscall"

// procAttr puts a server in its own process group and kills it if the test
// process dies (the parent-death signal), so that no server outlives a
// crashed or killed test.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
