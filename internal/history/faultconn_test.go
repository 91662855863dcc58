package history

import (
	"context"
	"encoding"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/dlock-dev/dlock/internal/node"
)

// counted is an argument that counts its marshallings (the writes of the
// command that carries it, as a client makes them).
type counted struct{ n *atomic.Int32 }

func (c counted) MarshalBinary() ([]byte, error) {
	c.n.Add(1)
	return []byte("x"), nil
}

var _ encoding.BinaryMarshaler = counted{}

// writer is a node.Conn that writes each command it sends (marshalling its
// arguments, as go-redis does) and answers "OK".
type writer struct {
	mu   sync.Mutex
	sent int
}

func (w *writer) Do(_ context.Context, args ...any) (any, error) {
	for _, a := range args {
		if m, ok := a.(encoding.BinaryMarshaler); ok {
			_, _ = m.MarshalBinary()
		}
	}
	w.mu.Lock()
	w.sent++
	w.mu.Unlock()
	return "OK", nil
}

func (w *writer) DoMulti(ctx context.Context, cmds ...[]any) []node.Result {
	rs := make([]node.Result, len(cmds))
	for i, c := range cmds {
		rs[i].Val, rs[i].Err = w.Do(ctx, c...)
	}
	return rs
}

func (w *writer) DoWait(ctx context.Context, args []any, _ int, _ int64) (cmd, wait node.Result) {
	v, err := w.Do(ctx, args...)
	return node.Result{Val: v, Err: err}, node.Result{Val: int64(0)}
}

// TestFaultConnWrites: each fault writes a command as often as a client
// would (an argument that is an encoding.BinaryMarshaler counts each
// write): a copy held back counts once when it is held, and not again when
// it is delivered; a command run twice twice; a lost reply or a reset
// once.
func TestFaultConnWrites(t *testing.T) {
	x := &exploreRun{sab: newSabotage(""), kinds: map[string]int{}, histories: map[string]int{}, inflight: make([]inflight, 1)}
	x.inflight[0].m = map[uint64]int64{}
	for _, tc := range []struct {
		kind   string
		writes int32
		sent   int // through the inner Conn, eventually
	}{
		{fLost, 1, 1}, {fTwice, 2, 2}, {fRetried, 2, 2}, {fLate, 2, 2}, {fResetLate, 1, 1},
	} {
		var n atomic.Int32
		w := &writer{}
		f := &nodeFaults{run: x, rnd: rand.New(rand.NewPCG(1, 2))}
		c := &faultConn{inner: w, f: f}
		cmds := [][]any{{"evalsha", "sha", "1", "dlock:{k}", counted{&n}}}
		c.inject(context.Background(), tc.kind, cmds, false) // (fTwice waits for its twin)
		for _, h := range f.overdue(true) {
			h.via.send(context.Background(), h.cmds, h.multi)
		}
		w.mu.Lock()
		sent := w.sent
		w.mu.Unlock()
		if got := n.Load(); got != tc.writes || sent != tc.sent {
			t.Errorf("%s: %d writes, %d sent; want %d and %d", tc.kind, got, sent, tc.writes, tc.sent)
		}
	}
}
