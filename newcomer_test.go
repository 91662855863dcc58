package dlock_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
)

// TestRedlockSameServer: a Redlock whose clients reach one server twice is
// one point of failure, not a quorum, and is refused as ErrMisconfigured
// naming the server: two client objects of one address by NewRedlock; two
// addresses of one server (127.0.0.1:P and localhost:P, or a proxy in
// front of it), which only the server's run id tells, by the first
// acquisition, which leaves nothing behind.
func TestRedlockSameServer(t *testing.T) {
	t.Parallel()
	s := dlocktest.Start(t)
	other := dlocktest.Start(t)
	client := func(addr string) redis.UniversalClient {
		c := redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { c.Close() })
		return c
	}

	_, err := dlock.NewRedlock([]redis.UniversalClient{client(s.Addr()), client(other.Addr()), client(s.Addr())})
	t.Log(err)
	if !errors.Is(err, dlock.ErrMisconfigured) || !errors.Is(err, dlock.ErrInvalid) || !strings.Contains(err.Error(), "clients 0 and 2 both reach "+s.Addr()) {
		t.Errorf("two clients of one address: %v, want ErrMisconfigured naming %s", err, s.Addr())
	}

	proxy, err := dlocktest.NewProxy(s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	localhost := "localhost:" + s.Addr()[strings.LastIndexByte(s.Addr(), ':')+1:]
	for _, addr := range []string{localhost, proxy.Addr()} {
		t.Run(addr, func(t *testing.T) {
			// Two nodes, so that the first round has both answers.
			l, err := dlock.NewRedlock([]redis.UniversalClient{client(s.Addr()), client(addr)})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			for _, acquire := range []func() (*dlock.Lock, error){
				func() (*dlock.Lock, error) { return l.TryAcquire(ctx(t), "job") },
				func() (*dlock.Lock, error) { return l.Acquire(ctxTimeout(t, time.Minute), "job") },
			} {
				k, err := acquire()
				t.Log(err)
				if k != nil {
					k.Release(ctx(t))
				}
				if !errors.Is(err, dlock.ErrMisconfigured) || !strings.Contains(err.Error(), "are the same Redis server") ||
					!strings.Contains(err.Error(), s.Addr()) || !strings.Contains(err.Error(), addr) {
					t.Errorf("%s and %s: %v, want ErrMisconfigured naming both", s.Addr(), addr, err)
				}
			}
			l.Close() // waits for the clean-up of what the refused round set
			if n, err := client(s.Addr()).Exists(ctx(t), "dlock:{job}").Result(); n != 0 || err != nil {
				t.Errorf("the refused acquisition left its key: %d, %v", n, err)
			}
		})
	}
}

// logRecords is a slog.Handler that sends each record's text on a channel.
type logRecords chan string

func (h logRecords) Enabled(context.Context, slog.Level) bool { return true }
func (h logRecords) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Level.String() + " " + r.Message)
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%q", a.Key, a.Value.String())
		return true
	})
	h <- b.String()
	return nil
}
func (h logRecords) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h logRecords) WithGroup(string) slog.Handler      { return h }

// nodeErrors is a Hook that counts the node errors of rounds.
type nodeErrors chan struct{}

func (h nodeErrors) Start(ctx context.Context, _ string) context.Context { return ctx }
func (h nodeErrors) Event(_ context.Context, e dlock.Event) {
	if e.Kind == dlock.EventNodeError {
		select {
		case h <- struct{}{}:
		default:
		}
	}
}

// TestAcquireUnreachableLogged: Acquire without a deadline against an
// address where nothing listens keeps trying until its context ends, as
// documented, and says so once through slog.Default (the logger a user
// has without WithLogger), naming the address, the cause and the fix.
// Not parallel: it sets slog's default logger.
func TestAcquireUnreachableLogged(t *testing.T) {
	records := make(logRecords, 100)
	defer slog.SetDefault(slog.Default())
	slog.SetDefault(slog.New(records))

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	attempts := make(nodeErrors, 1)
	l := dlock.New(c, dlock.WithHook(attempts))
	defer l.Close()

	ctx, cancel := context.WithCancel(context.Background()) // no deadline
	defer cancel()
	done := make(chan error, 1)
	go func() {
		k, err := l.Acquire(ctx, "job")
		if k != nil {
			k.Release(context.Background())
		}
		done <- err
	}()
	var first string
	select {
	case first = <-records:
	case err := <-done:
		t.Fatalf("Acquire returned %v before its context ended", err)
	case <-time.After(30 * time.Second):
		t.Fatal("nothing logged within 30s while Acquire waited for an address where nothing listens")
	}
	t.Log(first)
	for _, want := range []string{"WARN", addr, "connection refused", `key="job"`, "nothing listens", "until its context ends"} {
		if !strings.Contains(first, want) {
			t.Errorf("the log record does not say %q: %s", want, first)
		}
	}
	// A few more failed attempts: still logged once.
	for range 3 {
		select {
		case <-attempts:
		case <-time.After(30 * time.Second):
			t.Fatal("Acquire stopped trying")
		}
	}
	cancel()
	if err := <-done; !errors.Is(err, dlock.ErrUnavailable) || !errors.Is(err, context.Canceled) {
		t.Errorf("Acquire: %v, want ErrUnavailable and context.Canceled", err)
	}
	select {
	case r := <-records:
		t.Errorf("logged again: %s", r)
	default:
	}
}

