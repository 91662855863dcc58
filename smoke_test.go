package dlock_test

import (
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
)

func TestSmoke(t *testing.T) {
	l, _, _ := single(t)
	ctx := ctxTimeout(t, 10*time.Second)
	k, err := l.Acquire(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	t.Log(k.Token(), k.Fence())
	if _, err := l.TryAcquire(ctx, "a"); err == nil {
		t.Fatal("expected ErrNotAcquired")
	} else {
		t.Log(err)
	}
	done := make(chan *dlock.Lock)
	go func() {
		k2, err := l.Acquire(ctx, "a")
		if err != nil {
			t.Error(err)
		}
		done <- k2
	}()
	time.Sleep(50 * time.Millisecond)
	start := time.Now()
	if err := k.Release(ctx); err != nil {
		t.Fatal(err)
	}
	k2 := <-done
	t.Log("handoff", time.Since(start), k2.Fence())
	if err := k2.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
