package history

// Sabotage, for the explorer's self-test (TestExploreSabotage in the root
// package): a defect planted in the library for a run, which the
// explorer must report. A script's defect is planted by the command-level
// wrapper, which sends the sabotaged script's text (EVAL) in place of the
// library's EVALSHA; Close's, by the harness (see closeSlot). Nothing of
// the library is changed.

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/internal/script"
)

// A plant is one edit of a script: old is replaced by new (each of the
// alternatives in old that the script holds; at least one must).
type plant struct {
	s        *script.Script
	old      []string
	new      string
	optional bool // the script may lack it (another script of the set has it)
}

// Sabotages are the defects the self-test plants, by name, with the checks
// of which one at least must report each.
var Sabotages = map[string]struct {
	Checks []string
	plants []plant
}{
	// Release deletes the key whatever it holds: a holder that lost its
	// lock (or a late copy of its release) deletes the next holder's.
	"release without the owner check": {[]string{"exclusion"}, []plant{
		{s: script.Unlock, old: []string{"if redis.pcall('GET', KEYS[2]) ~= ARGV[1] then"}, new: "if redis.pcall('GET', KEYS[2]) == false then"},
		{s: script.Release, old: []string{"elseif v ~= ARGV[1] then"}, new: "elseif not v then"},
	}},
	// A fence is the counter plus one, the server's clock aside: a counter
	// lost (a server restarted empty) starts the fences again from 1.
	"fence without the clock floor": {[]string{"fence"}, []plant{
		{s: script.Lock, old: []string{"fence = t[1] .. string.format('%06d', tonumber(t[2]))"}, new: "fence = '1'"},
		{s: script.Lock, old: []string{"elseif #c > #floor or (#c == #floor and c >= floor) then"}, new: "elseif true then"},
		{s: script.Acquire, old: []string{"fence = t[1] .. string.format('%06d', tonumber(t[2]))"}, new: "fence = '1'"},
		{s: script.Acquire, old: []string{"if c and (#c > #floor or (#c == #floor and c >= floor)) then"}, new: "if c then"},
	}},
	// A semaphore grants one permit over its limit.
	"limit check off by one": {[]string{"limit"}, []plant{
		{s: script.Semaphore, old: []string{"(resv and live <= limit) or live < limit then"}, new: "(resv and live <= limit + 1) or live < limit + 1 then"},
	}},
	// Adopt takes a hold in any shape.
	"Adopt without the shape check": {[]string{"shape"}, []plant{
		{s: script.Adopt, old: []string{"if live >= cap or (live > 0 and held and held ~= ARGV[5]) then"}, new: "if false then"},
		{s: script.Adopt, old: []string{"if ty ~= 'zset' and ty ~= 'none' then"}, new: "if false then", optional: true},
		// adopt.lua's own check of the key's type and stored limit.
		{s: script.Adopt, old: []string{"if limit ~= '1' then"}, new: "if false then", optional: true},
	}},
	// Close releases the locks its Locker detached (planted by the harness):
	// an Adopt after it fails, or the adopter loses its hold, or another
	// takes the key beside it.
	"Close releases detached locks": {[]string{"Adopt untrue", "exclusion", "lost untrue", "ErrNotHeld untrue"}, nil},
}

// sabotage is a run's planted defect: the sabotaged text of each script
// it changes, by the script's SHA1 and by its text.
type sabotage struct {
	name  string
	bySHA map[any]string
	bySrc map[string]string
}

// newSabotage plants the named sabotage ("" none); it panics on an unknown
// name or an edit whose text no longer is in the script.
func newSabotage(name string) *sabotage {
	s := &sabotage{name: name, bySHA: map[any]string{}, bySrc: map[string]string{}}
	if name == "" {
		return s
	}
	sb, ok := Sabotages[name]
	if !ok {
		panic("history: no sabotage " + name)
	}
	text := map[*script.Script]string{}
	for _, p := range sb.plants {
		src, ok := text[p.s]
		if !ok {
			src = p.s.Source()
		}
		found := false
		for _, o := range p.old {
			if strings.Contains(src, o) {
				src, found = strings.ReplaceAll(src, o, p.new), true
			}
		}
		if !found && !p.optional {
			panic(fmt.Sprintf("history: sabotage %q: none of %q is in the script any more: update the plant (sabotage.go)", name, p.old))
		}
		text[p.s] = src
	}
	for sc, src := range text {
		s.bySHA[sc.SHA()] = src
		s.bySrc[sc.Source()] = src
	}
	return s
}

// restarts reports a sabotage that only a server restarted empty shows.
func (s *sabotage) restarts() bool { return s.name == "fence without the clock floor" }

// closeReleases reports the sabotage of Close.
func (s *sabotage) closeReleases() bool { return s.name == "Close releases detached locks" }

// sabotaged is args with the sabotaged script in place of the library's.
func (x *exploreRun) sabotaged(args []any) []any {
	if len(x.sab.bySHA) == 0 || len(args) < 2 {
		return args
	}
	name, _ := args[0].(string)
	arg := argText(args[1])
	var src string
	var ok bool
	switch strings.ToLower(name) {
	case "evalsha":
		src, ok = x.sab.bySHA[arg]
	case "eval":
		src, ok = x.sab.bySrc[arg]
	}
	if !ok {
		return args
	}
	out := append([]any{"eval", src}, args[2:]...)
	return out
}

// argText is a command's argument as text: a script's SHA1 or source,
// also where the library put an argument that counts its copies
// (node.Copies: its String counts nothing) in its place.
func argText(a any) string {
	switch v := a.(type) {
	case string:
		return v
	case fmt.Stringer:
		return v.String()
	}
	return ""
}

func sabotagedAll(x *exploreRun, cmds [][]any) [][]any {
	if len(x.sab.bySHA) == 0 {
		return cmds
	}
	out := make([][]any, len(cmds))
	for i, c := range cmds {
		out[i] = x.sabotaged(c)
	}
	return out
}

// releaseDetached is the sabotage of Close: the slot's holds that were
// detached and are still held by their token are released (their keys
// deleted where they hold the token), as a Close that released its
// detached locks would.
func (x *exploreRun) releaseDetached(slot, gen int) {
	x.mu.Lock()
	holds := slices.Clone(x.holds)
	x.mu.Unlock()
	var tokens [][2]string
	for _, h := range holds {
		h.mu.Lock() // how is the holder's to write (ended)
		if h.slot == slot && h.gen == gen && h.how == "detached" {
			tokens = append(tokens, [2]string{h.key, h.token})
		}
		h.mu.Unlock()
	}
	const del = `local t = redis.call('TYPE', KEYS[1])['ok']
if t == 'string' then
  if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
elseif t == 'zset' then
  return redis.call('ZREM', KEYS[1], ARGV[1])
end
return 0`
	var c redis.UniversalClient
	if x.cluster != nil {
		c = x.cluster.Client()
	}
	for _, a := range x.addrs {
		if x.cluster == nil {
			c = redis.NewClient(&redis.Options{Addr: a})
		}
		for _, t := range tokens {
			c.Eval(context.Background(), del, []string{"dlock:{" + t[0] + "}"}, t[1])
		}
		c.Close()
		if x.cluster != nil {
			return
		}
	}
}
