// Command dlock runs a command while holding a distributed lock on Redis, so
// that on a fleet of hosts exactly one of them runs it at a time; it also
// inspects and administers locks, and demonstrates them on local Redis
// servers (dlock demo). See usage.go for the manual.
//
// Flags are parsed with the standard library's flag package: the CLI has few
// flags, and a framework would add dependencies to a module whose core depends
// on go-redis alone.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	// A write to a closed stdout or stderr pipe (dlock run -v ... 2>&1 |
	// head -1) would otherwise kill dlock with SIGPIPE, and the command
	// with it, leaving the lock for its TTL: with SIGPIPE handled, the write
	// fails and dlock goes on. (Handled, not ignored: the command is started
	// with the default action, as a command of a shell would be.)
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	os.Exit(run(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
