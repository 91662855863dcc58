//go:build !race

package dlockotel_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
)

// The events that record only metrics (no span in their context) allocate
// nothing in the hook, with the SDK's MeterProvider.
func TestEventAllocs(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	for _, ev := range []dlock.Event{
		{Kind: dlock.EventAttempt, Key: "k", Attempt: 1, Err: dlock.ErrNotAcquired},
		{Kind: dlock.EventWoken, Key: "k", Attempt: 1},
		{Kind: dlock.EventAcquired, Key: "k", Attempt: 2, Wait: time.Millisecond, Fence: 3, TTL: time.Second},
		{Kind: dlock.EventRefused, Key: "k", Attempt: 2, Wait: time.Millisecond, Err: dlock.ErrNotAcquired},
		{Kind: dlock.EventReleased, Key: "k", Held: time.Second},
		{Kind: dlock.EventRenewFailed, Key: "k", Err: errors.New("x")},
		{Kind: dlock.EventNodeError, Key: "k", Node: "127.0.0.1:1", Err: errors.New("x")},
		{Kind: dlock.EventNodeSuspect, Node: "127.0.0.1:1"},
		{Kind: dlock.EventNodeBack, Node: "127.0.0.1:1"},
	} {
		e.hook.Event(ctx, ev) // the first time builds the node's attributes
		if n := testing.AllocsPerRun(200, func() { e.hook.Event(ctx, ev) }); n != 0 {
			t.Errorf("%s: %v allocations per event, want 0", ev.Kind, n)
		}
	}
}
