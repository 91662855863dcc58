package dlock

import (
	"testing"

	"github.com/dlock-dev/dlock/internal/quorum"
)

// TestLimitChangeBound checks the counting argument behind SetLimit's
// promise on a Redlock of up to six masters: while a change between limits
// lo < hi is under way, a permit counted against lo holds quorum.For(N, lo)
// nodes, each of which granted it with fewer than lo permits live (so at
// most lo such holders at once), one counted against hi holds
// quorum.For(N, hi), and no node holds more than hi permits. Then hi+1
// holders would need more permits than the nodes can hold, for every
// number b ≤ lo of holders counted against lo.
func TestLimitChangeBound(t *testing.T) {
	for n := 1; n <= 6; n++ {
		for lo := 2; lo <= 200; lo++ {
			for hi := lo + 1; hi <= 200; hi++ {
				qlo, qhi := quorum.For(n, lo), quorum.For(n, hi)
				for b := 0; b <= lo; b++ {
					if (hi+1-b)*qhi+b*qlo <= n*hi {
						t.Fatalf("%d masters, limits %d and %d: %d holders fit, %d of them counted against %d", n, lo, hi, hi+1, b, lo)
					}
				}
			}
		}
	}
}
