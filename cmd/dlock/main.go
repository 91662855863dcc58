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
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
