package inbox

import (
	"context"
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"
)

// replyErr is an error reply, as go-redis returns one.
type replyErr string

func (e replyErr) Error() string { return string(e) }
func (replyErr) RedisError()     {}

// TestShardedReplyErrors: how the receive loop takes each error reply to
// an SSUBSCRIBE, in the wordings of Redis 7.0 and 7.2 (and Valkey): a
// channel refusal refuses the slot; a refused command falls back to the
// classic inbox; a MOVED routes the slot again; anything else (a refused
// handshake, CROSSSLOT after go-redis resubscribed everything) drops the
// connection.
func TestShardedReplyErrors(t *testing.T) {
	for _, tc := range []struct {
		reply    string
		handled  bool // replyError's answer: false drops the connection
		refused  bool
		fellBack bool
		rerouted bool
	}{
		{"NOPERM this user has no permissions to access one of the channels used as arguments", true, true, false, true},
		{"NOPERM No permissions to access a channel", true, true, false, true},
		{"NOPERM this user has no permissions to run the 'ssubscribe' command", true, false, true, false},
		{"NOPERM User dlock has no permissions to run the 'ssubscribe' command", true, false, true, false},
		{"ERR unknown command 'SSUBSCRIBE', with args beginning with: ", true, false, true, false},
		{"MOVED 7 127.0.0.1:1", true, false, false, true},
		{"WRONGPASS invalid username-password pair or user is disabled.", false, false, false, false},
		{"CROSSSLOT Keys in request don't hash to the same slot", false, false, false, false},
	} {
		t.Run(tc.reply, func(t *testing.T) {
			var refused, fellBack bool
			// Clients of a port nothing listens on: they are not used, but
			// for a reload of the map after MOVED, which fails.
			cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
			defer cc.Close()
			c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
			defer c.Close()
			s := NewSharded(ShardedConfig{
				Refused:  func(error) { refused = true },
				FellBack: func(error) { fellBack = true },
				Wake:     func(int) {},
				Fallback: New(Config{}),
				Client:   cc,
			})
			sh := &shard{addr: "x", ps: c.SSubscribe(context.Background())}
			defer sh.ps.Close()
			st := &slotSub{channel: "c", ready: make(chan struct{}), at: sh}
			s.slots[7], s.byChannel["c"], s.shards["x"] = st, 7, sh
			s.routing = true // no router goroutine: the queue is only read
			defer func() { s.routing = false }()
			if got := s.replyError(sh, replyErr(tc.reply)); got != tc.handled {
				t.Fatalf("replyError = %v, want %v", got, tc.handled)
			}
			_, pending := s.pending[7]
			if refused != tc.refused || fellBack != tc.fellBack || pending != tc.rerouted {
				t.Errorf("refused %v, fell back %v, routed again %v; want %v, %v, %v", refused, fellBack, pending, tc.refused, tc.fellBack, tc.rerouted)
			}
			if tc.refused && !errors.Is(st.refusal, replyErr(tc.reply)) {
				t.Errorf("the slot's refusal is %v", st.refusal)
			}
		})
	}
}

// TestQuietRefusal: a refusal is told once in a row; it wakes every waiter
// (they report it), except for a subscription with QuietRefusal, whose
// refusal no waiter reports (its retries, every refusedRetry, would
// otherwise cost every waiter an attempt each time).
func TestQuietRefusal(t *testing.T) {
	for _, quiet := range []bool{false, true} {
		wakes, told := 0, 0
		s := New(Config{Refused: func(error) { told++ }, WakeAll: func() { wakes++ }, QuietRefusal: quiet})
		s.ready = make(chan struct{})
		l := (*listener)(s)
		l.Refused(errors.New("NOPERM"))
		l.Refused(errors.New("NOPERM"))
		want := 2
		if quiet {
			want = 0
		}
		if wakes != want || told != 1 {
			t.Errorf("QuietRefusal %v: %d wake-ups (want %d), told %d times (want 1)", quiet, wakes, want, told)
		}
	}
}
