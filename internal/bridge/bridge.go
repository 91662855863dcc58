// Package bridge gives dlock's extras for other client families than
// go-redis (extra/dlockrueidis) the constructor of a Locker over their
// nodes, without a function in dlock's public API that only they could
// call.
package bridge

// NewLocker is set by package dlock to its constructor over other
// families' clients:
//
//	func(clients []node.Client, opts []dlock.Option) (*dlock.Locker, error)
//
// one client for New's Locker, several for NewRedlock's. (It is an any
// because this package cannot name dlock's types; an extra asserts it once,
// and its tests fail if the two disagree.)
var NewLocker any
