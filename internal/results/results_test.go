package results_test

import (
	"errors"
	"testing"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/results"
)

// TestOf: every result of dlock's events has its index, and an event of
// no known class is Error.
func TestOf(t *testing.T) {
	for _, tc := range []struct {
		e    dlock.Event
		want results.Index
	}{
		{dlock.Event{Kind: dlock.EventAcquired}, results.Acquired},
		{dlock.Event{Kind: dlock.EventRefused, Err: dlock.ErrNotAcquired}, results.Busy},
		{dlock.Event{Kind: dlock.EventAttempt, Err: dlock.ErrMisconfigured}, results.Misconfigured},
		{dlock.Event{Kind: dlock.EventRefused, Err: dlock.ErrInvalid}, results.Invalid},
		{dlock.Event{Kind: dlock.EventRefused, Err: errors.New("other")}, results.Error},
	} {
		if got := results.Of(tc.e); got != tc.want {
			t.Errorf("Of(%v) = %s, want %s", tc.e.Err, results.Names[got], results.Names[tc.want])
		}
	}
	for i, n := range results.Names {
		if n == "" {
			t.Errorf("result %d has no name", i)
		}
	}
}
