package dlock

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/internal/quorum"
)

// The scripts run with EVALSHA, and EVAL when the server answers NOSCRIPT
// (after a restart or SCRIPT FLUSH), which loads the script again. Each
// file's header gives its KEYS/ARGV/return contract.
var (
	//go:embed scripts/acquire.lua
	acquireSrc string
	//go:embed scripts/release.lua
	releaseSrc string
	//go:embed scripts/extend.lua
	extendSrc string
	//go:embed scripts/raise.lua
	raiseSrc string

	acquireScript = newScript(acquireSrc, 7)
	releaseScript = newScript(releaseSrc, 7)
	extendScript  = newScript(extendSrc, 5)
	raiseScript   = newScript(raiseSrc, 2)
)

// A script is a Lua script with a fixed number of keys. Its commands are
// built as one []any whose values are boxed once where they can be (the
// names of a lock's keys, a lock's token, a Locker's settings): go-redis'
// Script.Run boxes every key and argument on every call.
type script struct {
	src     string
	sha     any // the SHA1 of src, hex-encoded
	numKeys any // the number of keys, a decimal string
}

func newScript(src string, keys int) *script {
	h := sha1.Sum([]byte(src))
	return &script{src: src, sha: hex.EncodeToString(h[:]), numKeys: strconv.Itoa(keys)}
}

// args returns the command for the script: EVALSHA, its SHA1, the number of
// keys, keys (boxed, len(keys) must be the script's number of keys), then
// argv. The slice is not modified afterwards, so one command may be sent to
// several nodes at once.
func (s *script) args(keys []any, argv ...any) []any {
	a := make([]any, 0, 3+len(keys)+len(argv))
	a = append(a, "evalsha", s.sha, s.numKeys)
	a = append(a, keys...)
	return append(a, argv...)
}

// processor is what can send a command: a client or a pipeline.
type processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// cmd returns the command args (from s.args) as a *redis.Cmd whose first key
// is the script's first key, as go-redis' own EVALSHA does (a Cluster client
// routes it by that key).
func (s *script) cmd(ctx context.Context, args []any) *redis.Cmd {
	c := redis.NewCmd(ctx, args...)
	c.SetFirstKeyPos(3)
	return c
}

// run sends the command args (from s.args) to c, and sends the script itself
// with EVAL when the server does not have it (NOSCRIPT).
func (s *script) run(ctx context.Context, c processor, args []any) (any, error) {
	cmd := s.cmd(ctx, args)
	_ = c.Process(ctx, cmd)
	v, err := cmd.Result()
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		cmd = s.cmd(ctx, s.eval(args))
		_ = c.Process(ctx, cmd)
		v, err = cmd.Result()
	}
	if err != nil && olderServer(err) {
		if uc, ok := c.(redis.UniversalClient); ok {
			err = versionError(ctx, uc, err)
		}
	}
	return v, err
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
func olderServer(err error) bool {
	if !quorum.IsReply(err) {
		return false
	}
	msg := err.Error()
	for _, sign := range []string{"Unknown Redis command", "unknown command", "syntax error", "Write commands not allowed after non deterministic commands"} {
		if strings.Contains(msg, sign) {
			return true
		}
	}
	return false
}

// versionError returns err, or, when the server of c is older than
// MinRedisVersion (INFO server, bounded by ctx), an error that says so
// (permanent: see ErrMisconfigured).
func versionError(ctx context.Context, c redis.UniversalClient, err error) error {
	info, ierr := c.Info(ctx, "server").Result()
	if ierr != nil {
		return err
	}
	v := serverVersion(info)
	if v == "" || !versionBelow(v, MinRedisVersion) {
		return err
	}
	return badReply("dlock needs Redis %s or later; this server runs %s (%s)", MinRedisVersion, v, err.Error())
}

// serverVersion is redis_version from INFO's text, or "".
func serverVersion(info string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v
		}
	}
	return ""
}

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

// eval turns the command args (from s.args) into an EVAL of the script.
func (s *script) eval(args []any) []any {
	a := slices.Clone(args)
	a[0], a[1] = "eval", s.src
	return a
}
