package bench

import (
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/dlocktest"
)

// The peers' Acquire+Release under `go test -bench . -benchmem`, to compare
// with the root module's BenchmarkAcquireRelease.
func BenchmarkAcquireRelease(b *testing.B) {
	if _, err := dlocktest.Binary(); err != nil {
		b.Skip(err)
	}
	s := dlocktest.Start(b)
	for _, lib := range Libraries() {
		b.Run(lib.Name, func(b *testing.B) { BenchAcquireRelease(b, lib, []string{s.Addr()}) })
	}
}

func TestParseStats(t *testing.T) {
	info := "# Commandstats\r\ncmdstat_get:calls=3,usec=2\r\ncmdstat_info:calls=9,usec=1\r\n" +
		"cmdstat_config|resetstat:calls=1,usec=1\r\ncmdstat_evalsha:calls=2,usec=5\r\n" +
		"# CPU\r\nused_cpu_sys:1.500000\r\nused_cpu_user:0.250000\r\n"
	st := parseStats(info)
	if st.Commands != 5 {
		t.Errorf("Commands = %d, want 5", st.Commands)
	}
	if st.CPU.Seconds() != 1.75 {
		t.Errorf("CPU = %v, want 1.75s", st.CPU)
	}
}

// The shared-hold and AcquireAll scenarios, briefly: they run, nobody holds
// a key alongside a writer or another exclusive holder, and the report shows
// them.
func TestSharedAndMultiScenarios(t *testing.T) {
	if _, err := dlocktest.Binary(); err != nil {
		t.Skip(err)
	}
	s := dlocktest.Start(t)
	admin := s.Client()
	defer admin.Close()
	srv := Server{Addr: s.Addr(), Admin: admin}
	r := &Report{Reps: 1}
	rw, err := ReadWrite(srv, 4, time.Millisecond, 50*time.Millisecond, 400*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if rw.Reads == 0 || rw.Writes == 0 || rw.Violations != 0 || rw.Errors != 0 || rw.RoundTrips == 0 || rw.Commands == 0 {
		t.Errorf("read-write: %+v", rw)
	}
	r.ReadWrite = append(r.ReadWrite, rw)
	var row []MultiResult
	for _, v := range []MultiVariant{MultiAcquireAll, MultiOrdered} {
		m, err := Multi(srv, v, 8, 2, 4, 2, time.Millisecond, 50*time.Millisecond, 300*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		if m.Acquisitions == 0 || m.Violations != 0 || m.Errors != 0 {
			t.Errorf("%s: %+v", v, m)
		}
		row = append(row, m)
	}
	r.Multi = append(r.Multi, row)
	md := r.Markdown(false)
	for _, want := range []string{"## Shared holds: 4 readers, 1 writer", "| dlock-ctx |", "## Two keys at once", "| AcquireAll |", "| sorted Acquire ×2 |", "| ratio AcquireAll / baseline |"} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
}
