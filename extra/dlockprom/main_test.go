package dlockprom_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/dlock-dev/dlock/dlocktest"
)

// redisAddr is the address of the redis-server that the example uses;
// TestMain starts it on a free loopback port.
var redisAddr = "127.0.0.1:6379"

func TestMain(m *testing.M) {
	s, err := dlocktest.NewServer()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	redisAddr = s.Addr()
	code := m.Run()
	_ = s.Close()
	if code == 0 {
		// go-redis keeps retrying a failed dial on a goroutine of its own
		// for up to a second after the client is closed.
		if err := goleak.Find(goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial")); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
