package dlock_test

import (
	"testing"

	"github.com/dlock-dev/dlock/internal/contract"
)

// TestContract runs the contract suite that every client family runs
// (internal/contract; extra/dlockrueidis and extra/dlockvalkey run it on
// theirs) on go-redis clients, on each topology.
func TestContract(t *testing.T) {
	contract.Run(t, topologies)
}
