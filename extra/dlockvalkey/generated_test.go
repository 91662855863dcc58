package dlockvalkey_test

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "write the files generated from extra/dlockrueidis")

// rename turns extra/dlockrueidis's source into this module's: valkey-go
// is rueidis' fork, with the same API under Valkey's names.
var rename = strings.NewReplacer(
	"Its speed beside rueidislock is in", "Its speed on rueidis (valkey-go is its fork), beside rueidislock, is in",
	"rueidis does not tell", "valkey-go does not tell",
	"github.com/redis/rueidis", "github.com/valkey-io/valkey-go",
	"extra/dlockrueidis", "extra/dlockvalkey",
	"dlockrueidis", "dlockvalkey",
	"IsRedisNil", "IsValkeyNil",
	"IsRedisErr", "IsValkeyErr",
	"RedisResult", "ValkeyResult",
	"rueidis.", "valkey.",
	"rueidis:", "valkey:",
	"(github.com/redis/rueidis)", "(github.com/valkey-io/valkey-go)",
	"through rueidis", "through valkey-go",
	"on rueidis", "on valkey-go",
	"rueidis clients", "valkey-go clients",
	"a rueidis client", "a valkey-go client",
	"rueidis'", "valkey-go's",
	"[rueidis](", "[valkey-go](",
	"rueidis v1.0.79", "valkey-go v1.0.79",
	"rueidis", "valkey",
)

// generated are this module's files made from extra/dlockrueidis's.
var generated = map[string]string{
	"dlockvalkey.go":          "dlockrueidis.go",
	"dlockvalkey_test.go":     "dlockrueidis_test.go",
	"pubsub_internal_test.go": "pubsub_internal_test.go",
	"example_test.go":         "example_test.go",
	"README.md":               "README.md",
}

// TestGenerated: this module's source is extra/dlockrueidis's, renamed
// (go test -run TestGenerated -update writes it again after a change there).
func TestGenerated(t *testing.T) {
	for out, in := range generated {
		src, err := os.ReadFile(filepath.Join("..", "dlockrueidis", in))
		if err != nil {
			t.Fatal(err)
		}
		header := "// Code generated from extra/dlockrueidis/" + in + " by generated_test.go; DO NOT EDIT.\n\n"
		if strings.HasSuffix(in, ".md") {
			header = "<!-- Generated from extra/dlockrueidis/" + in + " by generated_test.go; do not edit. -->\n\n"
		}
		want := header + rename.Replace(string(src))
		if *update {
			if err := os.WriteFile(out, []byte(want), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(out)
		if err != nil || string(got) != want {
			t.Errorf("%s is not extra/dlockrueidis/%s renamed: run go test -run TestGenerated -update in extra/dlockvalkey", out, in)
		}
	}
}
