package dlocktest

import (
	"flag"
	"fmt"
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/dlock-dev/dlock/internal/redisserver"
)

// Servers at fixed addresses ("127.0.0.1:6379") are for code that names
// its Redis literally, as an Example a user copies does. Such an address
// is one for the whole machine: test processes that want it take turns,
// through a lock file per address (flock(2), released by the kernel if the
// process dies), and within one process the tests that want it share its
// one server.

// fixedServer is a server at a fixed address, and who uses it in this
// process.
type fixedServer struct {
	server *Server
	lock   *os.File // holds the address's lock file while the server runs
	refs   int
}

var fixed struct {
	mu      sync.Mutex
	servers map[string]*fixedServer
}

// StartAt returns a redis-server listening at addr, a loopback address
// with its port ("127.0.0.1:6379"), for tests of code that names its
// Redis literally; it is stopped in the test's Cleanup. Another test
// process that wants addr (through StartAt or [MainAt]) waits until this
// one is done with it; within one process, the tests and Examples that
// want addr at the same time share one server. It fails the test if addr
// is in use by another program (a Redis of your own, say).
func StartAt(tb testing.TB, addr string) *Server {
	tb.Helper()
	s, err := acquireAt(addr)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { releaseAt(addr) })
	return s
}

// acquireAt returns this process's server at addr, started (after the
// address's lock file) if it has none; releaseAt gives it back.
func acquireAt(addr string) (*Server, error) {
	fixed.mu.Lock()
	defer fixed.mu.Unlock()
	if f := fixed.servers[addr]; f != nil {
		f.refs++
		return f.server, nil
	}
	lock, err := lockAddr(addr)
	if err != nil {
		return nil, err
	}
	s, err := redisserver.NewServerAt(addr)
	if err != nil {
		lock.Close()
		return nil, fmt.Errorf("%w (by a program that is not a dlocktest server, a Redis of your own say: stop it)", err)
	}
	if fixed.servers == nil {
		fixed.servers = map[string]*fixedServer{}
	}
	fixed.servers[addr] = &fixedServer{server: s, lock: lock, refs: 1}
	return s, nil
}

func releaseAt(addr string) {
	fixed.mu.Lock()
	defer fixed.mu.Unlock()
	f := fixed.servers[addr]
	if f == nil {
		return
	}
	if f.refs--; f.refs > 0 {
		return
	}
	delete(fixed.servers, addr)
	_ = f.server.Close() // before the lock: the next process binds the port
	f.lock.Close()
}

// lockAddr takes the machine-wide lock of addr, waiting for another
// process that holds it.
func lockAddr(addr string) (*os.File, error) {
	name := strings.NewReplacer(":", "-", "[", "", "]", "").Replace(addr)
	path := filepath.Join(os.TempDir(), "dlocktest-"+name+".lock")
	// Read-only, so that a file another user made serves too.
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE, 0o666)
	if err != nil {
		return nil, fmt.Errorf("dlocktest: the lock file of %s: %w", addr, err)
	}
	if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
		fmt.Fprintf(os.Stderr, "dlocktest: waiting for %s, which another test process uses (%s)\n", addr, path)
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
			f.Close()
			return nil, fmt.Errorf("dlocktest: lock %s: %w", path, err)
		}
	}
	return f, nil
}

// MainAt is [Main] for Examples that name their Redis literally, as code
// that users copy from the documentation must: it runs the tests of m
// with a redis-server listening at each of addrs (loopback addresses with
// a port, "127.0.0.1:6379"), then checks that no goroutine was left
// running, and returns the exit code. Use it as TestMain:
//
//	func TestMain(m *testing.M) {
//		os.Exit(dlocktest.MainAt(m, "127.0.0.1:6379"))
//	}
//
// An address is one for the whole machine: the servers start only when
// the run includes an Example with an output comment (in the package's
// *_test.go files, as -run and -skip select them), and test processes
// that want one address take turns (see [StartAt]). It fails if an
// address is in use by another program (a Redis of your own, say: stop
// it, or run without the Examples, go test -skip Example).
func MainAt(m *testing.M, addrs ...string) int {
	if !flag.Parsed() {
		flag.Parse()
	}
	if examplesSelected() {
		sorted := append([]string(nil), addrs...)
		sort.Strings(sorted) // one order of the locks for every process
		for _, a := range sorted {
			if _, err := acquireAt(a); err != nil {
				fmt.Fprintf(os.Stderr, "%v, or run without the Examples, which connect there: go test -skip Example\n", err)
				for _, b := range sorted {
					releaseAt(b)
				}
				return 1
			}
		}
	}
	return runChecked(m, func() {
		for _, a := range addrs {
			releaseAt(a)
		}
	})
}

// examplesSelected reports whether the run may include an Example that
// has an output comment, as far as it can tell: yes when in doubt.
func examplesSelected() bool {
	if f := flag.Lookup("test.list"); f != nil && f.Value.String() != "" {
		return false
	}
	names, err := examplesWithOutput(".")
	if err != nil {
		return true
	}
	run, skip := flagValue("test.run"), flagValue("test.skip")
	for _, n := range names {
		if selects(run, n, true) && !selects(skip, n, false) {
			return true
		}
	}
	return false
}

func flagValue(name string) string {
	if f := flag.Lookup(name); f != nil {
		return f.Value.String()
	}
	return ""
}

// selects reports whether pattern (a -run or -skip value) matches the
// Example name; whether it does when it cannot tell (a pattern with
// subtests' slashes, or that does not compile) is doubt, and an empty
// pattern is a -run that matches all or a -skip that matches none.
func selects(pattern, name string, doubt bool) bool {
	if pattern == "" {
		return doubt
	}
	if strings.Contains(pattern, "/") {
		return doubt
	}
	re, err := regexp.Compile(pattern)
	if err != nil {
		return doubt
	}
	return re.MatchString(name)
}

// examplesWithOutput returns the names of the Examples in dir's *_test.go
// files that go test runs (those with an output comment).
func examplesWithOutput(dir string) ([]string, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, p := range paths {
		f, err := parser.ParseFile(fset, p, nil, parser.ParseComments)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	var names []string
	for _, ex := range doc.Examples(files...) {
		if ex.Output != "" || ex.EmptyOutput {
			names = append(names, "Example"+ex.Name)
		}
	}
	return names, nil
}
