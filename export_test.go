package dlock

import (
	"time"

	"github.com/dlock-dev/dlock/internal/quorum"
)

// CopiesKeepHooks reports whether the go-redis version in use keeps a
// client's hooks in WithTimeout copies: where it does not (v9.23), calls on a
// default client run on helper goroutines, and a Redis that refuses
// connections fails a call only when its timeout ends (go-redis retries the
// dial and the command within it).
func CopiesKeepHooks() bool { return quorum.CopiesKeepHooks() }

// VersionBelow reports whether the dotted version a is below b.
var VersionBelow = versionBelow

// SetLimitGrace sets the grace after SetLimit (LimitGrace) for a test, and
// returns the restore.
func SetLimitGrace(d time.Duration) (restore func()) {
	old := limitGrace
	limitGrace = d
	return func() { limitGrace = old }
}
