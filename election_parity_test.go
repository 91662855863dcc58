package dlock_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
)

// next receives the next leader from obs.
func next(t *testing.T, obs <-chan dlock.Leader, what string) dlock.Leader {
	t.Helper()
	select {
	case ld := <-obs:
		return ld
	case <-time.After(10 * time.Second):
		t.Fatalf("no leader observed: %s", what)
	}
	return dlock.Leader{}
}

// TestProclaim, on each topology: a leader's new value reaches Leader, an
// observer and Metadata with the same term, and renewals keep it; a
// leadership taken over by another leader cannot set its value (the
// nodes' owner check: the old lock has not noticed its loss yet), and
// leadership changes are counted.
func TestProclaim(t *testing.T) {
	for _, topo := range topologies {
		t.Run(topo.Name, func(t *testing.T) {
			mk := topo.Start(t)
			a, b := mk(), mk()
			octx, stop := context.WithCancel(ctx(t))
			defer stop()
			obs := b.Observe(octx, "e")
			if ld := next(t, obs, "the vacancy"); ld != (dlock.Leader{}) {
				t.Fatalf("first: %+v", ld)
			}
			k, err := a.Campaign(ctx(t), "e", "v1", dlock.WithTTL(10*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			want := dlock.Leader{Value: "v1", Term: k.Fence(), Transitions: 1}
			if ld := next(t, obs, "the first term"); ld != want {
				t.Fatalf("observed %+v, want %+v", ld, want)
			}
			if err := k.Proclaim(ctx(t), "v2"); err != nil {
				t.Fatal(err)
			}
			want.Value = "v2"
			if ld := next(t, obs, "the proclaimed value"); ld != want {
				t.Fatalf("observed %+v, want %+v", ld, want)
			}
			if err := k.Extend(ctx(t), 10*time.Second); err != nil { // a renewal writes the value too
				t.Fatal(err)
			}
			if ld, err := b.Leader(ctx(t), "e"); err != nil || ld != want || k.Metadata() != "v2" {
				t.Fatalf("Leader %+v, %v, Metadata %q; want %+v", ld, err, k.Metadata(), want)
			}

			// Another leader after a forced release: the old lock still
			// thinks it leads, and its Proclaim must change nothing.
			if _, err := b.ForceRelease(ctx(t), "e"); err != nil {
				t.Fatal(err)
			}
			k2, err := b.Campaign(ctx(t), "e", "w1", dlock.WithTTL(10*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			want2 := dlock.Leader{Value: "w1", Term: k2.Fence(), Transitions: 2}
			ld := next(t, obs, "the second term")
			if ld == (dlock.Leader{}) {
				ld = next(t, obs, "the second term") // after a vacancy that a read found
			}
			if ld != want2 {
				t.Fatalf("observed %+v, want %+v", ld, want2)
			}
			if err := k.Proclaim(ctx(t), "stale"); !errors.Is(err, dlock.ErrNotHeld) {
				t.Fatalf("Proclaim of a lost leadership: %v, want ErrNotHeld", err)
			}
			if ld, err := a.Leader(ctx(t), "e"); err != nil || ld != want2 {
				t.Fatalf("after a stale Proclaim: Leader %+v, %v; want %+v", ld, err, want2)
			}
			if k.Metadata() != "v2" {
				t.Fatalf("a failed Proclaim changed Metadata to %q", k.Metadata())
			}

			// A resignation and a new leader: the third term.
			if err := k2.Release(ctx(t)); err != nil {
				t.Fatal(err)
			}
			if ld := next(t, obs, "the resignation"); ld != (dlock.Leader{}) {
				t.Fatalf("observed %+v after the resignation", ld)
			}
			k3, err := a.Campaign(ctx(t), "e", "x1")
			if err != nil {
				t.Fatal(err)
			}
			defer k3.Release(ctx(t))
			if ld, err := b.Leader(ctx(t), "e"); err != nil || ld.Transitions != 3 || ld.Term != k3.Fence() {
				t.Fatalf("the third term: Leader %+v, %v", ld, err)
			}
			if ld := next(t, obs, "the third term"); ld.Transitions != 3 {
				t.Fatalf("observed %+v, want 3 transitions", ld)
			}
			if err := k2.Proclaim(ctx(t), "resigned"); !errors.Is(err, dlock.ErrNotHeld) {
				t.Fatalf("Proclaim after Release: %v, want ErrNotHeld", err)
			}
		})
	}
}

// TestProclaimInvalid: Proclaim of a lock that is not a leadership, or of
// an invalid value, is ErrInvalid.
func TestProclaimInvalid(t *testing.T) {
	l, _, _ := single(t)
	k, err := l.TryAcquire(ctx(t), "plain", dlock.WithMetadata("m"))
	if err != nil {
		t.Fatal(err)
	}
	defer k.Release(ctx(t))
	if err := k.Proclaim(ctx(t), "v"); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("Proclaim of a plain lock: %v, want ErrInvalid", err)
	}
	ld, err := l.Campaign(ctx(t), "e", "v")
	if err != nil {
		t.Fatal(err)
	}
	defer ld.Release(ctx(t))
	for _, v := range []string{"", string(make([]byte, dlock.MaxMetadata+1))} {
		if err := ld.Proclaim(ctx(t), v); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("Proclaim of %d bytes: %v, want ErrInvalid", len(v), err)
		}
	}
}

// TestLeaderWithoutCount: a leader without a count of terms (one of a
// dlock version before it, or whose count expired) is read, with
// Transitions 0.
func TestLeaderWithoutCount(t *testing.T) {
	l, _, c := single(t)
	k, err := l.Campaign(ctx(t), "old", "v")
	if err != nil {
		t.Fatal(err)
	}
	defer k.Release(ctx(t))
	if n, err := c.Del(ctx(t), "dlock:{old}:terms").Result(); err != nil || n != 1 {
		t.Fatalf("the count's key: %d, %v", n, err)
	}
	if ld, err := l.Leader(ctx(t), "old"); err != nil || ld != (dlock.Leader{Value: "v", Term: k.Fence()}) {
		t.Fatalf("Leader %+v, %v", ld, err)
	}
}

// TestHealth: the handler answers 503 before a lock is set, 200 while it
// is held, and 503 once Lost fired after a forced release; it sends no
// command (a probe of a lost lock answers at once, the servers aside).
func TestHealth(t *testing.T) {
	for _, topo := range topologies {
		t.Run(topo.Name, func(t *testing.T) {
			mk := topo.Start(t)
			a, b := mk(), mk()
			var h dlock.Health
			probe := func() int {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/leader", nil))
				return rec.Code
			}
			if code := probe(); code != http.StatusServiceUnavailable {
				t.Fatalf("before Set: %d", code)
			}
			k, err := a.Campaign(ctx(t), "h", "me", dlock.WithTTL(300*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			h.Set(k)
			if code := probe(); code != http.StatusOK {
				t.Fatalf("while leading: %d", code)
			}
			if _, err := b.ForceRelease(ctx(t), "h"); err != nil {
				t.Fatal(err)
			}
			select {
			case <-k.Lost():
			case <-time.After(10 * time.Second):
				t.Fatal("Lost did not fire after the force release")
			}
			if code := probe(); code != http.StatusServiceUnavailable {
				t.Fatalf("after Lost: %d", code)
			}
		})
	}
}
