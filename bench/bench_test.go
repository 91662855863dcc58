package bench

import (
	"testing"

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
