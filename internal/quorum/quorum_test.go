package quorum

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/dlock-dev/dlock/internal/node"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func nodes(t *testing.T, n int) []*Node {
	ns := make([]*Node, n)
	for i := range ns {
		ns[i] = NewNode(nil, "node")
		t.Cleanup(ns[i].Close)
	}
	return ns
}

func okCount(rs []Result[int]) (ok, bad int) {
	for _, r := range rs {
		if r.Err == nil && r.Val == 1 {
			ok++
		} else {
			bad++
		}
	}
	return ok, bad
}

// TestFanoutDecidesEarly: a quorum of answers decides the round without
// waiting for a node that never answers, and the late answer is handed on.
func TestFanoutDecidesEarly(t *testing.T) {
	ns := nodes(t, 3)
	release := make(chan struct{})
	late := make(chan Result[int], 1)
	start := time.Now()
	rs, missing := Fanout(context.Background(), ns, time.Minute,
		RunFunc[int](func(ctx context.Context, i int, _ node.Conn) (int, error) {
			if i == 2 {
				<-release
			}
			return 1, nil
		}),
		func(rs []Result[int], suspects int) bool { ok, _ := okCount(rs); return ok >= 2 },
		LateFunc[int](func(r Result[int]) { late <- r }))
	if len(rs) != 2 || len(missing) != 0 {
		t.Fatalf("results %v, missing %v", rs, missing)
	}
	if time.Since(start) > 10*time.Second {
		t.Fatal("waited for the slow node")
	}
	close(release)
	if r := <-late; r.Node != 2 || r.Val != 1 {
		t.Errorf("late result %+v", r)
	}
}

// TestFanoutTimeoutMakesSuspect: a node that leaves a round unanswered is
// reported missing and is suspect in the next round, which decides without
// waiting for it; its next successful answer clears the suspicion.
func TestFanoutTimeoutMakesSuspect(t *testing.T) {
	ns := nodes(t, 3)
	block := make(chan struct{})
	defer close(block)
	fn := func(ctx context.Context, i int, _ node.Conn) (int, error) {
		if i == 0 {
			return 0, nil // refuses
		}
		if i == 2 {
			select {
			case <-block:
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		}
		return 1, nil
	}
	done := func(rs []Result[int], suspects int) bool {
		ok, bad := okCount(rs)
		return ok >= 2 || bad+suspects > 1
	}
	_, missing := Fanout(context.Background(), ns, 50*time.Millisecond, RunFunc[int](fn), done, nil)
	if len(missing) != 1 || missing[0].Node != 2 || !errors.Is(missing[0].Err, context.DeadlineExceeded) {
		t.Fatalf("missing = %+v, want node 2 timed out", missing)
	}
	if !ns[2].Suspect() {
		t.Fatal("node 2 not suspect after timing out")
	}
	start := time.Now()
	_, missing = Fanout(context.Background(), ns, time.Minute, RunFunc[int](fn), done, nil)
	if time.Since(start) > 10*time.Second {
		t.Fatal("the second round waited for the suspect node")
	}
	if len(missing) != 1 || !errors.Is(missing[0].Err, ErrNotWaited) {
		t.Fatalf("missing = %+v, want node 2 not waited for", missing)
	}
	ns[2].answered(nil)
	if ns[2].Suspect() {
		t.Error("a successful answer did not clear the suspicion")
	}
}

// TestCallBounded: a call that does not return is abandoned at the timeout,
// and its result goes to late.
func TestCallBounded(t *testing.T) {
	n := nodes(t, 1)[0]
	release := make(chan struct{})
	late := make(chan int, 1)
	_, err, answered, _ := Call(context.Background(), n, 20*time.Millisecond,
		func(ctx context.Context, _ node.Conn) (int, error) { <-release; return 7, nil },
		func(v int, err error) { late <- v })
	if answered || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("answered %v, err %v", answered, err)
	}
	close(release)
	if v := <-late; v != 7 {
		t.Errorf("late value %d", v)
	}
}

// stderrLogger logs as go-redis does by default.
type stderrLogger struct{}

func (stderrLogger) Printf(_ context.Context, format string, v ...any) {
	log.Printf("redis: "+format, v...)
}

// logRecorder records what go-redis logs.
type logRecorder struct {
	mu    sync.Mutex
	lines []string
}

func (r *logRecorder) Printf(_ context.Context, format string, v ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines = append(r.lines, fmt.Sprintf(format, v...))
}

