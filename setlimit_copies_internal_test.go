package dlock

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/internal/script"
)

// scriptCopies records the commands of one script that a client sends
// while on, and their replies, so that a test can send them again: a
// client's retry, or a first copy that arrives after later commands.
type scriptCopies struct {
	sha, src string
	mu       sync.Mutex
	on       bool
	cmds     [][]any
	replies  []any
}

func newScriptCopies(s *script.Script) *scriptCopies {
	h := sha1.Sum([]byte(s.Source()))
	return &scriptCopies{sha: hex.EncodeToString(h[:]), src: s.Source()}
}

func (r *scriptCopies) note(cmd redis.Cmder) {
	args := cmd.Args()
	if len(args) < 2 {
		return
	}
	name := strings.ToLower(fmt.Sprint(args[0]))
	if !(name == "evalsha" && args[1] == r.sha) && !(name == "eval" && args[1] == r.src) {
		return
	}
	c, ok := cmd.(*redis.Cmd)
	if !ok || c.Err() != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.on {
		r.cmds = append(r.cmds, append([]any(nil), args...))
		r.replies = append(r.replies, c.Val())
	}
}

// take turns recording on (or off) and returns what it recorded since.
func (r *scriptCopies) take(on bool) (cmds [][]any, replies []any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	cmds, replies, r.cmds, r.replies, r.on = r.cmds, r.replies, nil, nil, on
	return cmds, replies
}

func (r *scriptCopies) DialHook(next redis.DialHook) redis.DialHook { return next }
func (r *scriptCopies) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		r.note(cmd)
		return err
	}
}
func (r *scriptCopies) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			r.note(cmd)
		}
		return err
	}
}

// TestSetLimitCopies: setlimit.lua's command sent again (a client's
// retry whose first reply was lost) answers as its first copy did and
// changes nothing; and the commands of SetLimit 3 → 5, arriving once more
// after SetLimit 5 → 4 returned (a first copy that ran late), leave the
// limit at 4: a late copy of an earlier change does not undo a later one.
func TestSetLimitCopies(t *testing.T) {
	s := dlocktest.Start(t)
	c := s.Client()
	defer c.Close()
	copies := newScriptCopies(script.SetLimit)
	c.AddHook(copies)
	l := New(c)
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for range 2 {
		k, err := l.TryAcquire(ctx, "sem", WithLimit(3), WithTTL(20*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer k.Release(ctx)
	}
	copies.take(true)
	if err := l.SetLimit(ctx, "sem", 5); err != nil {
		t.Fatal(err)
	}
	first, _ := copies.take(true)
	if err := l.SetLimit(ctx, "sem", 4); err != nil {
		t.Fatal(err)
	}
	second, replies := copies.take(false)
	if len(first) == 0 || len(second) == 0 {
		t.Fatalf("recorded %d and %d commands of setlimit.lua", len(first), len(second))
	}
	// The last change's command again: the same answer.
	last := len(second) - 1
	again, err := c.Do(ctx, second[last]...).Result()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(again, replies[last]) {
		t.Errorf("setlimit.lua sent twice answered %v, then %v", replies[last], again)
	}
	// The earlier change's commands, late.
	for _, cmd := range first {
		v, err := c.Do(ctx, cmd...).Result()
		t.Logf("a late copy of SetLimit 3 → 5: %v, %v", v, err)
	}
	st, err := l.Status(ctx, "sem")
	if err != nil || st.Limit != 4 {
		t.Errorf("after a late copy of SetLimit 3 → 5: limit %d, %v; want 4", st.Limit, err)
	}
	k, err := l.TryAcquire(ctx, "sem", WithLimit(4))
	if errors.Is(err, ErrMisconfigured) || err != nil {
		t.Fatalf("a permit of 4 after the late copy: %v", err)
	}
	defer k.Release(ctx)
}
