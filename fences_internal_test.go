package dlock

import (
	"context"
	"strconv"
	"testing"

	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/internal/keys"
	"github.com/dlock-dev/dlock/internal/quorum"
	"github.com/dlock-dev/dlock/internal/script"
)

// TestRaiseTwice: raise.lua run twice (a client's retry, whose first copy
// claimed the value and lost its reply) answers that the claim holds both
// times and moves nothing the second time, for every shape of holder, for
// one value and for a ladder of values (the lowest above the counter); a
// late copy of an earlier, smaller claim moves nothing and is refused;
// another token cannot claim the value; and a record sets the holder's
// fence entry alone, which a late copy of the claim then answers.
func TestRaiseTwice(t *testing.T) {
	s := dlocktest.Start(t)
	c := s.Client()
	defer c.Close()
	ctx := context.Background()
	for _, tc := range []struct{ name, limit, metadata string }{
		{"permit", "3", ""},
		{"shared", "0", ""},
		{"lock", "1", ""},
		{"leader", "1", "host-a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nm := keys.Make("dlock:", "raise-"+tc.name)
			a := script.AcquireArgs{Token: "tok", TTL: "30000", Retention: "60000", Metadata: tc.metadata, Limit: tc.limit}
			g := runScript(t, c, a.Script(), a.Command(nm.AcquireKeys())).([]any)
			issued, err := strconv.ParseUint(g[1].(string), 10, 64)
			if g[0] != int64(1) || err != nil {
				t.Fatalf("grant: %v", g)
			}
			raise := func(token string, v uint64, more ...uint64) []any {
				t.Helper()
				r := script.RaiseArgs{Value: strconv.FormatUint(v, 10), Life: "60000", Token: token}
				for _, m := range more {
					r.More = append(r.More, strconv.FormatUint(m, 10))
				}
				return runScript(t, c, script.Raise, r.Command(nm.RaiseKeys())).([]any)
			}
			check := func(what string, r []any, claimed int64, v uint64) {
				t.Helper()
				if want := []any{claimed, strconv.FormatUint(v, 10)}; r[0] != want[0] || r[1] != want[1] {
					t.Errorf("%s: %v, want %v", what, r, want)
				}
			}
			state := func(what string, v uint64) {
				t.Helper()
				if got := c.Get(ctx, nm.Fence()).Val(); got != strconv.FormatUint(v, 10) {
					t.Errorf("%s: counter %s, want %d", what, got, v)
				}
				if tc.limit == "1" && tc.metadata == "" {
					return // a plain lock without metadata has no entry
				}
				if got := c.HGet(ctx, nm.Meta(), "f:tok").Val(); got != strconv.FormatUint(v, 10) {
					t.Errorf("%s: the holder's fence entry %s, want %d", what, got, v)
				}
			}
			first, second := issued+20, issued+40
			check("a claim", raise("tok", first), 1, first)
			check("its second copy", raise("tok", first), 1, first)
			state("after the second copy", first)
			check("a larger claim", raise("tok", second), 1, second)
			check("its second copy", raise("tok", second), 1, second)
			check("a late copy of the smaller claim", raise("tok", first), 0, second)
			state("after the late copy", second)
			check("another token's claim of the value", raise("other", second), 0, second)
			state("after the other token's claim", second)
			// A ladder: the lowest value above the counter, once.
			check("another token's larger claim", raise("other", second+5), 1, second+5)
			check("a ladder", raise("tok", second+2, second+10, second+30), 1, second+10)
			check("its second copy", raise("tok", second+2, second+10, second+30), 1, second+10)
			state("after the ladder's second copy", second+10)
			check("a ladder below the counter", raise("tok", second+1, second+3), 0, second+10)
			state("after the ladder below the counter", second+10)
			// Values not ascending: an error, and nothing written.
			bad := script.RaiseArgs{Value: strconv.FormatUint(second+40, 10), Life: "60000", Token: "tok",
				More: []any{strconv.FormatUint(second+40, 10)}}
			if _, err := script.Raise.Run(ctx, quorum.NewConn(c), bad.Command(nm.RaiseKeys())); err == nil {
				t.Error("a ladder not ascending: no error")
			}
			state("after the ladder not ascending", second+10)
			// A record (the fence a majority claimed, told to a node that
			// claimed another value): the entry only, if there is one.
			rec := script.RaiseArgs{Value: strconv.FormatUint(second+30, 10), Life: "60000", Token: "tok", More: []any{"="}}
			r := runScript(t, c, script.Raise, rec.Command(nm.RaiseKeys())).([]any)
			if tc.limit == "1" && tc.metadata == "" {
				check("a record without an entry", r, 0, second+10)
				return
			}
			check("a record", r, 1, second+30)
			if got := c.HGet(ctx, nm.Meta(), "f:tok").Val(); got != strconv.FormatUint(second+30, 10) {
				t.Errorf("after a record: the holder's fence entry %s, want %d", got, second+30)
			}
			check("a late copy of the ladder", raise("tok", second+2, second+10, second+30), 1, second+30)
			if got := c.Get(ctx, nm.Fence()).Val(); got != strconv.FormatUint(second+10, 10) {
				t.Errorf("after a record and a late copy: counter %s, want %d", got, second+10)
			}
		})
	}
}