// The probes of go-redis' WithTimeout copies and Conns dial nothing and log nothing,
// whichever go-redis version (make test runs this package's tests with the
// version in go.mod; the root package's with the newest too).
func TestProbeLogsNothing(t *testing.T) {
	rec := &logRecorder{}
	redis.SetLogger(rec)
	defer redis.SetLogger(stderrLogger{})
	keeps := probeKeepsHooks() // a failed dial would be logged before it returns
	diverts := probeConnsDivert()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.lines) > 0 {
		t.Errorf("the probe logged: %q", rec.lines)
	}
	t.Logf("WithTimeout copies keep hooks: %v; a Conn runs its own hooks after the client's: %v", keeps, diverts)
}

// TestFor: a majority for a lock; for n permits over N nodes, more than
// N·n/(n+1), so that n+1 holders cannot each hold a quorum.
func TestFor(t *testing.T) {
	for _, tc := range []struct{ n, limit, want int }{
		{1, 1, 1}, {3, 1, 2}, {4, 1, 3}, {5, 0, 3}, {5, 1, 3},
		{1, 3, 1}, {3, 2, 3}, {5, 2, 4}, {5, 3, 4}, {5, 4, 5}, {7, 2, 5},
	} {
		got := For(tc.n, tc.limit)
		if got != tc.want {
			t.Errorf("For(%d, %d) = %d, want %d", tc.n, tc.limit, got, tc.want)
		}
		// limit+1 holders with got grants each need (limit+1)·got grants,
		// more than the N·limit that the nodes can give.
		if tc.limit > 1 && (tc.limit+1)*got <= tc.n*tc.limit {
			t.Errorf("For(%d, %d) = %d: %d holders could each hold a quorum", tc.n, tc.limit, got, tc.limit+1)
		}
	}
}

// TestAgreed: a round that needs need grants with one value decides when
// need agree, when the refusals put need out of reach, or when every node
// answered; grants that disagree wait for the others.
func TestAgreed(t *testing.T) {
	g := func(node int, v int) Result[int] { return Result[int]{Node: node, Val: v} }
	refused := func(node int) Result[int] { return Result[int]{Node: node, Val: -1} }
	value := func(r Result[int]) (int, bool) { return r.Val, r.Val >= 0 }
	for _, tc := range []struct {
		name     string
		rs       []Result[int]
		suspects int
		want     bool
	}{
		{"three agree", []Result[int]{g(0, 7), g(1, 7), g(2, 7)}, 0, true},
		{"three disagree", []Result[int]{g(0, 7), g(1, 8), g(2, 7)}, 0, false},
		{"disagree, then a refusal", []Result[int]{g(0, 7), g(1, 8), refused(2)}, 0, false},
		{"three refusals", []Result[int]{refused(0), refused(1), refused(2)}, 0, true},
		{"two refusals and a suspect", []Result[int]{refused(0), refused(1)}, 1, true},
		{"every node, no agreement", []Result[int]{g(0, 7), g(1, 8), g(2, 7), g(3, 8), refused(4)}, 0, true},
		{"four and a suspect", []Result[int]{g(0, 7), g(1, 8), g(2, 7), g(3, 8)}, 1, true},
		{"none yet", nil, 0, false},
	} {
		if got := Agreed(tc.rs, tc.suspects, 5, 3, value); got != tc.want {
			t.Errorf("%s: Agreed %v, want %v", tc.name, got, tc.want)
		}
	}
}

// familyClient is a node.Client of another family than go-redis, for the
// calls that run inline with it (they never send a command here).
type familyClient struct{}

func (familyClient) Conn() node.Conn            { return familyConn{} }
func (familyClient) NewPubSub() node.PubSub     { return nil }
func (familyClient) Describe() node.Description { return node.Description{Addr: "family"} }

type familyConn struct{}

func (familyConn) Do(context.Context, ...any) (any, error) { panic("not sent") }
func (familyConn) DoMulti(context.Context, ...[]any) []node.Result {
	panic("not sent")
}
func (familyConn) DoWait(context.Context, []any, int, int64) (cmd, wait node.Result) {
	panic("not sent")
}

// callPastDeadline runs a Call on n whose fn answers only after the call's
// context ended: inline it waits for the context (the call ends with its
// error); on worker, it answers once the Call returned (a late answer). It
// returns the context fn was given and when fn began.
func callPastDeadline(ctx context.Context, n, worker *Node, timeout time.Duration) (c context.Context, began time.Time, err error, answered, inline bool) {
	release := make(chan struct{})
	got := make(chan context.Context, 1)
	_, err, answered, inline = Call(ctx, n, timeout, func(c context.Context, _ node.Conn) (int, error) {
		began = time.Now()
		got <- c
		if n == worker {
			<-release // an answer after the deadline: late
			return 1, nil
		}
		<-c.Done()
		return 0, c.Err()
	}, nil)
	c = <-got // fn set began before it sent c
	close(release)
	return c, began, err, answered, inline
}

