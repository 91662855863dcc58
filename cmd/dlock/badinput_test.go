package main

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/dlock-dev/dlock/dlocktest"
)

// TestBadInputs: every bad input of the CLI in docs/reliability.md gets the
// exit status and message its row says (also with -q: 69 and 78 are always
// printed, 75 never).
func TestBadInputs(t *testing.T) {
	t.Parallel()
	s := dlocktest.Start(t)
	other := dlocktest.Start(t)
	secured := dlocktest.Start(t, dlocktest.WithArgs("--requirepass", "secret"))
	files, err := dlocktest.NewTLSFiles(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tlsServer := dlocktest.Start(t, dlocktest.WithTLS(files, false))
	frozen := dlocktest.Start(t)
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
	if err := frozen.Freeze(); err != nil {
		t.Fatal(err)
	}
	defer frozen.Thaw()
	port := s.Addr()[strings.LastIndexByte(s.Addr(), ':')+1:]
	run := func(url string, rest ...string) []string {
		return append([]string{"run", "-q", "--redis", url}, rest...)
	}

	for _, tc := range []struct {
		id   string
		args []string
		code int
		msg  string // on stderr, and in the doc's row ("" for none)
	}{
		{"C1", []string{}, exitUsage, "Usage:"},
		{"C2", []string{"frobnicate"}, exitUsage, `unknown command "frobnicate"`},
		{"C3", []string{"run"}, exitUsage, "missing KEY"},
		{"C4", []string{"run", "--", "nice", "date"}, exitUsage, "missing KEY before --"},
		{"C5", []string{"run", "job"}, exitUsage, "missing COMMAND"},
		{"C6", []string{"run", "--ttl", "soon", "job", "--", "true"}, exitUsage, "is not a duration"},
		{"C7", []string{"run", "--ttl", "1ms", "job", "--", "true"}, exitUsage, "is too short"},
		{"C8", []string{"run", "--wait", "-1s", "job", "--", "true"}, exitUsage, "is negative"},
		{"C9", []string{"run", "--frobnicate", "job", "--", "true"}, exitUsage, "unknown flag --frobnicate"},
		{"C10", run(s.Addr(), "job", "--", "true"), exitUsage, "no scheme: write redis://"},
		{"C11", run("http://"+s.Addr(), "job", "--", "true"), exitUsage, "invalid URL scheme"},
		{"C12", run(s.URL()+","+s.URL(), "job", "--", "true"), exitUsage, "name the same database"},
		{"C13", run(s.URL()+",redis://localhost:"+port+","+other.URL(), "job", "--", "true"), exitConfig, "reach the same server"},
		{"C14", run(s.URL(), "--tls-ca", files.CA, "job", "--", "true"), exitUsage, "need a rediss:// URL"},
		{"C15", run("rediss://"+tlsServer.TLSAddr(), "--tls-key", files.ClientKey, "job", "--", "true"), exitUsage, "go together"},
		{"C16", run(s.URL()+"/2", "--cluster", "job", "--", "true"), exitUsage, "has no database"},
		{"C17", run(s.URL(), "--cluster", "--sentinel", "m", "job", "--", "true"), exitUsage, "exclude each other"},
		{"C18", run(s.URL(), "--metadata", strings.Repeat("x", 1025), "job", "--", "true"), exitUsage, "longer than 1024"},
		{"C19", []string{"release", "--redis", s.URL(), "job"}, exitUsage, "add --force to confirm"},
		{"C20", run("redis://:wrong@"+secured.Addr(), "job", "--", "true"), exitConfig, "WRONGPASS"},
		{"C21", run(secured.URL(), "job", "--", "true"), exitConfig, "unauthenticated"},
		{"C22", run(s.URL(), "hash", "--", "true"), exitConfig, "WRONGTYPE"},
		{"C23", run(s.URL()+"/99", "job", "--", "true"), exitConfig, "DB index is out of range"},
		{"C24", run("rediss://"+tlsServer.TLSAddr(), "job", "--", "true"), exitConfig, "certificate"},
		{"C25", run(dead.URL(), "job", "--", "true"), exitUnavailable, "connection refused"},
		{"C26", run(frozen.URL(), "job", "--", "true"), exitUnavailable, "context deadline exceeded"},
		{"C27", run(s.URL(), "busy", "--", "true"), exitNotAcquired, ""},
		{"C28", []string{"status", "--redis", dead.URL(), "job"}, exitUnavailable, "cannot reach Redis"},
		{"C13b", run(s.URL()+"/0,"+s.URL()+"/1", "job", "--", "true"), exitConfig, "reach the same server (databases 0 and 1 of it)"},
		{"C32", run(s.URL(), "--cluster", "job", "--", "true"), exitConfig, "is not a node of a Redis Cluster"},
		{"C34", run("rediss://"+s.Addr(), "job", "--", "true"), exitUnavailable, "speaks plain text, not TLS: write redis:// instead of rediss://"},
	} {
		t.Run(tc.id, func(t *testing.T) {
			code, _, stderr := dlockRun(t, tc.args...)
			if code != tc.code {
				t.Errorf("exit %d, want %d", code, tc.code)
			}
			if tc.msg == "" && stderr != "" {
				t.Errorf("printed %q with -q", stderr)
			}
			if !strings.Contains(stderr, tc.msg) {
				t.Errorf("stderr %q does not say %q", stderr, tc.msg)
			}
			row := docRow(t, tc.id)
			if row != "" && (!strings.Contains(row, tc.msg) || !strings.Contains(row, "| "+strconv.Itoa(tc.code)+" |")) {
				t.Errorf("docs/reliability.md row %s does not say exit %d and %q: %s", tc.id, tc.code, tc.msg, row)
			}
		})
	}
}

// docRow returns the row of docs/reliability.md whose first cell is id.
func docRow(t *testing.T, id string) string {
	t.Helper()
	doc, err := os.ReadFile("../../docs/reliability.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(doc), "\n") {
		if strings.HasPrefix(line, "| "+id+" |") {
			return line
		}
	}
	t.Errorf("docs/reliability.md has no row %s", id)
	return ""
}
