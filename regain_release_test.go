package dlock_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
)

// gateHook holds back, on one node's client, the next extend.lua that may
// take back a free key (a regain: its ARGV "1"), until release is closed;
// once released is closed it holds every release.lua (a clean-up) until
// checked is closed, so that what the held command did can be read
// before anything cleans it up.
type gateHook struct {
	key               string
	held, release     chan struct{}
	ran               chan struct{} // closed once the held command was answered
	released, checked chan struct{}
	once              sync.Once
}

func (h *gateHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *gateHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *gateHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		if len(args) < 10 {
			return next(ctx, cmd)
		}
		lock := "dlock:{" + h.key + "}"
		switch {
		case fmt.Sprint(args[2]) == "5" && fmt.Sprint(args[3]) == lock && fmt.Sprint(args[9]) == "1":
			first := false
			h.once.Do(func() { first = true })
			if first {
				close(h.held)
				<-h.release
				defer close(h.ran)
			}
		case fmt.Sprint(args[2]) == "8" && fmt.Sprint(args[4]) == lock: // release.lua
			select {
			case <-h.released:
				<-h.checked
			default:
			}
		}
		return next(ctx, cmd)
	}
}

// slowRenewal delays one node's extend.lua of key (not a regain) by d,
// so that a round hears another node first.
type slowRenewal struct {
	key string
	d   time.Duration
}

func (h slowRenewal) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h slowRenewal) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h slowRenewal) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		if len(args) >= 10 && fmt.Sprint(args[2]) == "5" && fmt.Sprint(args[3]) == "dlock:{"+h.key+"}" && fmt.Sprint(args[9]) == "0" {
			time.Sleep(h.d)
		}
		return next(ctx, cmd)
	}
}

// TestRegainRacingRelease: a renewal that takes back a node where the key
// was free (a regain: extend.lua may set a free key there) is under way
// when Release begins; the regain's command reaches that node only after
// the release ran there. The release must bury the token there, as for
// any command of the lock that may still run, so that the late regain
// sets nothing: a released token never holds a key again. Before, the
// release knew nothing of the regain in flight, the regain set the key to
// the dead token after Release returned nil, and only a clean-up, once
// its answer came, took it away.
func TestRegainRacingRelease(t *testing.T) {
	servers := dlocktest.StartN(t, 3)
	h := &gateHook{key: "regain", held: make(chan struct{}), release: make(chan struct{}), ran: make(chan struct{}),
		released: make(chan struct{}), checked: make(chan struct{})}
	var clients []redis.UniversalClient
	for i, s := range servers {
		c := s.Client()
		switch i {
		case 1:
			// Its renewal answers after the third node's (which finds
			// the key free), so that the round takes the third back.
			c.AddHook(slowRenewal{key: "regain", d: 200 * time.Millisecond})
		case 2:
			c.AddHook(h)
		}
		t.Cleanup(func() { _ = c.Close() })
		clients = append(clients, c)
	}
	defer close(h.checked)
	l, err := dlock.NewRedlock(clients)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	k, err := l.TryAcquire(ctx, "regain", dlock.WithTTL(30*time.Second), dlock.WithAutoRenew(false))
	if err != nil {
		t.Fatal(err)
	}
	direct := servers[2].Client()
	defer direct.Close()
	// The key expires on the third node (as after a partition).
	if err := direct.Del(ctx, "dlock:{regain}").Err(); err != nil {
		t.Fatal(err)
	}
	extended := make(chan error, 1)
	go func() { extended <- k.Extend(ctx, 30*time.Second) }()
	select {
	case <-h.held: // the regain is on its way to the third node
	case err := <-extended:
		t.Fatalf("Extend returned before its regain was sent: %v", err)
	}
	if err := k.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	close(h.released)
	close(h.release) // the regain reaches the third node now
	<-h.ran
	<-extended
	// No clean-up ran since (the hook holds it back).
	if v, err := direct.Get(ctx, "dlock:{regain}").Result(); err == nil && v == k.Token() {
		t.Fatalf("the third node holds the released token after Release returned nil: the late regain set it")
	}
}
