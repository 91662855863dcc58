// Code generated from extra/dlockrueidis/pubsub_internal_test.go by generated_test.go; DO NOT EDIT.

package dlockvalkey

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/internal/node"
)

// receive returns the next event of p that is a message or a confirmation,
// and the errors before it.
func receive(t *testing.T, p *pubSub) (node.Event, []error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var errs []error
	for {
		e, err := p.Receive(ctx)
		if ctx.Err() != nil {
			t.Fatalf("nothing received (errors %v)", errs)
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if e.Kind == "message" || e.Kind == "subscribe" {
			return e, errs
		}
	}
}

// TestPubSubReconnects: a subscription is confirmed, receives messages,
// and after its server restarts, reports the broken connection, is made
// again by itself (a new confirmation) and receives again; a refusal is
// an error reply that Receive gives; Close ends Receive with ErrClosed.
func TestPubSubReconnects(t *testing.T) {
	s := dlocktest.Start(t)
	c, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{s.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p := newPubSub(c)
	defer p.Close()
	ctx := context.Background()
	_ = p.Subscribe(ctx, "inbox")
	if e, _ := receive(t, p); e.Kind != "subscribe" {
		t.Fatalf("first event %+v, want the confirmation", e)
	}
	publish := func() {
		t.Helper()
		if err := c.Do(ctx, c.B().Publish().Channel("inbox").Message("hello").Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	publish()
	if e, _ := receive(t, p); e.Kind != "message" || e.Payload != "hello" {
		t.Fatalf("got %+v, want the message", e)
	}

	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	e, errs := receive(t, p)
	if e.Kind != "subscribe" || len(errs) == 0 {
		t.Fatalf("after a restart: %+v after errors %v, want the broken connection then a new confirmation", e, errs)
	}
	deadline := time.Now().Add(10 * time.Second)
	for publishCount := int64(0); publishCount == 0; {
		if time.Now().After(deadline) {
			t.Fatal("no subscriber after the restart")
		}
		publishCount, _ = c.Do(ctx, c.B().Publish().Channel("inbox").Message("again").Build()).AsInt64()
	}
	if e, _ := receive(t, p); e.Kind != "message" || e.Payload != "again" {
		t.Fatalf("after a restart, got %+v", e)
	}

	if err := c.Do(ctx, c.B().AclSetuser().Username("narrow").Rule("on", ">pw", "~*", "&allowed", "+@all").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	nc, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{s.Addr()}, Username: "narrow", Password: "pw"})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	np := newPubSub(nc)
	defer np.Close()
	if err := np.Subscribe(ctx, "inbox"); err != nil && !node.IsReply(err) {
		t.Fatalf("a refused SUBSCRIBE: %v, want nil (made by the connection) or an error reply", err)
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := np.Receive(rctx); !node.IsReply(err) {
		t.Fatalf("Receive after a refusal: %v, want the error reply", err)
	}

	p.Close()
	if _, err := p.Receive(ctx); !errors.Is(err, node.ErrClosed) {
		t.Fatalf("Receive after Close: %v", err)
	}
}

// TestNestedErrorReply: an error reply inside an array (extend.lua answers
// one per lock of a batch) is an error reply for dlock, as on go-redis.
func TestNestedErrorReply(t *testing.T) {
	s := dlocktest.Start(t)
	c, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{s.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	v, err := (&conn{c}).Do(context.Background(), "eval", "return {1, redis.error_reply('WRONGTYPE not a hash')}", 0)
	arr, _ := v.([]any)
	if err != nil || len(arr) != 2 {
		t.Fatalf("%v, %v", v, err)
	}
	if e, ok := arr[1].(error); !ok || !node.IsReply(e) || !node.HasErrorPrefix(e, "WRONGTYPE") {
		t.Errorf("the nested error %#v is not an error reply", arr[1])
	}
}

// TestFrozenServerBounded: on a frozen server, DoWait (a dedicated
// connection, which valkey dials without a context) and a first
// Subscribe return when their ctx ends, not after the Dialer's 5s; Close
// does not wait for the dial.
func TestFrozenServerBounded(t *testing.T) {
	s := dlocktest.Start(t)
	c, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{s.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := s.Freeze(); err != nil {
		t.Fatal(err)
	}
	defer s.Thaw()
	bounded := func(what string, f func(ctx context.Context)) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		start := time.Now()
		f(ctx)
		if d := time.Since(start); d > 2*time.Second { // the Dialer's timeout is 5s
			t.Errorf("%s took %s with a 200ms ctx", what, d)
		}
	}
	bounded("DoWait", func(ctx context.Context) {
		if cmd, _ := (&conn{c}).DoWait(ctx, []any{"eval", "return 1", 0}, 1, 100); !errors.Is(cmd.Err, context.DeadlineExceeded) {
			t.Errorf("DoWait: %v, want the deadline", cmd.Err)
		}
	})
	p := newPubSub(c)
	bounded("Subscribe", func(ctx context.Context) { _ = p.Subscribe(ctx, "inbox") })
	bounded("Close", func(context.Context) { p.Close() })
}

// TestDoMultiRetried: a pipeline whose connection the server closed is
// sent again (its scripts and reads: see TestAgain). (When valkey saw
// the close first and dialed again already, the pipeline succeeds without
// a retry: the test then proves nothing, which happens in about a third of
// the runs; TestConnectionClosedRetried fails every time without them.)
func TestDoMultiRetried(t *testing.T) {
	s := dlocktest.Start(t)
	admin := s.Client()
	defer admin.Close()
	c, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{s.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // as dlock's calls: a deadline
	defer cancel()
	cn := &conn{c}
	// valkey picks one of its connections by the first command's key:
	// the pipeline below goes where this one goes.
	if rs := cn.DoMulti(ctx, []any{"get", "{k}n"}, []any{"ping"}); rs[0].Err != nil {
		t.Fatal(rs[0].Err)
	}
	if err := admin.Do(ctx, "client", "kill", "type", "normal", "skipme", "yes").Err(); err != nil {
		t.Fatal(err)
	}
	rs := cn.DoMulti(ctx, []any{"eval", "return redis.call('INCR', KEYS[1])", 1, "{k}n"}, []any{"get", "{k}n"})
	if rs[0].Err != nil || rs[0].Val != int64(1) || rs[1].Err != nil || rs[1].Val != "1" {
		t.Errorf("a script and a read after the connection closed: %+v", rs)
	}
}

// TestAgain: what is sent again after a failure: dlock's scripts and the
// commands that only read, failed by their connection; not a PUBLISH (a
// second message), an error reply, a failure after ctx ended, or one of a
// closed client.
func TestAgain(t *testing.T) {
	ctx := context.Background()
	done, cancel := context.WithCancel(ctx)
	cancel()
	for _, c := range []struct {
		ctx  context.Context
		args []any
		err  error
		want bool
	}{
		{ctx, []any{"evalsha", "sha", 1, "k"}, io.EOF, true},
		{ctx, []any{"EVAL", "return 1", 0}, io.ErrUnexpectedEOF, true},
		{ctx, []any{"get", "k"}, io.EOF, true},
		{ctx, []any{"info", "server"}, io.EOF, true},
		{ctx, []any{"publish", "ch", "m"}, io.EOF, false},
		{ctx, []any{"evalsha", "sha", 1, "k"}, nil, false},
		{ctx, []any{"evalsha", "sha", 1, "k"}, &node.ReplyError{Msg: "NOSCRIPT"}, false},
		{ctx, []any{"evalsha", "sha", 1, "k"}, context.DeadlineExceeded, false},
		{done, []any{"evalsha", "sha", 1, "k"}, io.EOF, false},
		{ctx, []any{"evalsha", "sha", 1, "k"}, valkey.ErrClosing, false},
	} {
		if got := again(c.ctx, c.args, c.err); got != c.want {
			t.Errorf("again(%v, %v, ctx err %v) = %v, want %v", c.args[0], c.err, c.ctx.Err(), got, c.want)
		}
	}
}
