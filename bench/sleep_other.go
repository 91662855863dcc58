//go:build !linux

package bench

import "time"

func lockSleeper() (unlock func()) { return func() {} }

func preciseSleep(d time.Duration) {
	if d > 0 {
		time.Sleep(d)
	}
}
