package bench

import (
	"runtime"
	"syscall"
	"time"
)

const prSetTimerslack = 29

// lockSleeper gives the calling goroutine a thread of its own whose timer
// slack is 1ns, for preciseSleep; the returned function gives the thread
// back (with the default slack). It must be called before the goroutine
// ends: a thread still locked then is ended, and a redis-server that was
// started from it gets its parent-death signal (dlocktest starts servers
// with Pdeathsig, which fires when the thread that forked them exits).
func lockSleeper() (unlock func()) {
	runtime.LockOSThread()
	_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, prSetTimerslack, 1, 0)
	return func() {
		_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, prSetTimerslack, 0, 0) // 0: the default
		runtime.UnlockOSThread()
	}
}

// preciseSleep sleeps for d with nanosleep, which blocks the thread rather
// than waiting on the Go runtime's timers (whose sub-millisecond waits last
// a millisecond when the process is otherwise idle).
func preciseSleep(d time.Duration) {
	if d <= 0 {
		return
	}
	ts := syscall.NsecToTimespec(int64(d))
	for {
		var left syscall.Timespec
		if err := syscall.Nanosleep(&ts, &left); err != syscall.EINTR {
			return
		}
		ts = left
	}
}
