package script

import _ "embed"

//go:embed asked.lua
var askedSrc string

// Asked is asked.lua: a release request recorded for a lock's holders and
// published to their Lockers (see the root package's asked.go).
var Asked = newScript(askedSrc, 2)

// AskedArgs are asked.lua's ARGV.
type AskedArgs struct {
	Request any // "FROM\nREASON"
	Channel any // the channel that holders' Lockers listen to
}

// Command returns asked.lua's command for keys (the lock, its requests).
func (a AskedArgs) Command(keys []any) []any { return Asked.command(keys, a.Request, a.Channel) }
