package dlock

import (
	"time"

	"github.com/dlock-dev/dlock/internal/quorum"
)

// DefaultClientsInline reports whether calls on a default go-redis client
// (one that does not honour ctx deadlines) run inline with the go-redis
// version in use, through a bounded copy that runs the client's hooks;
// where they do not, they run on helper goroutines, and a Redis that
// refuses connections fails a call only when its timeout ends (go-redis
// retries the dial and the command within it).
func DefaultClientsInline() bool { return quorum.DefaultClientsInline() }

// VersionBelow reports whether the dotted version a is below b.
var VersionBelow = versionBelow

// SetLimitGrace sets the grace after SetLimit (LimitGrace) for a test, and
// returns the restore.
func SetLimitGrace(d time.Duration) (restore func()) {
	old := limitGrace
	limitGrace = d
	return func() { limitGrace = old }
}
