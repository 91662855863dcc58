package dlock

import (
	"context"
	"strconv"
	"strings"

	"github.com/dlock-dev/dlock/internal/node"
	"github.com/dlock-dev/dlock/internal/quorum"
	"github.com/dlock-dev/dlock/internal/script"
	"github.com/dlock-dev/dlock/internal/serverinfo"
)

// runOn runs a script's command (args, from one of internal/script's
// builders) with c; an error that shows a server older than
// MinRedisVersion says so.
func runOn(ctx context.Context, c node.Conn, s *script.Script, args []any) (any, error) {
	return runOnCounted(ctx, c, s, args, nil)
}

// runOnCounted is runOn, with the copies of the command written counted by
// cp unless it is nil (see script.RunCounted: args must then be the
// caller's own).
func runOnCounted(ctx context.Context, c node.Conn, s *script.Script, args []any, cp *node.Copies) (any, error) {
	v, err := s.RunCounted(ctx, c, args, cp)
	if err != nil && olderServer(err) {
		err = versionError(ctx, c, err)
	}
	return v, noScripting(err)
}

// MinRedisVersion is the oldest Redis version that dlock's scripts run on:
// the newest command they call is ZPOPMIN, of Redis 5.0 (the tests check
// every command and option against the server's COMMAND DOCS). dlock is
// tested on Redis 7. On an older server a script fails, and the error wraps
// ErrMisconfigured and names this version.
const MinRedisVersion = "5.0.0"

// olderServer reports whether err is how a server older than
// MinRedisVersion fails one of the scripts: a command it does not know, an
// option it does not know (a syntax error), or a write after TIME, which
// Redis before 5.0 refuses unless scripts are replicated by their effects.
// The words are compared without case: Redis says "Unknown Redis command
// called from script", Valkey "Unknown command called from script".
func olderServer(err error) bool {
	if !quorum.IsReply(err) {
		return false
	}
	msg := strings.ToLower(err.Error())
	for _, sign := range []string{"unknown redis command", "unknown command", "syntax error", "write commands not allowed after non deterministic commands"} {
		if strings.Contains(msg, sign) {
			return true
		}
	}
	return false
}

// versionError returns err, or, when the server of c is older than
// MinRedisVersion (INFO server, bounded by ctx), an error that says so
// (permanent: see ErrMisconfigured).
func versionError(ctx context.Context, c node.Conn, err error) error {
	info, ierr := c.Do(ctx, "info", "server")
	if ierr != nil {
		return err
	}
	v := serverVersion(node.String(info))
	if v == "" || !versionBelow(v, MinRedisVersion) {
		return err
	}
	return script.BadReply("dlock needs Redis %s or later; this server runs %s (%s)", MinRedisVersion, v, err.Error())
}

// serverVersion is redis_version from INFO's text, or "".
func serverVersion(info string) string { return serverinfo.Field(info, "redis_version") }

// versionBelow reports whether the dotted version a is below b.
func versionBelow(a, b string) bool {
	pa, pb := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < max(len(pa), len(pb)); i++ {
		var x, y int
		if i < len(pa) {
			x, _ = strconv.Atoi(pa[i])
		}
		if i < len(pb) {
			y, _ = strconv.Atoi(pb[i])
		}
		if x != y {
			return x < y
		}
	}
	return false
}
