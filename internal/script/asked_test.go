package script

import (
	"regexp"
	"testing"

	"github.com/dlock-dev/dlock/internal/keys"
)

// TestAskedKeys: asked.lua's header names the keys its callers pass, in
// their order.
func TestAskedKeys(t *testing.T) {
	n := keys.Make("p", "K")
	ms := regexp.MustCompile(`(?m)^-- KEYS\[(\d+)\] +[a-z ]+ +(prefix\{K\}\S*)`).FindAllStringSubmatch(askedSrc, -1)
	want := []string{n.Lock(), n.Asked()}
	if len(ms) != len(want) || Asked.numKeys != "2" {
		t.Fatalf("asked.lua: %d KEYS in its header, %s in its command, want %d", len(ms), Asked.numKeys, len(want))
	}
	for i, m := range ms {
		if got := "p" + m[2][len("prefix"):]; got != want[i] {
			t.Errorf("asked.lua: KEYS[%s] is %s, the callers pass %s", m[1], got, want[i])
		}
	}
}
