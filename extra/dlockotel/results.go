package dlockotel

import (
	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/results"
)

// result indexes the outcomes of acquisitions and attempts (shared with
// extra/dlockprom: internal/results).
type result = results.Index

const (
	rAcquired      = results.Acquired
	rBusy          = results.Busy
	rMisconfigured = results.Misconfigured
	rError         = results.Error
	nResults       = results.N
)

var resultNames = results.Names

// resultOf is the result of an acquisition or an attempt.
func resultOf(e dlock.Event) result { return results.Of(e) }