// TestCallSoonerDeadline: a call whose caller's deadline comes before its
// timeout runs with the caller's context itself (no timer of its own), and
// ends at that deadline, unanswered, inline or on a worker; with a later
// deadline, the call's own timeout bounds it.
func TestCallSoonerDeadline(t *testing.T) {
	family := NewNodeOf(familyClient{}, "family") // inline up to MaxInline
	t.Cleanup(family.Close)
	worker := nodes(t, 1)[0] // no client: every call on a worker
	for _, n := range []*Node{family, worker} {
		for _, sooner := range []bool{true, false} {
			callerTimeout, timeout := 50*time.Millisecond, MaxInline
			if !sooner {
				callerTimeout, timeout = time.Minute, 50*time.Millisecond
			}
			ctx, cancel := context.WithTimeout(context.Background(), callerTimeout)
			start := time.Now()
			c, _, err, answered, inline := callPastDeadline(ctx, n, worker, timeout)
			cancel()
			if answered || !errors.Is(err, context.DeadlineExceeded) || inline != (n == family) {
				t.Errorf("%s, sooner %v: answered %v, inline %v, err %v; want a deadline", n.Addr, sooner, answered, inline, err)
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("%s, sooner %v: the call took %v", n.Addr, sooner, d)
			}
			if sooner && c != ctx {
				t.Errorf("%s: the call ran with a context of its own, not the caller's (whose deadline is sooner)", n.Addr)
			}
			if d, ok := c.Deadline(); !sooner && (!ok || d.After(start.Add(time.Second))) {
				t.Errorf("%s: the call's deadline is %v, want its timeout's", n.Addr, d)
			}
		}
	}
}

// A call whose context can never be cancelled (Background, WithoutCancel's:
// every Release's) shares its deadline with the node's other calls of the
// same timeout: it still ends with context.DeadlineExceeded, never after
// its timeout and at most a 32nd of it before, and keeps the caller's values.
func TestCallSharedDeadline(t *testing.T) {
	family := NewNodeOf(familyClient{}, "family") // inline up to MaxInline
	t.Cleanup(family.Close)
	worker := nodes(t, 1)[0] // no client: every call on a worker
	type key struct{}
	for _, n := range []*Node{family, worker} {
		for _, caller := range []context.Context{
			context.Background(),
			context.WithoutCancel(context.WithValue(context.Background(), key{}, "v")),
		} {
			const timeout = 50 * time.Millisecond
			start := time.Now()
			c, began, err, answered, _ := callPastDeadline(caller, n, worker, timeout)
			elapsed := time.Since(start)
			if answered || !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%s: answered %v, err %v; want a deadline", n.Addr, answered, err)
			}
			if elapsed < timeout-timeout/32 {
				t.Errorf("%s: the call ended after %v, more than a 32nd before its timeout %v", n.Addr, elapsed, timeout)
			}
			if d, ok := c.Deadline(); !ok || d.Before(start.Add(timeout-timeout/32)) || d.After(began.Add(timeout)) {
				t.Errorf("%s: the call's deadline is %v after it began (set %v), want within a 32nd before its timeout %v", n.Addr, d.Sub(began), ok, timeout)
			}
			if want := caller.Value(key{}); c.Value(key{}) != want {
				t.Errorf("%s: the call's context has value %v, want the caller's %v", n.Addr, c.Value(key{}), want)
			}
		}
	}
	// Calls that begin together share one deadline: no timer each.
	n := NewNodeOf(familyClient{}, "family")
	t.Cleanup(n.Close)
	var deadlines []time.Time
	for range 3 {
		Call(context.Background(), n, time.Minute, func(c context.Context, _ node.Conn) (int, error) {
			d, _ := c.Deadline()
			if d.After(time.Now().Add(time.Minute)) {
				t.Errorf("a call with a minute's timeout has a deadline %v away: beyond its timeout", time.Until(d))
			}
			deadlines = append(deadlines, d)
			return 0, nil
		}, nil)
	}
	if deadlines[0] != deadlines[1] || deadlines[1] != deadlines[2] {
		t.Errorf("three calls within a second of a minute's timeout had deadlines %v: want one shared", deadlines)
	}
}
