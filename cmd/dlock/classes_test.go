package main

import (
	"context"
	"strings"
	"testing"

	"github.com/dlock-dev/dlock/dlocktest"
)

// TestExitStatusByClass: 75 only for a busy lock (silent with -q), 69 when
// Redis cannot be reached, 78 when it refuses the commands; 69 and 78 are
// printed also with -q, so that a misconfigured fleet is never silent.
func TestExitStatusByClass(t *testing.T) {
	t.Parallel()
	s := dlocktest.Start(t)
	secured := dlocktest.Start(t, dlocktest.WithArgs("--requirepass", "secret"))
	dead := dlocktest.Start(t)
	dead.Kill()
	admin := s.Client()
	defer admin.Close()
	admin.HSet(context.Background(), "dlock:{hash}", "field", "value")
	k, err := newLocker(t, s).TryAcquire(context.Background(), "busy")
	if err != nil {
		t.Fatal(err)
	}
	defer k.Release(context.Background())

	for _, tc := range []struct {
		name  string
		url   string
		key   string
		code  int
		quiet bool   // prints nothing with -q
		says  string // on stderr, also with -q
		hint  string
	}{
		{"busy", s.URL(), "busy", exitNotAcquired, true, "", ""},
		{"connection refused", dead.URL(), "job", exitUnavailable, false, "cannot reach Redis", "server is up"},
		{"wrong password", "redis://:wrong@" + secured.Addr(), "job", exitConfig, false, "WRONGPASS", "password"},
		{"no password", secured.URL(), "job", exitConfig, false, "unauthenticated", "requires a password"},
		{"wrong type at the key", s.URL(), "hash", exitConfig, false, "WRONGTYPE", "another type"},
		{"database out of range", s.URL() + "/99", "job", exitConfig, false, "DB index", "database number"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, wait := range []string{"0s", "200ms"} {
				code, _, stderr := dlockRun(t, "run", "-q", "--wait", wait, "--redis", tc.url, tc.key, "--", "true")
				if code != tc.code {
					t.Errorf("--wait %s: exit %d, want %d", wait, code, tc.code)
				}
				if tc.quiet && stderr != "" {
					t.Errorf("--wait %s: -q printed %q for a busy lock", wait, stderr)
				}
				if !tc.quiet && (!strings.Contains(stderr, tc.says) || !strings.Contains(stderr, tc.hint)) {
					t.Errorf("--wait %s: -q printed %q, want %q and a hint about %q", wait, stderr, tc.says, tc.hint)
				}
			}
			want := tc.code
			if want == exitNotAcquired {
				want = exitOK
			}
			if code, _, _ := dlockRun(t, "status", "--redis", tc.url, tc.key); code != want {
				t.Errorf("status: exit %d, want %d", code, want)
			}
		})
	}
}
