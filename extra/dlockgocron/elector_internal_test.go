package dlockgocron

import (
	"context"
	"errors"
	"testing"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
)

// IsLeader reads the leadership's Lost channel itself: it fails from the
// moment Lost closes, before the campaign goroutine has noticed.
func TestIsLeaderReadsLost(t *testing.T) {
	s := dlocktest.Start(t)
	c := s.Client()
	defer c.Close()
	l := dlock.New(c)
	defer l.Close()
	ctx := context.Background()
	lead, err := l.Campaign(ctx, "e", "me")
	if err != nil {
		t.Fatal(err)
	}
	// An Elector whose campaign goroutine does not run.
	e := &Elector{l: l, key: "e", value: "me", done: make(chan struct{}), changed: make(chan struct{}), lead: lead}
	if err := e.IsLeader(ctx); err != nil {
		t.Fatalf("IsLeader while leading: %v", err)
	}
	if e.Leadership() != lead {
		t.Fatal("Leadership is not the lock")
	}
	if err := lead.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.IsLeader(ctx); !errors.Is(err, ErrNotLeader) {
		t.Errorf("IsLeader once Lost has closed: %v, want ErrNotLeader", err)
	}
	if e.Leadership() != nil {
		t.Error("Leadership once Lost has closed is not nil")
	}
}
