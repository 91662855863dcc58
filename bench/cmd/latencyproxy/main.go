// Command latencyproxy runs bench.LatencyProxy in a process of its own, so
// that its CPU is kept out of the measured clients' process:
//
//	latencyproxy -target 127.0.0.1:6379 -delay 95us
//
// It prints the address it listens on, one line, and forwards until its
// standard input closes.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/dlock-dev/dlock/bench"
)

func main() {
	target := flag.String("target", "", "the server to forward to (host:port)")
	delay := flag.Duration("delay", 100*time.Microsecond, "the delay added each way")
	flag.Parse()
	p, err := bench.NewLatencyProxy(*target, *delay)
	if err != nil {
		fmt.Fprintln(os.Stderr, "latencyproxy:", err)
		os.Exit(1)
	}
	fmt.Println(p.Addr())
	_, _ = io.Copy(io.Discard, os.Stdin)
	_ = p.Close()
}
