package dlock_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
)

// TestScriptCommandsSinceMinimum backs the README's minimum Redis version:
// every command that a Lua script of dlock calls (fenced/ included), and
// every option token it passes (NX, PX, WITHSCORES, LIMIT...), exists since
// dlock.MinRedisVersion at the latest, as the running server's COMMAND DOCS
// tell (each command's "since", and each argument's own "since" where it
// came later than its command).
func TestScriptCommandsSinceMinimum(t *testing.T) {
	s := dlocktest.Start(t)
	c := s.Client()
	defer c.Close()
	files, _ := filepath.Glob("scripts/*.lua")
	more, _ := filepath.Glob("fenced/*.lua")
	files = append(files, more...)
	if len(files) < 5 {
		t.Fatalf("found only %v", files)
	}
	call := regexp.MustCompile(`redis\.p?call\(\s*'([A-Za-z]+)'([^)]*)\)`)
	token := regexp.MustCompile(`'([A-Z]+)'`)
	used := map[string]map[string]bool{} // command -> option tokens
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range call.FindAllStringSubmatch(string(src), -1) {
			cmd := strings.ToLower(m[1])
			if used[cmd] == nil {
				used[cmd] = map[string]bool{}
			}
			for _, o := range token.FindAllStringSubmatch(m[2], -1) {
				used[cmd][o[1]] = true
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
		if versionLess(dlock.MinRedisVersion, since) {
			t.Errorf("the scripts call %s, which exists since Redis %s, after the minimum %s", strings.ToUpper(cmd), since, dlock.MinRedisVersion)
		}
		for o := range opts {
			arg := findToken(field(doc, "arguments"), o)
			if arg == nil {
				t.Errorf("%s: option %s is not among its arguments in COMMAND DOCS", strings.ToUpper(cmd), o)
				continue
			}
			if as, _ := field(arg, "since").(string); as != "" && versionLess(dlock.MinRedisVersion, as) {
				t.Errorf("the scripts pass %s to %s, which exists since Redis %s, after the minimum %s", o, strings.ToUpper(cmd), as, dlock.MinRedisVersion)
			}
		}
	}
	t.Logf("%d commands checked against COMMAND DOCS of the running server", len(used))
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

// versionLess reports whether version a is below b ("6.2.0" < "7.0.0").
func versionLess(a, b string) bool {
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
