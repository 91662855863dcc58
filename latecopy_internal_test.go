package dlock

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/internal/keys"
	"github.com/dlock-dev/dlock/internal/quorum"
	"github.com/dlock-dev/dlock/internal/script"
)

// TestSharedGrantRunTwice: a queued shared waiter's grant (shared.lua)
// wakes the shared waiters at the head of the queue, each with a
// reservation; the same command run a second time (a client's retry whose
// first reply was lost, or a copy that runs late) finds the hold its own:
// it keeps its fence and wakes nobody more.
func TestSharedGrantRunTwice(t *testing.T) {
	s := dlocktest.Start(t)
	c := s.Client()
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	nm := keys.Make("dlock:", "k")
	lease := strconv.FormatInt(time.Now().Add(time.Minute).UnixMilli(), 10)
	for i := range 5 {
		m := "L:r" + strconv.Itoa(i) + ":k"
		c.ZAdd(ctx, nm.Waiters(), redis.Z{Score: float64(i + 1), Member: m})
		c.HSet(ctx, nm.Leases(), m, lease)
	}
	argv := script.AcquireArgs{Token: "0123456789abcdef0123456789abcdef", TTL: "30000", Retention: "60000", Metadata: "", Limit: "0"}
	w := script.Waiter{Member: "L:r0:k", Lease: "60000", Position: "1", Queued: "1", Refresh: "0"}
	wk := script.Waker{InboxPrefix: "dlock:inbox:", Listeners: "0", SlotTag: "", Reserve: "5000"}
	conn := quorum.NewConn(c)
	var fences []uint64
	for run := range 2 {
		v, err := script.Shared.Run(ctx, conn, argv.SharedWaiterCommand(nm.AcquireKeys(), w, wk))
		r, perr := script.ParseAcquire(v)
		if err != nil || perr != nil || !r.OK {
			t.Fatalf("run %d: %v %v %+v", run, err, perr, r)
		}
		fences = append(fences, r.Fence)
		woken := 0
		for _, m := range c.ZRange(ctx, nm.Lock(), 0, -1).Val() {
			if strings.HasPrefix(m, "~") {
				woken++
			}
		}
		if woken != 2 {
			t.Errorf("run %d: %d shared waiters woken with a reservation, want 2 (the first run's)", run, woken)
		}
	}
	if fences[0] != fences[1] {
		t.Errorf("the second run's fence %d, want the first's %d", fences[1], fences[0])
	}
}
