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

//go:embed prefer.lua
var preferSrc string

// Prefer is prefer.lua: a waiter put first in a lock's waiting queue (see
// the root package's transfer.go).
var Prefer = newScript(preferSrc, 1)

// PreferCommand returns prefer.lua's command for keys (the waiting set)
// and the waiter's member.
func PreferCommand(keys []any, member any) []any { return Prefer.command(keys, member) }
