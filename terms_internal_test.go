package dlock

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/internal/keys"
	"github.com/dlock-dev/dlock/internal/script"
)

// TestKeepTermsScript: keepterms.lua sets the expiry of the count of terms
// only where the lock holds the leader's token and the count is a hash;
// it never changes the count, and never makes one.
func TestKeepTermsScript(t *testing.T) {
	s := dlocktest.Start(t)
	c := s.Client()
	defer c.Close()
	bg := context.Background()
	nm := keys.Make("dlock:", "e")
	lock, terms := "dlock:{e}", nm.Terms()
	keep := func(token string) any {
		t.Helper()
		return runScript(t, c, script.KeepTerms, script.KeepTermsCommand(nm.ElectedKeys(), token, "60000"))
	}
	c.Set(bg, lock, "tok", 0)
	c.HSet(bg, terms, "n", "3", "t", "7")
	c.PExpire(bg, terms, time.Second)
	if r := keep("other"); r != int64(0) {
		t.Errorf("another token: %v, want 0", r)
	}
	if d := c.PTTL(bg, terms).Val(); d > time.Second {
		t.Errorf("another token set the count's expiry: %s", d)
	}
	if r := keep("tok"); r != int64(1) {
		t.Errorf("the leader's token: %v, want 1", r)
	}
	if d := c.PTTL(bg, terms).Val(); d <= time.Second || d > time.Minute {
		t.Errorf("the leader's run: the count's TTL %s, want about a minute", d)
	}
	if h := c.HGetAll(bg, terms).Val(); len(h) != 2 || h["n"] != "3" || h["t"] != "7" {
		t.Errorf("the count changed: %v", h)
	}
	c.Del(bg, lock)
	if r := keep("tok"); r != int64(0) {
		t.Errorf("a free lock: %v, want 0", r)
	}
	c.Set(bg, lock, "tok", 0)
	c.Del(bg, terms)
	if r := keep("tok"); r != int64(0) || c.Exists(bg, terms).Val() != 0 {
		t.Errorf("no count: %v, and the count's key exists: %d", r, c.Exists(bg, terms).Val())
	}
	c.Set(bg, terms, "not a hash", 0)
	if r := keep("tok"); r != int64(0) || c.PTTL(bg, terms).Val() != -1 {
		t.Errorf("a count of another type: %v, its TTL %s", r, c.PTTL(bg, terms).Val())
	}
}

// TestTermsKeeperStops: a leadership's keeper of the count of terms is set
// while it leads and stopped when it ends, by Release, by a loss or by
// Close; neither a run nor a start after the end sets it again.
func TestTermsKeeperStops(t *testing.T) {
	s := dlocktest.Start(t)
	c := s.Client()
	defer c.Close()
	l, other := New(c), New(c)
	defer other.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	campaign := func() *Lock {
		t.Helper()
		k, err := l.Campaign(ctx, "e", "v", WithTTL(600*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		e := &k.election.terms
		e.mu.Lock()
		defer e.mu.Unlock()
		if e.timer == nil || e.stopped {
			t.Fatalf("a leader's keeper: timer %v, stopped %v", e.timer, e.stopped)
		}
		return k
	}
	stopped := func(k *Lock, what string) {
		t.Helper()
		k.refreshTerms()
		k.keepTerms()
		e := &k.election.terms
		e.mu.Lock()
		defer e.mu.Unlock()
		if !e.stopped || e.timer.Stop() {
			t.Errorf("after %s: stopped %v, or the timer was still set", what, e.stopped)
		}
	}

	k := campaign()
	if err := k.Release(ctx); err != nil {
		t.Fatal(err)
	}
	stopped(k, "Release")

	k = campaign()
	if _, err := other.ForceRelease(ctx, "e"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-k.Lost():
	case <-ctx.Done():
		t.Fatal("Lost did not fire after a force release")
	}
	stopped(k, "a loss")

	k = campaign()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	stopped(k, "Close")
}