// TestTLSToPlainPort: a client with a TLSConfig pointed at a port that
// speaks plain text gets no answer to its handshake. The call is bounded
// by the node timeout, not by the client's DialTimeout (go-redis' TLS
// dialer does not heed the context), and so is Close.
func TestTLSToPlainPort(t *testing.T) {
	t.Parallel()
	s := dlocktest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), DialTimeout: 15 * time.Second,
		TLSConfig: &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}})
	defer c.Close()
	l := dlock.New(c)
	start := time.Now()
	k, err := l.TryAcquire(context.Background(), "job")
	if k != nil {
		k.Release(context.Background())
	}
	took := time.Since(start)
	t.Logf("%v after %s", err, took)
	if !errors.Is(err, dlock.ErrUnavailable) {
		t.Errorf("TryAcquire: %v, want ErrUnavailable", err)
	}
	l.Close()
	if all := time.Since(start); took > 10*time.Second || all > 14*time.Second {
		t.Errorf("TryAcquire took %s and Close after it %s: the node timeout is 1s, the client's DialTimeout 15s", took, all-took)
	}
}

// TestUnreachableNamed: a default go-redis client at an address where
// nothing listens: the error of TryAcquire, of an Acquire and a Do whose
// deadline ends (the README's program), and of Status is ErrUnavailable
// with the node's *NodeError, and names the cause, "connection refused",
// with every go-redis version (newer ones retry a refused dial until the
// call's deadline, so that the call itself ends with the deadline alone).
// TryAcquire fails within about the node timeout (1s).
func TestUnreachableNamed(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	l := dlock.New(c)
	defer l.Close()

	check := func(what string, err error, took time.Duration, deadline bool) {
		t.Helper()
		t.Logf("%s after %s: %v", what, took.Round(time.Millisecond), err)
		var ne *dlock.NodeError
		switch {
		case !errors.Is(err, dlock.ErrUnavailable) || errors.Is(err, dlock.ErrNotAcquired) || errors.Is(err, dlock.ErrMisconfigured):
			t.Errorf("%s: %v, want ErrUnavailable only", what, err)
		case !errors.As(err, &ne) || ne.Addr != addr || ne.Permanent():
			t.Errorf("%s: %v, want a transient *NodeError of %s", what, err, addr)
		case !strings.Contains(err.Error(), "connection refused") || !errors.Is(err, syscall.ECONNREFUSED):
			t.Errorf("%s: %v, does not name the cause: connection refused", what, err)
		case deadline && !errors.Is(err, context.DeadlineExceeded):
			t.Errorf("%s: %v, want the context's deadline too", what, err)
		}
	}
	start := time.Now()
	k, err := l.TryAcquire(context.Background(), "nightly-report")
	if k != nil {
		t.Fatal("acquired a lock where nothing listens")
	}
	took := time.Since(start)
	check("TryAcquire", err, took, false)
	if took > 5*time.Second {
		t.Errorf("TryAcquire took %s: want about the node timeout (1s)", took)
	}

	start = time.Now()
	k, err = l.Acquire(ctxTimeout(t, 2*time.Second), "nightly-report")
	if k != nil {
		t.Fatal("acquired a lock where nothing listens")
	}
	check("Acquire with a 2s deadline", err, time.Since(start), true)

	start = time.Now()
	err = l.Do(ctxTimeout(t, 2*time.Second), "nightly-report", func(context.Context) error {
		t.Error("Do ran its function where nothing listens")
		return nil
	})
	check("Do with a 2s deadline", err, time.Since(start), true)

	start = time.Now()
	_, err = l.Status(context.Background(), "nightly-report")
	check("Status", err, time.Since(start), false)
}
