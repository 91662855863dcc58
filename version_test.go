package dlock_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
)

// TestScriptCommandsSinceMinimum backs the minimum Redis version that the
// README and docs/operations.md give:
// every command that a Lua script of dlock calls (fenced/ included), and
// every option token it passes (NX, PX, WITHSCORES, LIMIT...), exists since
// dlock.MinRedisVersion at the latest, as the running server's COMMAND DOCS
// tell (each command's "since", and each argument's own "since" where it
// came later than its command).
//
// laterCommands are the exceptions: commands of a later version that a
// script calls only where the server has them, under redis.pcall.
func TestScriptCommandsSinceMinimum(t *testing.T) {
	s := dlocktest.Start(t)
	c := s.Client()
	defer c.Close()
	files, _ := filepath.Glob("internal/script/*.lua")
	more, _ := filepath.Glob("fenced/*.lua")
	files = append(files, more...)
	if len(files) < 5 {
		t.Fatalf("found only %v", files)
	}
	call := regexp.MustCompile(`redis\.p?call\(\s*'([A-Za-z]+)'`)
	token := regexp.MustCompile(`'([A-Z]+)'`)
	api := regexp.MustCompile(`redis\.([a-z_]+)`)
	used := map[string]map[string]bool{} // command -> option tokens
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		src := string(b)
		for _, m := range call.FindAllStringSubmatchIndex(src, -1) {
			cmd := strings.ToLower(src[m[2]:m[3]])
			if _, later := laterCommands[cmd]; later && !strings.HasPrefix(src[m[0]:m[1]], "redis.pcall") {
				t.Errorf("%s calls %s, of a later Redis than %s, without redis.pcall", f, strings.ToUpper(cmd), dlock.MinRedisVersion)
			}
			if used[cmd] == nil {
				used[cmd] = map[string]bool{}
			}
			// The call's arguments, up to its closing parenthesis (nested
			// calls included; parentheses in strings do not count).
			depth, end, quote := 1, m[1], byte(0)
			for ; end < len(src) && depth > 0; end++ {
				switch ch := src[end]; {
				case quote != 0 && ch == '\\':
					end++
				case quote != 0:
					if ch == quote {
						quote = 0
					}
				case ch == '\'' || ch == '"':
					quote = ch
				case ch == '(':
					depth++
				case ch == ')':
					depth--
				}
			}
			for _, o := range token.FindAllStringSubmatch(src[m[1]:end], -1) {
				used[cmd][o[1]] = true
			}
		}
		// Only the script API of every version since 2.6: newer ones
		// (redis.setresp 6.0, redis.REDIS_VERSION 7.0...) would need more.
		for _, m := range api.FindAllStringSubmatch(src, -1) {
			switch m[1] {
			case "call", "pcall", "error_reply", "status_reply":
			default:
				t.Errorf("%s uses redis.%s, not in every Redis since %s", f, m[1], dlock.MinRedisVersion)
			}
		}
	}
	if len(used) < 15 {
		t.Fatalf("found only %d commands in the scripts: %v", len(used), used)
	}
	for cmd, opts := range used {
		raw, err := c.Do(ctx(t), "COMMAND", "DOCS", cmd).Result()
		if err != nil {
			t.Fatalf("COMMAND DOCS %s: %v", cmd, err)
		}
		doc := field(raw, cmd)
		since, _ := field(doc, "since").(string)
		if since == "" {
			t.Errorf("%s: no 'since' in COMMAND DOCS: %v", cmd, raw)
			continue
		}
		if newer, ok := laterCommands[cmd]; ok {
			if newer != since {
				t.Errorf("%s exists since Redis %s, not %s as laterCommands says", strings.ToUpper(cmd), since, newer)
			}
		} else if dlock.VersionBelow(dlock.MinRedisVersion, since) {
			t.Errorf("the scripts call %s, which exists since Redis %s, after the minimum %s", strings.ToUpper(cmd), since, dlock.MinRedisVersion)
		}
		for o := range opts {
			arg := findToken(field(doc, "arguments"), o)
			if arg == nil {
				t.Errorf("%s: option %s is not among its arguments in COMMAND DOCS", strings.ToUpper(cmd), o)
				continue
			}
			if as, _ := field(arg, "since").(string); as != "" && dlock.VersionBelow(dlock.MinRedisVersion, as) {
				t.Errorf("the scripts pass %s to %s, which exists since Redis %s, after the minimum %s", o, strings.ToUpper(cmd), as, dlock.MinRedisVersion)
			}
		}
	}
	t.Logf("%d commands checked against COMMAND DOCS of the running server", len(used))
}

// laterCommands are the commands newer than dlock.MinRedisVersion that a
// script calls, with their version: each only for what exists on such a
// server alone, under redis.pcall, so that a refusal cannot fail the script.
var laterCommands = map[string]string{
	// release.lua, for a waiter whose inbox is sharded: such a waiter
	// subscribed with SSUBSCRIBE (7.0) on this server.
	"spublish": "7.0.0",
}

// field returns the value of key in a reply map (RESP3) or flat key/value
// list (RESP2).
func field(v any, key string) any {
	switch m := v.(type) {
	case map[any]any:
		return m[key]
	case map[string]any:
		return m[key]
	case []any:
		for i := 0; i+1 < len(m); i += 2 {
			if k, _ := m[i].(string); strings.EqualFold(k, key) {
				return m[i+1]
			}
		}
	}
	return nil
}

// findToken returns the argument (at any depth) whose token is tok.
func findToken(args any, tok string) any {
	list, _ := args.([]any)
	for _, a := range list {
		if t, _ := field(a, "token").(string); strings.EqualFold(t, tok) {
			return a
		}
		if sub := findToken(field(a, "arguments"), tok); sub != nil {
			return sub
		}
	}
	return nil
}
