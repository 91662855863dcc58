package script

import _ "embed"

// The scripts that change what a holder holds: a semaphore's limit
// (setlimit.lua, after limitstate.lua read it on the nodes), a leader's
// value (proclaim.lua), a new leader's announcement with the count of
// terms (elected.lua), and the expiry of that count while the leader
// holds (keepterms.lua).
var (
	//go:embed setlimit.lua
	setLimitSrc string
	//go:embed limitstate.lua
	limitStateSrc string
	//go:embed proclaim.lua
	proclaimSrc string
	//go:embed elected.lua
	electedSrc string
	//go:embed keepterms.lua
	keepTermsSrc string

	SetLimit   = newScript(include(setLimitSrc), 9)
	LimitState = newScript(limitStateSrc, 9)
	Proclaim   = newScript(proclaimSrc, 2)
	Elected    = newScript(electedSrc, 2)
	KeepTerms  = newScript(keepTermsSrc, 2)
)

// SetLimitArgs are setlimit.lua's ARGV (see its header); the waking ones
// are a Waker's.
type SetLimitArgs struct {
	Limit, Grace, Old, Op, Token, ReadAt any
	Waker                                Waker
}

// Command is the command of setlimit.lua with keys (SetLimitKeys) and a.
func (a SetLimitArgs) Command(keys []any) []any {
	return SetLimit.command(keys, a.Limit, a.Waker.InboxPrefix, a.Waker.Reserve, a.Grace, a.Waker.Listeners, a.Waker.SlotTag,
		a.Old, a.Op, a.Token, a.ReadAt)
}

// LimitStateCommand is the command of limitstate.lua with keys
// (SetLimitKeys).
func LimitStateCommand(keys []any) []any { return LimitState.command(keys) }

// ProclaimCommand is the command of proclaim.lua with keys (the lock and
// its metadata), token and value.
func ProclaimCommand(keys []any, token, value any) []any {
	return Proclaim.command(keys, token, value)
}

// ElectedArgs are elected.lua's ARGV (see its header).
type ElectedArgs struct {
	Token, Term, Life, Channel, Announcement any
}

// Command is the command of elected.lua with keys (the lock and its
// terms) and a.
func (a ElectedArgs) Command(keys []any) []any {
	return Elected.command(keys, a.Token, a.Term, a.Life, a.Channel, a.Announcement)
}

// KeepTermsCommand is the command of keepterms.lua with keys (the lock and
// its terms: ElectedKeys), token and life (ms, a decimal string).
func KeepTermsCommand(keys []any, token, life any) []any {
	return KeepTerms.command(keys, token, life)
}
