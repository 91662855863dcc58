package dlock_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
)

// tlsConfigNoRoots trusts no CA: every server certificate is unknown.
var tlsConfigNoRoots = tls.Config{RootCAs: x509.NewCertPool(), MinVersion: tls.VersionTLS12}

// docRow returns the row of docs/reliability.md whose first cell is id.
func docRow(t *testing.T, path, id string) string {
	t.Helper()
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(doc), "\n") {
		if strings.HasPrefix(line, "| "+id+" |") {
			return line
		}
	}
	t.Errorf("%s has no row %s", path, id)
	return ""
}

// TestBadInputs: every bad input of the library in docs/reliability.md gets
// the error its row says, of the class its row says.
func TestBadInputs(t *testing.T) {
	plain := dlocktest.Start(t)
	secured, admin := securedServer(t)
	files, err := dlocktest.NewTLSFiles(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tlsServer := dlocktest.Start(t, dlocktest.WithTLS(files, false))
	dead := dlocktest.Start(t)
	dead.Kill()
	pc := plain.Client()
	defer pc.Close()
	pc.HSet(ctx(t), "dlock:{hash}", "field", "value")
	pc.Set(ctx(t), "dlock:{badfence}:fence", "not a number", 0)
	pc.Set(ctx(t), "dlock:{badmeta}:meta", "a string", 0)
	pc.Set(ctx(t), "dlock:{foreign}", "another program's value", 0)
	good := newLocker(t, pc)
	held, err := good.TryAcquire(ctx(t), "held")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(ctx(t))
	on := func(o redis.Options, lopts ...dlock.Option) *dlock.Locker {
		c := redis.NewClient(&o)
		t.Cleanup(func() { c.Close() })
		return newLocker(t, c, lopts...)
	}
	try := func(l *dlock.Locker, key string, opts ...dlock.LockOption) error {
		k, err := l.TryAcquire(ctx(t), key, opts...)
		if k != nil {
			k.Release(ctx(t))
		}
		return err
	}
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	closed := dlock.New(pc)
	closed.Close()
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": plain.Addr()}})
	defer ring.Close()
	var nilLock *dlock.Lock
	noScripts := dlocktest.Start(t, dlocktest.WithArgs("--rename-command", "EVALSHA", "", "--rename-command", "EVAL", ""))
	noWait := dlocktest.Start(t, dlocktest.WithArgs("--rename-command", "WAIT", ""))

	for _, tc := range []struct {
		id    string
		err   func() error
		class error
		msg   string // in the error, and in the doc's row
	}{
		{"L1", func() error { return try(good, "") }, dlock.ErrInvalid, "key must not be empty"},
		{"L2", func() error { return try(good, "k", dlock.WithTTL(0)) }, dlock.ErrInvalid, "TTL must be positive"},
		{"L3", func() error { return try(good, "k", dlock.WithTTL(5*time.Millisecond)) }, dlock.ErrInvalid, "too short for the clock-drift margin"},
		{"L4", func() error { return try(on(redis.Options{Addr: plain.Addr()}, dlock.WithNodeTimeout(-1)), "k") }, dlock.ErrInvalid, "node timeout must be positive"},
		{"L5", func() error {
			_, err := on(redis.Options{Addr: plain.Addr()}, dlock.WithNodeTimeout(-1)).Status(ctx(t), "k")
			return err
		}, dlock.ErrInvalid, "node timeout must be positive"},
		{"L6", func() error { return try(on(redis.Options{Addr: plain.Addr()}, dlock.WithPrefix("{app}:")), "k") }, dlock.ErrInvalid, "contains a brace"},
		{"L7", func() error { return try(on(redis.Options{Addr: plain.Addr()}, dlock.WithFenceRetention(0)), "k") }, dlock.ErrInvalid, "fence retention must be at least 1ms"},
		{"L8", func() error { return try(good, "k", dlock.WithMetadata(strings.Repeat("x", 1025))) }, dlock.ErrInvalid, "longer than 1024"},
		{"L9", func() error { return good.Do(ctx(t), "k", nil) }, dlock.ErrInvalid, "Do needs a function"},
		{"L10", func() error { _, err := dlock.NewRedlock(nil); return err }, dlock.ErrInvalid, "at least one client"},
		{"L11", func() error { _, err := dlock.NewRedlock([]redis.UniversalClient{pc, nil}); return err }, dlock.ErrInvalid, "client 1 of 2 is nil"},
		{"L12", func() error { _, err := dlock.NewRedlock([]redis.UniversalClient{pc, pc}); return err }, dlock.ErrMisconfigured, "are the same client, of"},
		{"L13", func() error { return try(newLocker(t, ring), "k") }, dlock.ErrInvalid, "Ring"},
		{"L14", func() error { return held.Extend(ctx(t), 0) }, dlock.ErrInvalid, "TTL must be positive"},
		{"L15", func() error { return nilLock.Release(ctx(t)) }, dlock.ErrNotHeld, "Release on a nil *Lock"},
		{"L16", func() error { return try(on(redis.Options{Addr: secured.Addr(), Password: "wrong"}), "k") }, dlock.ErrMisconfigured, "WRONGPASS"},
		{"L17", func() error { return try(on(redis.Options{Addr: secured.Addr()}), "k") }, dlock.ErrMisconfigured, "(the server requires a password: set Password"},
		{"L18", func() error {
			return try(on(redis.Options{Addr: secured.Addr(), Username: "nokeys", Password: "pw"}), "k")
		}, dlock.ErrMisconfigured, "NOPERM"},
		{"L19", func() error {
			l := on(redis.Options{Addr: secured.Addr(), Username: "nochannels", Password: "pw"})
			if err := try(newLocker(t, admin), "sub"); err != nil {
				return err
			}
			k, _ := newLocker(t, admin).TryAcquire(ctx(t), "sub")
			defer k.Release(ctx(t))
			_, err := l.Acquire(ctxTimeout(t, 10*time.Second), "sub")
			return err
		}, dlock.ErrMisconfigured, "the subscription to the waiters' channel"},
		{"L20", func() error { return try(good, "hash") }, dlock.ErrMisconfigured, "WRONGTYPE"},
		{"L21", func() error { return try(good, "badfence") }, dlock.ErrMisconfigured, "does not hold a positive integer"},
		{"L22", func() error { return try(good, "badmeta", dlock.WithMetadata("x")) }, dlock.ErrMisconfigured, "WRONGTYPE"},
		{"L23", func() error { return try(on(redis.Options{Addr: plain.Addr(), DB: 99}), "k") }, dlock.ErrMisconfigured, "DB index is out of range"},
		{"L24", func() error {
			return try(on(redis.Options{Addr: tlsServer.TLSAddr(), TLSConfig: &tlsConfigNoRoots}), "k")
		}, dlock.ErrMisconfigured, "certificate"},
		{"L25", func() error { return try(on(redis.Options{Addr: dead.Addr()}), "k") }, dlock.ErrUnavailable, "connection refused"},
		{"L26", func() error { return try(good, "held") }, dlock.ErrNotAcquired, "is held by another owner"},
		{"L27", func() error { _, err := good.Acquire(ended, "k"); return err }, dlock.ErrNotAcquired, "context canceled"},
		{"L28", func() error { return try(closed, "k") }, dlock.ErrClosed, "locker closed"},
		{"L29", func() error { return try(good, "foreign") }, dlock.ErrMisconfigured, "holds a value without expiry, which dlock did not write"},
		{"L30", func() error { return try(good, "k", dlock.WithShared(), dlock.WithLimit(3)) }, dlock.ErrInvalid, "WithShared and WithLimit(3) do not combine"},
		{"L31", func() error { _, err := good.Campaign(ctx(t), "k", "me", dlock.WithShared()); return err }, dlock.ErrInvalid, "WithShared does not apply"},
		{"L32", func() error { _, err := good.AcquireAll(ctx(t), nil); return err }, dlock.ErrInvalid, "AcquireAll needs at least one key"},
		{"L33", func() error { _, err := good.AcquireAll(ctx(t), []string{"a", "b", "a"}); return err }, dlock.ErrInvalid, `key "a" is named twice`},
		{"L34", func() error {
			pc2 := plain.Client()
			defer pc2.Close()
			_, err := dlock.NewRedlock([]redis.UniversalClient{pc, pc2})
			return err
		}, dlock.ErrMisconfigured, "clients 0 and 1 both reach"},
		{"L35", func() error {
			lc := redis.NewClient(&redis.Options{Addr: "localhost:" + plain.Addr()[strings.LastIndexByte(plain.Addr(), ':')+1:]})
			defer lc.Close()
			l, err := dlock.NewRedlock([]redis.UniversalClient{pc, lc})
			if err != nil {
				return err
			}
			defer l.Close()
			return try(l, "k")
		}, dlock.ErrMisconfigured, "are the same Redis server (run id"},
		{"L36", func() error { return try(on(redis.Options{Addr: noScripts.Addr()}), "k") }, dlock.ErrMisconfigured,
			"this server has no EVALSHA (ERR unknown command 'evalsha'): dlock runs every operation as a Lua script, and a server without scripting cannot run dlock"},
		{"L37", func() error { return try(on(redis.Options{Addr: noWait.Addr()}, dlock.WithReplicaAck(1)), "k") }, dlock.ErrMisconfigured,
			"WithReplicaAck needs WAIT, which this server does not have (ERR unknown command 'WAIT'; ElastiCache Serverless, for one, lacks it)"},
	} {
		t.Run(tc.id, func(t *testing.T) {
			err := tc.err()
			t.Log(err)
			if !errors.Is(err, tc.class) || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("%v, want %v containing %q", err, tc.class, tc.msg)
			}
			for _, c := range classes {
				if c != tc.class && errors.Is(err, c) {
					t.Errorf("%v is also %v", err, c)
				}
			}
			if row := docRow(t, "docs/reliability.md", tc.id); row != "" && !strings.Contains(row, tc.msg) {
				t.Errorf("docs/reliability.md row %s does not say %q: %s", tc.id, tc.msg, row)
			}
		})
	}
}
