package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
)

// lostAdoptHook, on one client, loses the reply of the first adopt.lua of
// key (the command runs; the client sees its connection reset), and holds
// every release.lua of key back until clean is closed.
type lostAdoptHook struct {
	key   string
	lost  bool
	clean chan struct{}
	freed chan struct{} // closed once a held release.lua was answered
}

func (h *lostAdoptHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *lostAdoptHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *lostAdoptHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		if len(args) < 5 || fmt.Sprint(args[2]) != "8" {
			return next(ctx, cmd)
		}
		switch lock := "dlock:{" + h.key + "}"; {
		case fmt.Sprint(args[3]) == lock && !h.lost: // adopt.lua
			h.lost = true
			_ = next(ctx, cmd)
			err := &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
			cmd.SetErr(err)
			return err
		case fmt.Sprint(args[4]) == lock: // release.lua
			<-h.clean
			defer func() {
				select {
				case <-h.freed:
				default:
					close(h.freed)
				}
			}()
		}
		return next(ctx, cmd)
	}
}

// TestAdoptAgainAfterLostReply: an Adopt whose reply was lost fails (its
// command ran: the node's answer is unknown), and the caller adopts the
// token again, which succeeds. The first Adopt's clean-up (which buries
// the token where its command's effect is unknown and releases the key
// there, see Adopt) must not end the second Adopt's hold: while the
// adopter's validity runs, the key is its own and nobody else acquires
// it. Before, the clean-up, run after the second Adopt, deleted the key
// under the adopter: the next TryAcquire got it while the adopter's
// ValidUntil was seconds ahead (two holders).

func TestAdoptAgainAfterLostReply(t *testing.T) {
	s := dlocktest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	first := s.Client()
	defer first.Close()
	a := dlock.New(first)
	defer a.Close()
	k, err := a.TryAcquire(ctx, "handed", dlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	h := k.Detach()

	hook := &lostAdoptHook{key: "handed", clean: make(chan struct{}), freed: make(chan struct{})}
	bc := s.Client()
	defer bc.Close()
	bc.AddHook(hook)
	b := dlock.New(bc)
	defer b.Close()
	defer func() {
		select {
		case <-hook.clean:
		default:
			close(hook.clean)
		}
	}()
	if _, err := b.Adopt(ctx, h.Key, h.Token, dlock.WithTTL(10*time.Second)); err == nil {
		t.Fatal("the Adopt whose reply was lost succeeded")
	}

	cc := s.Client()
	defer cc.Close()
	c := dlock.New(cc)
	defer c.Close()
	adopted, err := c.Adopt(ctx, h.Key, h.Token, dlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatalf("the second Adopt: %v", err)
	}
	close(hook.clean) // the first Adopt's clean-up runs now
	select {
	case <-hook.freed:
	case <-time.After(5 * time.Second):
		t.Log("no clean-up ran within 5s")
	}
	if time.Until(adopted.ValidUntil()) < time.Second {
		t.Fatalf("the adopter's validity ran out: %v", adopted.ValidUntil())
	}
	dc := s.Client()
	defer dc.Close()
	d := dlock.New(dc)
	defer d.Close()
	if other, err := d.TryAcquire(ctx, "handed"); err == nil {
		t.Fatalf("another Locker acquired the key while the adopter holds it (valid %v more, fences %d and %d)",
			time.Until(adopted.ValidUntil()).Round(time.Millisecond), adopted.Fence(), other.Fence())
	} else if !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire: %v", err)
	}
}

// TestAdoptAfterTwoLimitChanges: a permit acquired WithLimit(3) whose
// semaphore's limit SetLimit changed twice (3 → 5 → 2) before the holder
// detached it is adopted with what Detach's Handoff says (its Limit) and
// becomes a permit of the current limit. Before, adopt.lua accepted only
// the last change's old limit (5), so the Handoff's 3 was refused as
// another shape: ErrNotHeld for a live hold.
func TestAdoptAfterTwoLimitChanges(t *testing.T) {
	s := dlocktest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := s.Client()
	defer c.Close()
	l := dlock.New(c)
	defer l.Close()
	k, err := l.TryAcquire(ctx, "sem", dlock.WithLimit(3), dlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{5, 2} {
		if err := l.SetLimit(ctx, "sem", n); err != nil {
			t.Fatalf("SetLimit(%d): %v", n, err)
		}
	}
	h := k.Detach()
	c2 := s.Client()
	defer c2.Close()
	l2 := dlock.New(c2)
	defer l2.Close()
	opts := []dlock.LockOption{dlock.WithTTL(10 * time.Second), dlock.WithLimit(h.Limit)}
	if _, err := l2.Adopt(ctx, h.Key, h.Token, opts...); err != nil {
		t.Fatalf("Adopt of the permit (Handoff.Limit %d, the key's limit now 2): %v", h.Limit, err)
	}
}

// TestAdoptAgainAfterLimitMoved: a permit acquired WithLimit(3), adopted
// WithLimit(3) after SetLimit moved the limit to 5 (so a permit of 5, what
// its next Handoff says), then detached again after a second change (5 →
// 2), is adopted with that Handoff's Limit, 5: a limit the permit was
// known by. Before, adopt.lua accepted only the grant's limit (3), so the
// Handoff's 5 was refused as another shape: ErrNotHeld for a live hold
// (the explorer, seeds 10755459180376304600 and 11055276257480223549). The
// grant's limit is still accepted (a retry of the first Adopt), and a
// limit the permit never had is not.
func TestAdoptAgainAfterLimitMoved(t *testing.T) {
	s := dlocktest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	newLocker := func() *dlock.Locker {
		c := s.Client()
		t.Cleanup(func() { c.Close() })
		l := dlock.New(c)
		t.Cleanup(func() { l.Close() })
		return l
	}
	l := newLocker()
	k, err := l.TryAcquire(ctx, "sem", dlock.WithLimit(3), dlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.SetLimit(ctx, "sem", 5); err != nil {
		t.Fatal(err)
	}
	h := k.Detach()
	k2, err := newLocker().Adopt(ctx, h.Key, h.Token, dlock.WithTTL(10*time.Second), dlock.WithLimit(h.Limit))
	if err != nil {
		t.Fatalf("the first Adopt (Handoff.Limit %d, the key's limit 5): %v", h.Limit, err)
	}
	if err := l.SetLimit(ctx, "sem", 2); err != nil {
		t.Fatal(err)
	}
	h2 := k2.Detach()
	if h2.Limit != 5 {
		t.Fatalf("the adopted permit's Handoff.Limit is %d, want 5", h2.Limit)
	}
	if _, err := newLocker().Adopt(ctx, h2.Key, h2.Token, dlock.WithTTL(10*time.Second), dlock.WithLimit(4)); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Adopt WithLimit(4), a limit the permit never had: %v, want ErrNotHeld", err)
	}
	if _, err := newLocker().Adopt(ctx, h.Key, h.Token, dlock.WithTTL(10*time.Second), dlock.WithLimit(3)); err != nil {
		t.Fatalf("Adopt WithLimit(3), the grant's limit: %v", err)
	}
	k3, err := newLocker().Adopt(ctx, h2.Key, h2.Token, dlock.WithTTL(10*time.Second), dlock.WithLimit(h2.Limit))
	if err != nil {
		t.Fatalf("the second Adopt (Handoff.Limit %d, the key's limit 2): %v", h2.Limit, err)
	}
	if err := k3.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
