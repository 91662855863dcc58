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
	wc := c.WithTimeout(time.Second)
	b := &batcher{client: func(time.Duration) redis.UniversalClient { return wc }, abandon: true}
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
				err := b.process(ctx, time.Second, cmd)
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
	// The sender goroutine finds the queue empty and stops.
	deadline := time.Now().Add(5 * time.Second)
	for {
		b.mu.Lock()
		busy, queued := b.busy, len(b.queue)
		b.mu.Unlock()
		if !busy && queued == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("batcher left busy %v with %d queued", busy, queued)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestBatcherFrozenServer: with the server frozen and callers arriving all
// the time, every caller returns by its own deadline (or the socket deadline,
// for the one whose command went out at once), however long other callers'
// commands take, and the batcher works again once the server is back.
func TestBatcherFrozenServer(t *testing.T) {
	s := dlocktest.Start(t)
	c := s.Client()
	const socket = 300 * time.Millisecond
	wc := c.WithTimeout(socket)
	b := &batcher{client: func(time.Duration) redis.UniversalClient { return wc }, abandon: true}
	if err := b.process(context.Background(), socket, redis.NewCmd(context.Background(), "ping")); err != nil {
		t.Fatal(err)
	}
	if err := s.Freeze(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Thaw() })
	var wg sync.WaitGroup
	for i := range 60 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Mixed deadlines: a short caller must not wait for a long one.
			d := 100 * time.Millisecond
			if i%3 == 0 {
				d = 3 * time.Second
			}
			ctx, cancel := context.WithTimeout(context.Background(), d)
			defer cancel()
			start := time.Now()
			err := b.process(ctx, socket, redis.NewCmd(ctx, "ping"))
			if err == nil {
				t.Error("a frozen server answered")
			}
			// A loaded machine adds some.
			if took, limit := time.Since(start), max(d, socket)+time.Second; took > limit {
				t.Errorf("a caller with a %v deadline returned after %v", d, took)
			}
		}()
		time.Sleep(20 * time.Millisecond)
	}
	wg.Wait()
	if err := s.Thaw(); err != nil {
		t.Fatal(err)
	}
	// Once the server answers again, the batcher works again.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		err := b.process(ctx, socket, redis.NewCmd(ctx, "ping"))
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("no answer after the thaw: %v", err)
		}
	}
}
