package dlock

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

// The scripts run through go-redis' Script.Run: EVALSHA, and EVAL when the
// server answers NOSCRIPT (after a restart or SCRIPT FLUSH), which loads the
// script again. Each file's header gives its KEYS/ARGV/return contract.
var (
	//go:embed scripts/acquire.lua
	acquireSrc string
	//go:embed scripts/release.lua
	releaseSrc string
	//go:embed scripts/extend.lua
	extendSrc string
	//go:embed scripts/raise.lua
	raiseSrc string

	acquireScript = redis.NewScript(acquireSrc)
	releaseScript = redis.NewScript(releaseSrc)
	extendScript  = redis.NewScript(extendSrc)
	raiseScript   = redis.NewScript(raiseSrc)
)
