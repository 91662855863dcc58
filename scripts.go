package dlock

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"slices"
	"strconv"

	"github.com/redis/go-redis/v9"
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
	return v, err
}

// eval turns the command args (from s.args) into an EVAL of the script.
func (s *script) eval(args []any) []any {
	a := slices.Clone(args)
	a[0], a[1] = "eval", s.src
	return a
}
