package dlock

import (
	"context"
	"fmt"
	"testing"

	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/internal/keys"
	"github.com/dlock-dev/dlock/internal/script"
)

// TestSharedWriterAheadWhateverItsIntent: a shared waiter queued after a
// writer is refused while that writer's intent is live, however many
// writers queued after the reader have intents that end sooner (the check
// once read only the 16 intents that end first, and let the reader pass a
// writer queued before it).
func TestSharedWriterAheadWhateverItsIntent(t *testing.T) {
	s := dlocktest.Start(t)
	c := s.Client()
	defer c.Close()
	ctx := context.Background()
	nm := keys.Make("dlock:", "ahead")
	run := func(token, limit, ttl, member, pos, queued string) []any {
		t.Helper()
		a := script.AcquireArgs{Token: token, TTL: ttl, Retention: "60000", Metadata: "", Limit: limit}
		w := script.Waiter{Member: member, Lease: "180000", Position: pos, Queued: queued, Refresh: "0"}
		v, err := script.Acquire.Run(ctx, c, a.WaiterCommand(nm.AcquireKeys(), w))
		if err != nil {
			t.Fatal(err)
		}
		return v.([]any)
	}
	// A shared holder, then a writer with a long TTL waits behind it.
	if r := run("h", "0", "60000", "H:r1:ahead", "0", "0"); r[0] != int64(1) {
		t.Fatalf("shared holder: %v", r)
	}
	if r := run("w0", "1", "60000", "W0:1:ahead", "0", "0"); r[0] != int64(0) {
		t.Fatalf("writer: %v, want busy", r)
	}
	// A reader queues behind the writer.
	r := run("r", "0", "60000", "R:r1:ahead", "0", "0")
	pos, _ := r[2].(string)
	if r[0] != int64(0) || pos == "" || pos == "0" {
		t.Fatalf("reader: %v, want busy and queued", r)
	}
	// Many writers queue after the reader, with intents that end sooner.
	for i := 1; i <= 40; i++ {
		if r := run(fmt.Sprintf("w%d", i), "1", "5000", fmt.Sprintf("W%d:1:ahead", i), "0", "0"); r[0] != int64(0) {
			t.Fatalf("writer %d: %v, want busy", i, r)
		}
	}
	// The reader tries again: the first writer is still ahead of it.
	if r := run("r", "0", "60000", "R:r1:ahead", pos, "1"); r[0] != int64(0) {
		t.Fatalf("the reader passed the writer queued before it: %v", r)
	}
}
