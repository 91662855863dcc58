package quorum

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/dlocktest"
)

// TestBatcherAnswers: many goroutines send through one batcher at once, some
// giving up early; every caller that waited gets its own command's answer,
// and the commands of callers that gave up before theirs was sent never ran.
func TestBatcherAnswers(t *testing.T) {
	s := dlocktest.Start(t)
	c := s.Client()
	b := &batcher{UniversalClient: c.WithTimeout(time.Second)}
	const goroutines, calls = 64, 50
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range calls {
				ctx, cancel := context.Background(), context.CancelFunc(func() {})
				if (g+i)%7 == 0 {
					// Gives up at once or nearly: queued, maybe sent.
					ctx, cancel = context.WithTimeout(ctx, time.Duration(i%3)*50*time.Microsecond)
				}
				want := strconv.Itoa(g) + ":" + strconv.Itoa(i)
				cmd := redis.NewCmd(ctx, "echo", want)
				err := b.Process(ctx, cmd)
				cancel()
				switch {
				case err != nil && ctx.Err() != nil:
				case err != nil:
					errs <- err
					return
				case cmd.Val() != want:
					errs <- fmt.Errorf("got %v (err %v, ctx %v), want %s", cmd.Val(), err, ctx.Err(), want)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.busy || len(b.queue) > 0 {
		t.Errorf("batcher left busy %v with %d queued", b.busy, len(b.queue))
	}
}

// TestBatcherFrozenServer: with the server frozen, every caller returns by
// its deadline, whether its command was in flight, in a pipeline or queued.
func TestBatcherFrozenServer(t *testing.T) {
	s := dlocktest.Start(t)
	c := s.Client()
	b := &batcher{UniversalClient: c.WithTimeout(300 * time.Millisecond)}
	if err := b.Process(context.Background(), redis.NewCmd(context.Background(), "ping")); err != nil {
		t.Fatal(err)
	}
	if err := s.Freeze(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Thaw() })
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			start := time.Now()
			err := b.Process(ctx, redis.NewCmd(ctx, "ping"))
			if err == nil {
				t.Error("a frozen server answered")
			}
			// The caller in flight waits for its socket deadline (300ms),
			// the others for their ctx (200ms); a loaded machine adds some.
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("returned after %v", d)
			}
		}()
	}
	wg.Wait()
	if err := s.Thaw(); err != nil {
		t.Fatal(err)
	}
	// Once the server answers again, the batcher works again.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for {
		err := b.Process(ctx, redis.NewCmd(ctx, "ping"))
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("no answer after the thaw: %v", err)
		}
	}
}
