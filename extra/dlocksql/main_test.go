package dlocksql_test

import (
	"os"
	"testing"

	"github.com/dlock-dev/dlock/dlocktest"
)

// redisAddr is the address of the redis-server that the example uses.
// TestMain starts one on a free loopback port.
var redisAddr = "127.0.0.1:6379"

func TestMain(m *testing.M) {
	os.Exit(dlocktest.Main(m, 1, func(s []*dlocktest.Server) { redisAddr = s[0].Addr() }))
}
