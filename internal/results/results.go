// Package results indexes the values of dlock.Event.Result for the
// exporters (extra/dlockprom, extra/dlockotel), which keep one counter, or
// one set of attributes, per result.
package results

import "github.com/dlock-dev/dlock"

// Index is a result's position in Names.
type Index uint8

// The results, in the order of Names.
const (
	Acquired Index = iota
	Busy
	Timeout
	Canceled
	Unavailable
	Misconfigured
	Closed
	Invalid
	Error // any other: an event whose Result dlock does not give
	N     // how many
)

// ErrorName is the name of Error.
const ErrorName = "error"

// Names are the results' names: dlock's Result values, and ErrorName.
var Names = [N]string{
	Acquired: dlock.ResultAcquired, Busy: dlock.ResultBusy, Timeout: dlock.ResultTimeout, Canceled: dlock.ResultCanceled,
	Unavailable: dlock.ResultUnavailable, Misconfigured: dlock.ResultMisconfigured,
	Closed: dlock.ResultClosed, Invalid: dlock.ResultInvalid, Error: ErrorName,
}

var index = func() map[string]Index {
	m := make(map[string]Index, N)
	for r, name := range Names {
		m[name] = Index(r)
	}
	return m
}()

// Of is the result of an acquisition or an attempt (e.Result()), Error for
// a value that is not one of Names.
func Of(e dlock.Event) Index {
	if r, ok := index[e.Result()]; ok {
		return r
	}
	return Error
}
