package script

import (
	"regexp"
	"strconv"
	"testing"

	"github.com/dlock-dev/dlock/internal/keys"
)

// TestAskedKeys: asked.lua's and prefer.lua's headers name the keys their
// callers pass, in their order.
func TestAskedKeys(t *testing.T) {
	n := keys.Make("p", "K")
	for _, s := range []struct {
		name, src string
		sc        *Script
		want      []string
	}{
		{"asked.lua", askedSrc, Asked, []string{n.Lock(), n.Asked()}},
		{"prefer.lua", preferSrc, Prefer, []string{n.Waiters()}},
	} {
		ms := regexp.MustCompile(`(?m)^-- KEYS\[(\d+)\] +[a-z ]+ +(prefix\{K\}\S*)`).FindAllStringSubmatch(s.src, -1)
		if len(ms) != len(s.want) || s.sc.numKeys != strconv.Itoa(len(s.want)) {
			t.Fatalf("%s: %d KEYS in its header, %s in its command, want %d", s.name, len(ms), s.sc.numKeys, len(s.want))
		}
		for i, m := range ms {
			if got := "p" + m[2][len("prefix"):]; got != s.want[i] {
				t.Errorf("%s: KEYS[%s] is %s, the callers pass %s", s.name, m[1], got, s.want[i])
			}
		}
	}
}
