package dlock_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/internal/script"
)

// replayScripts runs each EVALSHA (or EVAL, after NOSCRIPT) of the scripts
// it names twice, as a client's retry after a lost reply, or an extra's
// resend, would, and keeps the second reply; replies records both replies
// of each, per script.
type replayScripts struct {
	names map[string]string // SHA, and source → name
	mu    sync.Mutex
	pairs map[string][][2]string
}

func newReplayScripts(scripts map[string]*script.Script) *replayScripts {
	r := &replayScripts{names: map[string]string{}, pairs: map[string][][2]string{}}
	for name, s := range scripts {
		r.names[fmt.Sprint(s.SHA())] = name
		r.names[s.Source()] = name
	}
	return r
}

// replies returns the pairs of replies of the script's runs.
func (r *replayScripts) replies(name string) [][2]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([][2]string(nil), r.pairs[name]...)
}

func (r *replayScripts) DialHook(next redis.DialHook) redis.DialHook { return next }
func (r *replayScripts) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (r *replayScripts) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		if (cmd.Name() != "evalsha" && cmd.Name() != "eval") || len(args) < 2 || r.names[fmt.Sprint(args[1])] == "" {
			return next(ctx, cmd)
		}
		if err := next(ctx, cmd); err != nil {
			return err
		}
		first := fmt.Sprint(cmd.(*redis.Cmd).Val())
		err := next(ctx, cmd)
		r.mu.Lock()
		name := r.names[fmt.Sprint(args[1])]
		r.pairs[name] = append(r.pairs[name], [2]string{first, fmt.Sprint(cmd.(*redis.Cmd).Val())})
		r.mu.Unlock()
		return err
	}
}

// TestScriptsTwiceOnePublication: elected.lua (a new term's count and
// announcement) and asked.lua (a release request) run twice, as a retry
// after a lost reply runs them, through the library's own calls (Campaign,
// RequestRelease), against a real Redis: each publishes once, counts the
// term once, and answers the second time what it answered the first. Later
// commands of other arguments still work: the next term is counted and
// announced, the next holder asked.
func TestScriptsTwiceOnePublication(t *testing.T) {
	s := dlocktest.Start(t)
	replay := newReplayScripts(map[string]*script.Script{"elected.lua": script.Elected, "asked.lua": script.Asked})
	c := s.Client()
	defer c.Close()
	c.AddHook(replay)
	admin := s.Client()
	defer admin.Close()
	const leaderCh, askedCh = "dlock:leader:job", "dlock:inbox:asked"
	sub := admin.Subscribe(ctx(t), leaderCh, askedCh)
	defer sub.Close()
	for range 2 {
		if _, err := sub.ReceiveTimeout(ctx(t), 10*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	// Two Lockers on the replaying client: two processes that campaign in
	// turn.
	first, second := newLocker(t, c), newLocker(t, c)

	k1, err := first.Campaign(ctx(t), "job", "one")
	if err != nil {
		t.Fatal(err)
	}
	if err := first.RequestRelease(ctx(t), "job", "why"); err != nil {
		t.Fatalf("RequestRelease, its script run twice: %v", err)
	}
	if err := k1.Release(ctx(t)); err != nil {
		t.Fatal(err)
	}
	k2, err := second.Campaign(ctx(t), "job", "two")
	if err != nil {
		t.Fatal(err)
	}
	defer k2.Release(ctx(t))
	if err := first.RequestRelease(ctx(t), "job", "why again"); err != nil {
		t.Fatalf("a request for the next holder: %v", err)
	}
	// Everything sent is published by now: a marker on each channel ends
	// the messages to read.
	for _, ch := range []string{leaderCh, askedCh} {
		if err := admin.Publish(ctx(t), ch, "END").Err(); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string][]string{}
	for ended := 0; ended < 2; {
		m, err := sub.ReceiveMessage(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		if m.Payload == "END" {
			ended++
			continue
		}
		got[m.Channel] = append(got[m.Channel], m.Payload)
	}
	t1, t2 := k1.Fence(), k2.Fence()
	wantLeader := []string{
		fmt.Sprintf("C %d 1", t1), fmt.Sprintf("L %d %s one", t1, k1.Token()), fmt.Sprintf("V %d", t1),
		fmt.Sprintf("C %d 2", t2), fmt.Sprintf("L %d %s two", t2, k2.Token()),
	}
	if strings.Join(got[leaderCh], "|") != strings.Join(wantLeader, "|") {
		t.Errorf("the election's channel heard\n%q\nwant each announcement once:\n%q", got[leaderCh], wantLeader)
	}
	if len(got[askedCh]) != 2 || !strings.HasPrefix(got[askedCh][0], k1.Token()+"\n") || !strings.HasSuffix(got[askedCh][0], "\nwhy") ||
		!strings.HasPrefix(got[askedCh][1], k2.Token()+"\n") || !strings.HasSuffix(got[askedCh][1], "\nwhy again") {
		t.Errorf("the requests' channel heard %q, want each request once, for its holder", got[askedCh])
	}
	if n := admin.HGet(ctx(t), "dlock:{job}:terms", "n").Val(); n != "2" {
		t.Errorf("terms counted: %s, want 2", n)
	}
	for _, name := range []string{"elected.lua", "asked.lua"} {
		pairs := replay.replies(name)
		if len(pairs) != 2 {
			t.Errorf("%s ran twice %d times, want 2", name, len(pairs))
		}
		for _, p := range pairs {
			if p[0] != p[1] {
				t.Errorf("%s answered %s, then %s when it ran again", name, p[0], p[1])
			}
		}
	}
}
