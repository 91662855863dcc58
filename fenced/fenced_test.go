package fenced_test

import (
	"context"
	"errors"
	"math"
	"os"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/fenced"
)

func mustSet(t *testing.T, s *fenced.Store, key, value string, fence uint64) {
	t.Helper()
	if err := s.Set(context.Background(), key, value, fence); err != nil {
		t.Fatalf("Set(%q, %q, %d): %v", key, value, fence, err)
	}
}

// wantStale checks that err is a refusal of fence by key, which has seen
// seen.
func wantStale(t *testing.T, err error, key string, fence, seen uint64) {
	t.Helper()
	if !errors.Is(err, fenced.ErrStale) {
		t.Fatalf("err = %v, want ErrStale", err)
	}
	var se *fenced.StaleError
	if !errors.As(err, &se) {
		t.Fatalf("err = %v (%T), want a *StaleError", err, err)
	}
	if want := (fenced.StaleError{Key: key, Fence: fence, Seen: seen}); *se != want {
		t.Fatalf("StaleError = %+v, want %+v", *se, want)
	}
}

// wantValue checks the value and fence that Get returns.
func wantValue(t *testing.T, s *fenced.Store, key, value string, fence uint64) {
	t.Helper()
	v, f, err := s.Get(context.Background(), key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	if v != value || f != fence {
		t.Fatalf("Get(%q) = %q, fence %d; want %q, fence %d", key, v, f, value, fence)
	}
}

func TestStaleWriterRefused(t *testing.T) {
	s, _ := newStore(t)
	ctx := ctxTimeout(t, 10*time.Second)
	mustSet(t, s, "acct", "100", 10)
	err := s.Set(ctx, "acct", "0", 9)
	wantStale(t, err, "acct", 9, 10)
	wantValue(t, s, "acct", "100", 10)
	// A larger fence is accepted and becomes the one to beat.
	mustSet(t, s, "acct", "200", 11)
	wantStale(t, s.Set(ctx, "acct", "x", 10), "acct", 10, 11)
	wantValue(t, s, "acct", "200", 11)
}

func TestEqualFenceAccepted(t *testing.T) {
	s, _ := newStore(t)
	mustSet(t, s, "acct", "a", 5)
	mustSet(t, s, "acct", "b", 5) // the same holder writing again
	wantValue(t, s, "acct", "b", 5)
	mustSet(t, s, "acct", "b", 5) // a retry of a write that was done
	wantValue(t, s, "acct", "b", 5)
}

// TestHugeFences compares fences that a double cannot tell apart, and
// fences of different lengths whose plain string order is wrong.
func TestHugeFences(t *testing.T) {
	s, _ := newStore(t)
	ctx := ctxTimeout(t, 10*time.Second)
	for i, c := range []struct{ stored, older uint64 }{
		{math.MaxUint64, math.MaxUint64 - 1},
		{1<<53 + 1, 1 << 53}, // 9007199254740993, 9007199254740992: one double
		{1 << 63, 1<<63 - 1},
		{100, 99},                                   // "99" > "100" as strings
		{10000000000000000000, 9999999999999999999}, // 20 digits against 19
		{2, 1},
	} {
		key := "huge" + strconv.Itoa(i)
		mustSet(t, s, key, "new", c.stored)
		wantStale(t, s.Set(ctx, key, "old", c.older), key, c.older, c.stored)
		wantValue(t, s, key, "new", c.stored)
		mustSet(t, s, key, "same", c.stored)
		wantValue(t, s, key, "same", c.stored)

		// And upwards: the larger one is accepted.
		key += "up"
		mustSet(t, s, key, "old", c.older)
		mustSet(t, s, key, "new", c.stored)
		wantValue(t, s, key, "new", c.stored)
		wantStale(t, s.Set(ctx, key, "old", c.older), key, c.older, c.stored)
	}
}

func TestGetMissing(t *testing.T) {
	s, _ := newStore(t)
	v, f, err := s.Get(ctxTimeout(t, 10*time.Second), "nothing")
	if !errors.Is(err, fenced.ErrNotFound) || errors.Is(err, redis.Nil) || v != "" || f != 0 {
		t.Fatalf("Get = %q, %d, %v; want ErrNotFound (not redis.Nil) and fence 0", v, f, err)
	}
}

func TestEmptyValue(t *testing.T) {
	s, _ := newStore(t)
	mustSet(t, s, "k", "", 3)
	wantValue(t, s, "k", "", 3)
}

func TestDeleteKeepsFence(t *testing.T) {
	s, c := newStore(t)
	ctx := ctxTimeout(t, 10*time.Second)
	mustSet(t, s, "k", "v", 5)
	wantStale(t, s.Delete(ctx, "k", 4), "k", 4, 5)
	wantValue(t, s, "k", "v", 5)
	if err := s.Delete(ctx, "k", 6); err != nil {
		t.Fatal(err)
	}
	if _, f, err := s.Get(ctx, "k"); !errors.Is(err, fenced.ErrNotFound) || f != 6 {
		t.Fatalf("Get after Delete: fence %d, %v; want 6, ErrNotFound", f, err)
	}
	if h := c.HGetAll(ctx, s.Key("k")).Val(); len(h) != 1 || h["fence"] != "6" {
		t.Fatalf("hash after Delete = %v, want only the fence 6", h)
	}
	// The fence outlives the value: a stale writer is still refused.
	wantStale(t, s.Set(ctx, "k", "stale", 5), "k", 5, 6)
	if err := s.Delete(ctx, "k", 6); err != nil { // deleting nothing, again
		t.Fatal(err)
	}
	mustSet(t, s, "k", "w", 7)
	wantValue(t, s, "k", "w", 7)
	if err := s.Delete(ctx, "never", 1); err != nil {
		t.Fatal(err)
	}
	if _, f, err := s.Get(ctx, "never"); !errors.Is(err, fenced.ErrNotFound) || f != 1 {
		t.Fatalf("Get after Delete of nothing: fence %d, %v; want 1, ErrNotFound", f, err)
	}
}

func TestClaim(t *testing.T) {
	s, _ := newStore(t)
	ctx := ctxTimeout(t, 10*time.Second)
	mustSet(t, s, "k", "x", 5)
	v, found, err := s.Claim(ctx, "k", 6)
	if err != nil || !found || v != "x" {
		t.Fatalf("Claim = %q, %v, %v; want x, true, nil", v, found, err)
	}
	wantValue(t, s, "k", "x", 6) // the value is kept, the fence raised
	// The former holder is refused before the new one has written.
	wantStale(t, s.Set(ctx, "k", "stale", 5), "k", 5, 6)
	_, _, err = s.Claim(ctx, "k", 4)
	wantStale(t, err, "k", 4, 6)
	if v, found, err = s.Claim(ctx, "k", 6); err != nil || !found || v != "x" {
		t.Fatalf("Claim again = %q, %v, %v; want x, true, nil", v, found, err)
	}
	mustSet(t, s, "k", "y", 6) // the claimant writes
	wantValue(t, s, "k", "y", 6)

	// A resource never written: claimed, with no value.
	if v, found, err = s.Claim(ctx, "new", 9); err != nil || found || v != "" {
		t.Fatalf("Claim of nothing = %q, %v, %v; want \"\", false, nil", v, found, err)
	}
	wantStale(t, s.Set(ctx, "new", "stale", 8), "new", 8, 9)
	if _, f, err := s.Get(ctx, "new"); !errors.Is(err, fenced.ErrNotFound) || f != 9 {
		t.Fatalf("Get after Claim of nothing: fence %d, %v; want 9, ErrNotFound", f, err)
	}
}

// TestInvalid: bad arguments send nothing; a key that the Store did not
// write is an error that changes nothing.
func TestInvalid(t *testing.T) {
	srv := dlocktest.Start(t)
	var counter dlocktest.Counter
	c := srv.Client()
	defer c.Close()
	c.AddHook(&counter)
	s := fenced.New(c)
	ctx := ctxTimeout(t, 10*time.Second)

	for _, err := range []error{
		s.Set(ctx, "k", "v", 0),
		s.Set(ctx, "", "v", 1),
		s.Delete(ctx, "k", 0),
		func() error { _, _, err := s.Claim(ctx, "k", 0); return err }(),
		func() error { _, _, err := s.Get(ctx, ""); return err }(),
	} {
		if !errors.Is(err, fenced.ErrInvalid) {
			t.Errorf("err = %v, want ErrInvalid", err)
		}
	}
	if n := counter.Load(); n != 0 {
		t.Errorf("%d commands sent for invalid arguments, want 0", n)
	}

	// Another type at the key.
	if err := c.Set(ctx, s.Key("str"), "plain", 0).Err(); err != nil {
		t.Fatal(err)
	}
	err := s.Set(ctx, "str", "v", 1)
	if err == nil || errors.Is(err, fenced.ErrStale) || !redis.HasErrorPrefix(errors.Unwrap(err), "WRONGTYPE") {
		t.Errorf("Set on a string key: %v, want WRONGTYPE", err)
	}
	if _, _, err := s.Get(ctx, "str"); err == nil || !redis.HasErrorPrefix(errors.Unwrap(err), "WRONGTYPE") {
		t.Errorf("Get on a string key: %v, want WRONGTYPE", err)
	}
	if v := c.Get(ctx, s.Key("str")).Val(); v != "plain" {
		t.Errorf("string key = %q after a refused Set, want it unchanged", v)
	}

	// Fence fields that are not fences: refused, nothing written.
	for i, bad := range []string{"abc", "007", "0", "-1", "1.5", "", "18446744073709551616", "99999999999999999999999"} {
		key := "bad" + strconv.Itoa(i)
		if err := c.HSet(ctx, s.Key(key), "fence", bad, "value", "orig").Err(); err != nil {
			t.Fatal(err)
		}
		for _, op := range []func() error{
			func() error { return s.Set(ctx, key, "new", math.MaxUint64) },
			func() error { return s.Delete(ctx, key, math.MaxUint64) },
			func() error { _, _, err := s.Claim(ctx, key, math.MaxUint64); return err },
			func() error { _, _, err := s.Get(ctx, key); return err },
		} {
			if err := op(); err == nil || errors.Is(err, fenced.ErrStale) || errors.Is(err, fenced.ErrNotFound) {
				t.Errorf("fence field %q: err = %v, want an error", bad, err)
			}
		}
		if h := c.HGetAll(ctx, s.Key(key)).Val(); h["fence"] != bad || h["value"] != "orig" {
			t.Errorf("fence field %q: hash = %v after refused writes, want it unchanged", bad, h)
		}
	}

	// The script checks its arguments too, for callers other than a Store.
	for _, argv := range [][]any{
		{"set", "0", "v"}, {"set", "01", "v"}, {"set", "18446744073709551616", "v"},
		{"set", "1e3", "v"}, {"set", " 1", "v"}, {"drop", "1"}, {"set"},
	} {
		err := c.Eval(ctx, scriptSource(t), []string{s.Key("direct")}, argv...).Err()
		if err == nil {
			t.Errorf("script with ARGV %q: no error", argv)
		}
	}
	if n := c.Exists(ctx, s.Key("direct")).Val(); n != 0 {
		t.Errorf("refused script calls created the key")
	}
}

// TestNoScript: the script is sent again after SCRIPT FLUSH (EVALSHA, then
// EVAL on NOSCRIPT).
func TestNoScript(t *testing.T) {
	s, c := newStore(t)
	ctx := ctxTimeout(t, 10*time.Second)
	mustSet(t, s, "k", "a", 1)
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	mustSet(t, s, "k", "b", 2)
	wantValue(t, s, "k", "b", 2)
}

func TestPrefix(t *testing.T) {
	_, c := newStore(t)
	ctx := ctxTimeout(t, 10*time.Second)
	def, app, none := fenced.New(c), fenced.New(c, fenced.WithPrefix("app:")), fenced.New(c, fenced.WithPrefix(""))
	mustSet(t, def, "k", "def", 1)
	mustSet(t, app, "k", "app", 1)
	mustSet(t, none, "k", "none", 1)
	for key, want := range map[string]string{"fenced:k": "def", "app:k": "app", "k": "none"} {
		if v := c.HGet(ctx, key, "value").Val(); v != want {
			t.Errorf("HGET %s value = %q, want %q", key, v, want)
		}
	}
	if got := app.Key("x"); got != "app:x" {
		t.Errorf("Key = %q", got)
	}
}

// TestConcurrentWriters: writers with distinct fences race; the largest
// fence's value wins, and every refusal names a larger fence.
func TestConcurrentWriters(t *testing.T) {
	_, c := newStore(t)
	ctx := ctxTimeout(t, 30*time.Second)
	const writers, each = 8, 50
	var (
		mu       sync.Mutex
		accepted []uint64
		wg       sync.WaitGroup
	)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Each writer its own connection, as separate processes would.
			cl := redis.NewClient(&redis.Options{Addr: c.Options().Addr})
			defer cl.Close()
			s := fenced.New(cl)
			for i := 0; i < each; i++ {
				// Distinct fences: down from 2^64-1 (most of them stale),
				// and up from 2^53, where doubles lose precision.
				fence := uint64(math.MaxUint64) - uint64(i/2*writers+w)
				if i%2 == 0 {
					fence = uint64(1<<53 + i*writers + w)
				}
				err := s.Set(ctx, "shared", strconv.FormatUint(fence, 10), fence)
				var se *fenced.StaleError
				switch {
				case err == nil:
					mu.Lock()
					accepted = append(accepted, fence)
					mu.Unlock()
				case errors.As(err, &se):
					if se.Seen <= fence {
						t.Errorf("refused fence %d with seen %d", fence, se.Seen)
					}
				default:
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if len(accepted) == 0 {
		t.Fatal("no write accepted")
	}
	// Accepted fences, in the order the writers learnt of them, are not a
	// total order; their maximum is the stored one.
	sort.Slice(accepted, func(i, j int) bool { return accepted[i] < accepted[j] })
	max := accepted[len(accepted)-1]
	if max != math.MaxUint64 {
		t.Errorf("largest accepted fence %d, want 2^64-1 (its writer always wins)", max)
	}
	wantValue(t, fenced.New(c), "shared", strconv.FormatUint(max, 10), max)
}

// scriptSource returns write.lua's source, for calls with raw arguments.
func scriptSource(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("write.lua")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
