package dlockprom_test

import (
	"os"
	"testing"

	"github.com/dlock-dev/dlock/dlocktest"
)

func TestMain(m *testing.M) {
	// The Examples' Redis, at the address they name.
	os.Exit(dlocktest.MainAt(m, "127.0.0.1:6379"))
}
