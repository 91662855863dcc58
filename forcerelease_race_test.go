package dlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
)

// beforeHook runs f (once per matching command, up to n times) before a
// command whose name is cmd and whose first key is key goes out.
type beforeHook struct {
	cmd, key string
	n        int
	f        func()
}

func (h *beforeHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *beforeHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *beforeHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		if h.n > 0 && len(args) > 1 && strings.EqualFold(cmd.Name(), h.cmd) && args[1] == h.key {
			h.n--
			h.f()
		}
		return next(ctx, cmd)
	}
}

// TestForceReleaseChangedShape: ForceRelease of a key held by shared holds
// reads their permits; a writer that takes the key between the read of its
// type and the read of the permits (the readers released, a plain lock
// set) is no misconfiguration: ForceRelease releases what the key holds
// then. Before, the read of the permits failed with WRONGTYPE, and
// ForceRelease returned ErrMisconfigured though every node answered.
func TestForceReleaseChangedShape(t *testing.T) {
	s := dlocktest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := s.Client()
	defer c.Close()
	l := dlock.New(c)
	defer l.Close()
	reader, err := l.TryAcquire(ctx, "rw", dlock.WithShared(), dlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var writer *dlock.Lock
	fc := s.Client()
	defer fc.Close()
	fc.AddHook(&beforeHook{cmd: "zrange", key: "dlock:{rw}", n: 1, f: func() {
		if err := reader.Release(ctx); err != nil {
			t.Errorf("the reader's Release: %v", err)
		}
		if writer, err = l.TryAcquire(ctx, "rw", dlock.WithTTL(10*time.Second)); err != nil {
			t.Errorf("the writer's TryAcquire: %v", err)
		}
	}})
	f := dlock.New(fc)
	defer f.Close()
	n, err := f.ForceRelease(ctx, "rw")
	if err != nil {
		t.Fatalf("ForceRelease: %v", err)
	}
	if writer != nil {
		if v, err := c.Get(ctx, "dlock:{rw}").Result(); err == nil && v == writer.Token() {
			t.Errorf("ForceRelease returned %d with the writer's hold left in place", n)
		}
	}
}

// TestForceReleaseContended: ForceRelease of a lock that changes hands
// between each read of its holder and the release of it (each holder
// releases, another acquires) answers as every node did: the holders it
// read are gone, and the key is held by one that acquired during the
// call. Before, after three tries it gave up with "the lock changed
// hands during the release, try again" as ErrUnavailable ("too few Redis
// nodes answered"), though every node answered every command.
func TestForceReleaseContended(t *testing.T) {
	s := dlocktest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := s.Client()
	defer c.Close()
	l := dlock.New(c)
	defer l.Close()
	k, err := l.TryAcquire(ctx, "busy", dlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	fc := s.Client()
	defer fc.Close()
	hand := &afterGet{key: "dlock:{busy}", n: 5, f: func() {
		if err := k.Release(ctx); err != nil {
			t.Errorf("Release: %v", err)
		}
		if k, err = l.TryAcquire(ctx, "busy", dlock.WithTTL(10*time.Second)); err != nil {
			t.Errorf("TryAcquire: %v", err)
		}
	}}
	fc.AddHook(hand)
	f := dlock.New(fc)
	defer f.Close()
	_, err = f.ForceRelease(ctx, "busy")
	if errors.Is(err, dlock.ErrUnavailable) {
		t.Fatalf("ForceRelease, every node answering: %v", err)
	}
	if err != nil {
		t.Fatalf("ForceRelease: %v", err)
	}
}

// afterGet runs f after each of the first n GETs of key.
type afterGet struct {
	key string
	n   int
	f   func()
}

func (h *afterGet) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *afterGet) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *afterGet) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		args := cmd.Args()
		if h.n > 0 && len(args) == 2 && strings.EqualFold(cmd.Name(), "get") && args[1] == h.key {
			h.n--
			h.f()
		}
		return err
	}
}
