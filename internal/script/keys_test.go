package script

import (
	"regexp"
	"strconv"
	"testing"

	"github.com/dlock-dev/dlock/internal/keys"
)

// TestScriptKeysOrder: each script's header names its KEYS in the order of
// keys.Names.Keys, which the callers pass (AcquireKeys and the others), and
// the script is made with as many keys as its header names.
func TestScriptKeysOrder(t *testing.T) {
	n := keys.Make("p", "K")
	line := regexp.MustCompile(`(?m)^-- KEYS\[(\d+)\] +[a-z ]+ +(prefix\{K\}\S*)`)
	// The header of each script's own file (the fragments it includes
	// come after it), and the fragment that describes the keys in full.
	for _, s := range []struct {
		name string
		src  string
		sc   *Script
		keys []any
	}{
		{"acquire.lua", acquireSrc, Acquire, n.AcquireKeys()},
		{"semaphore.lua", semaphoreSrc, Semaphore, n.AcquireKeys()},
		{"shared.lua", sharedSrc, Shared, n.AcquireKeys()},
		{"base.lua", baseSrc, Acquire, n.AcquireKeys()},
		{"release.lua", releaseSrc, Release, n.ReleaseKeys()},
		{"raise.lua", raiseSrc, Raise, n.RaiseKeys()},
		{"lock.lua", lockSrc, LockRecorded, n.LockKeysRecorded()}, // the four of a Redlock's (one Redis passes three)
		{"unlock.lua", unlockSrc, Unlock, n.UnlockKeys()},
		{"time.lua", timeSrc, Time, n.TimeKeys()},
		{"bury.lua", burySrc, Bury, n.BuryKeys()},
		{"adopt.lua", adoptSrc, Adopt, n.AdoptKeys()},
		{"setlimit.lua", setLimitSrc, SetLimit, n.SetLimitKeys()},
		{"limitstate.lua", limitStateSrc, LimitState, n.SetLimitKeys()},
		{"proclaim.lua", proclaimSrc, Proclaim, n.ProclaimKeys()},
		{"elected.lua", electedSrc, Elected, n.ElectedKeys()},
		{"keepterms.lua", keepTermsSrc, KeepTerms, n.ElectedKeys()},
	} {
		ms := line.FindAllStringSubmatch(s.src, -1)
		if len(ms) != len(s.keys) || s.sc.numKeys != strconv.Itoa(len(s.keys)) {
			t.Errorf("%s: %d KEYS in its header, %s in its command, %d passed", s.name, len(ms), s.sc.numKeys, len(s.keys))
			continue
		}
		for i, m := range ms {
			want := "p" + m[2][len("prefix"):]
			if m[1] != strconv.Itoa(i+1) || s.keys[i] != any(want) {
				t.Errorf("%s: KEYS[%s] is %s in its header; the callers pass %v as KEYS[%d]", s.name, m[1], want, s.keys[i], i+1)
			}
		}
	}
	// extend.lua: groups of five, KEYS[5g+1..5g+5]; renew.lua: pairs,
	// KEYS[2g+1..2g+2].
	for _, s := range []struct {
		name string
		src  string
		w    string
		keys []any
	}{
		{"extend.lua", Extend.Source(), "5", n.ExtendKeys()},
		{"renew.lua", Renew.Source(), "2", n.ExtendKeysShort()},
	} {
		ms := regexp.MustCompile(`(?m)^-- KEYS\[`+s.w+`g\+(\d)\] +[a-z ]+ +(prefix\{K\}\S*)`).FindAllStringSubmatch(s.src, -1)
		if len(ms) != len(s.keys) {
			t.Fatalf("%s: %d KEYS per group in its header, %d passed", s.name, len(ms), len(s.keys))
		}
		for i, m := range ms {
			if want := "p" + m[2][len("prefix"):]; m[1] != strconv.Itoa(i+1) || s.keys[i] != any(want) {
				t.Errorf("%s: KEYS[%sg+%s] is %s in its header; the callers pass %v", s.name, s.w, m[1], want, s.keys[i])
			}
		}
	}
}

// TestAppendLockCommand: lock.lua's command appended into an array of
// LockCommandLen is LockCommand's, in that array.
func TestAppendLockCommand(t *testing.T) {
	n := keys.Make("p", "K")
	var buf [LockCommandLen]any
	got := AppendLockCommand(buf[:0], n.LockKeys(), "tok", "30000", "60000")
	want := LockCommand(n.LockKeys(), "tok", "30000", "60000")
	if len(got) != len(want) || &got[0] != &buf[0] {
		t.Fatalf("AppendLockCommand: %v (its own array: %v), want %v in the caller's", got, &got[0] == &buf[0], want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("argument %d: %v, want %v", i, got[i], want[i])
		}
	}
}
