package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"
	"time"
)

// run is the whole command: main only calls it, so that tests can too.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	c := &cli{stdin: stdin, stdout: stdout, stderr: stderr}
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	switch cmd, rest := args[0], args[1:]; cmd {
	case "run":
		return c.run(ctx, rest)
	case "status":
		return c.status(ctx, rest)
	case "list":
		return c.list(ctx, rest)
	case "release":
		return c.release(ctx, rest)
	case "acquire":
		return c.acquireCmd(ctx, rest)
	case "extend":
		return c.extendCmd(ctx, rest)
	case "request":
		return c.request(ctx, rest)
	case "demo":
		return c.demo(ctx, rest)
	case guardCommand:
		return c.guard(rest)
	case "help", "-h", "-help", "--help":
		return c.help(rest)
	case "version", "-version", "--version":
		fmt.Fprintln(stdout, version())
		return exitOK
	default:
		if strings.HasPrefix(cmd, "-") {
			return c.usageError("", "flags go after the subcommand, as in: dlock run %s ...", cmd)
		}
		return c.usageError("", "unknown command %q (commands: run, acquire, extend, release, request, status, list, demo, help, version)", cmd)
	}
}

// cli carries the streams and the verbosity of one invocation.
type cli struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	quiet, verbose bool
}

// errorf prints an error message; errors are printed even with --quiet.
func (c *cli) errorf(format string, args ...any) {
	fmt.Fprintf(c.stderr, "dlock: "+format+"\n", args...)
}

// hintf prints a hint that follows an error.
func (c *cli) hintf(format string, args ...any) {
	fmt.Fprintf(c.stderr, "dlock: hint: "+format+"\n", args...)
}

// warnf prints a warning, unless --quiet.
func (c *cli) warnf(format string, args ...any) {
	if !c.quiet {
		fmt.Fprintf(c.stderr, "dlock: warning: "+format+"\n", args...)
	}
}

// notef prints a routine message, unless --quiet.
func (c *cli) notef(format string, args ...any) {
	if !c.quiet {
		fmt.Fprintf(c.stderr, "dlock: "+format+"\n", args...)
	}
}

// debugf prints what dlock is doing, with --verbose.
func (c *cli) debugf(format string, args ...any) {
	if c.verbose && !c.quiet {
		fmt.Fprintf(c.stderr, "dlock: "+format+"\n", args...)
	}
}

// usageError reports a usage error, with a pointer to the help of sub (or
// the general help), and returns exitUsage.
func (c *cli) usageError(sub, format string, args ...any) int {
	c.errorf(format, args...)
	if sub == "" {
		c.hintf("run 'dlock help' for usage")
	} else {
		c.hintf("run 'dlock help %s' for usage", sub)
	}
	return exitUsage
}

func (c *cli) help(args []string) int {
	if len(args) == 0 {
		fmt.Fprint(c.stdout, usage)
		return exitOK
	}
	text, ok := subUsage[args[0]]
	if !ok {
		return c.usageError("", "no help for %q (commands: run, acquire, extend, release, request, status, list, demo, help, version)", args[0])
	}
	fmt.Fprint(c.stdout, text)
	return exitOK
}

// version describes the binary from its build information.
func version() string {
	v := "(unknown)"
	var rev, modified string
	if bi, ok := debug.ReadBuildInfo(); ok {
		v = bi.Main.Version
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				if s.Value == "true" {
					modified = "+dirty"
				}
			}
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if rev != "" {
		v += " " + rev + modified
	}
	return fmt.Sprintf("dlock %s %s %s/%s", v, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// newFlagSet returns a flag set that reports errors to the caller instead of
// printing them, so that every message is in dlock's voice.
// flagSet reports whether the flag name was given on the command line.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// parseFlags parses args; on -h it prints the subcommand's help. It returns
// the exit status to end with, or -1 to go on.
func (c *cli) parseFlags(fs *flag.FlagSet, args []string) int {
	err := fs.Parse(args)
	switch {
	case err == nil:
		return -1
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(c.stdout, subUsage[fs.Name()])
		return exitOK
	default:
		return c.usageError(fs.Name(), "%s", flagError(fs, err))
	}
}

// badValue matches the flag package's message for a value that did not parse.
var badValue = regexp.MustCompile(`^invalid (?:boolean )?value "(.*)" for flag -(\S+): `)

// flagError rewrites the flag package's messages in dlock's words, with the
// double-dash spelling the manual uses.
func flagError(fs *flag.FlagSet, err error) string {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		return "unknown flag --" + strings.TrimPrefix(name, "-")
	}
	if name, ok := strings.CutPrefix(msg, "flag needs an argument: -"); ok {
		return "flag --" + strings.TrimPrefix(name, "-") + " needs a value"
	}
	if m := badValue.FindStringSubmatch(msg); m != nil {
		if f := fs.Lookup(m[2]); f != nil {
			if _, isDuration := f.Value.(flag.Getter).Get().(time.Duration); isDuration {
				return fmt.Sprintf("--%s %q is not a duration: write, for example, 500ms, 30s, 5m or 1h30m", m[2], m[1])
			}
		}
		return fmt.Sprintf("--%s: invalid value %q", m[2], m[1])
	}
	return msg
}
