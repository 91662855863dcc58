//go:build unix && !linux && !darwin && !dragonfly && !freebsd && !netbsd && !openbsd

package main

import "os"

// isTTY reports false: dlock runs the command in its own process group
// on this system, as when stdin is not a terminal.
func isTTY(*os.File) bool { return false }
