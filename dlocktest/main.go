package dlocktest

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// Main runs the tests of m with n redis-servers started on free loopback
// ports for the package's tests (the servers of tests that need no
// *testing.T), and then, if they passed, checks that no goroutine was left
// running. It stops the servers and returns the exit code. Examples that
// users copy name their Redis literally: see [MainAt] for them. Use it as
// TestMain:
//
//	var redisAddr string // the tests' Redis
//
//	func TestMain(m *testing.M) {
//		os.Exit(dlocktest.Main(m, 1, func(s []*dlocktest.Server) { redisAddr = s[0].Addr() }))
//	}
//
// started, if not nil, runs with the servers before the tests.
func Main(m *testing.M, n int, started func([]*Server)) int {
	var servers []*Server
	defer func() {
		for _, s := range servers {
			_ = s.Close()
		}
	}()
	for i := 0; i < n; i++ {
		s, err := NewServer()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		servers = append(servers, s)
	}
	if started != nil {
		started(servers)
	}
	return runChecked(m, func() {
		for _, s := range servers {
			_ = s.Close()
		}
		servers = nil
	})
}

// runChecked runs the tests of m, then stop, and then, if they passed,
// checks that no goroutine was left running; it returns the exit code.
func runChecked(m *testing.M, stop func()) int {
	code := m.Run()
	stop()
	if code == 0 {
		// go-redis keeps retrying a failed dial on a goroutine of its own
		// for up to a second after the client is closed; and newer
		// versions (v9.23) start a circuit breaker's cleanup goroutine per
		// node that closing a Cluster client does not stop.
		if err := goleak.Find(
			goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"),
			goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/maintnotifications.(*CircuitBreakerManager).cleanupLoop"),
		); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
	}
	return code
}
