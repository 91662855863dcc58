// Package dlocktest starts and stops real redis-server processes on free
// loopback ports, for tests of code that uses dlock (and for dlock's own tests).
//
// Every server runs in the foreground as a child of the test process, without
// persistence, bound to 127.0.0.1. Servers started with [Start], [StartN] or
// [StartCluster] are stopped by the test's Cleanup; servers started with
// [NewServer] are stopped by their Close method. Faults are injected on the
// real process: Server.Freeze stops it with SIGSTOP (it keeps its sockets
// open but answers nothing, like a node in a long GC pause or behind a
// partition), Server.Thaw resumes it and Server.Kill ends it; a [Proxy]
// injects network faults. It runs on Unix systems.
//
// redis-server is looked up on PATH, or taken from $REDIS_SERVER. On Debian
// and Ubuntu it is in the redis-server package.
package dlocktest

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/internal/redisserver"
)

// The servers are started by an internal package that the dlock CLI shares
// (its demo), so that the CLI does not link the testing package.
type (
	// Server is one redis-server process listening on 127.0.0.1. Its
	// methods:
	//
	//	Addr() string       "127.0.0.1:PORT"
	//	URL() string        "redis://127.0.0.1:PORT"
	//	Port() int
	//	TLSAddr() string    the TLS port's address (WithTLS), else ""
	//	PID() int           the running process's id, 0 if it is not running
	//	Client() *redis.Client  a new go-redis client with default settings; the caller closes it
	//	Freeze() error      SIGSTOP: sockets stay open, connections still succeed, nothing is answered until Thaw
	//	Thaw() error        SIGCONT
	//	Kill() error        SIGKILL, and waits for the exit; its data is lost; nothing on a stopped server
	//	Restart() error     starts a killed server again on the same port, without data; fails if it is running
	//	Close() error       stops the server (thawing it first) and waits for its exit
	Server = redisserver.Server
	// Option configures a server started by NewServer, Start or StartN.
	Option = redisserver.Option
	// Cluster is a Redis Cluster. Its fields:
	//
	//	Servers []*Server   the masters, as started (after a failover, ask the nodes which is master)
	//	Replicas []*Server  the replicas, Replicas[i] of Servers[i%len(Servers)]
	//
	// and its methods: Addrs() []string (the masters' addresses), Client()
	// *redis.ClusterClient (a new cluster client with default settings; the
	// caller closes it), Close() error (stops every server and removes the
	// cluster's state).
	Cluster = redisserver.Cluster
	// TLSFiles are the PEM files of a certificate authority made for a
	// test, of a server certificate it signed for 127.0.0.1 and localhost,
	// and of a client certificate it signed, for mutual TLS. Its fields
	// are the files' paths: CA, ServerCert, ServerKey, ClientCert,
	// ClientKey. ClientConfig(withCert bool) (*tls.Config, error) returns a
	// TLS configuration that trusts the CA and, with withCert, presents the
	// client certificate.
	TLSFiles = redisserver.TLSFiles
	// Counter counts the commands that clients send to Redis (round trips;
	// a pipeline counts each of its commands), not the commands that
	// scripts run inside Redis. Add it to a go-redis client with AddHook.
	// The zero value is ready to use, and a nil *Counter counts nothing.
	// Load() int64 returns the count, Add(n int) adds to it.
	Counter = redisserver.Counter
)

// ErrNoRedisServer is returned when no redis-server binary can be found.
var ErrNoRedisServer = redisserver.ErrNoRedisServer

// WithArgs passes extra command-line arguments to redis-server, for example
// WithArgs("--maxmemory", "10mb").
func WithArgs(args ...string) Option { return redisserver.WithArgs(args...) }

// WithEnv adds environment variables ("NAME=value") to the server's, which
// is otherwise the test process's: for example LD_PRELOAD and FAKETIME_*
// to run it under libfaketime, with a clock of the test's choosing (clock
// faults). A restarted server keeps them.
func WithEnv(kv ...string) Option { return redisserver.WithEnv(kv...) }

// WithTLS makes a server also listen for TLS, on a port of its own
// (Server.TLSAddr), with the server certificate of files; with mutual,
// clients must present a certificate signed by its CA.
func WithTLS(files *TLSFiles, mutual bool) Option { return redisserver.WithTLS(files, mutual) }

// NewTLSFiles makes a CA and the two certificates in dir (valid for a day).
func NewTLSFiles(dir string) (*TLSFiles, error) { return redisserver.NewTLSFiles(dir) }

// Binary returns the path of the redis-server binary that servers are started
// from, or ErrNoRedisServer.
func Binary() (string, error) { return redisserver.Binary() }

// NewServer starts a redis-server on a free loopback port and waits until it
// answers PING. The caller must call Close.
func NewServer(opts ...Option) (*Server, error) { return redisserver.NewServer(opts...) }

// NewSentinel starts a redis-sentinel (redis-server --sentinel) watching
// master under the name masterName (quorum 1, failure detected after 1s). A
// go-redis FailoverClient with SentinelAddrs {s.Addr()} reaches the master
// through it. The caller must call Close.
func NewSentinel(masterName string, master *Server) (*Server, error) {
	return redisserver.NewSentinel(masterName, master)
}

// NewCluster starts a Redis Cluster of n masters (n ≥ 1) on loopback, assigns
// the 16384 slots evenly and waits until every node reports cluster_state:ok.
// The caller must call Close.
func NewCluster(n int) (*Cluster, error) { return redisserver.NewCluster(n) }

// NewClusterWithReplicas starts a Redis Cluster of n masters, each with
// replicas replicas, so that a replica takes over a failed master within a
// few seconds. It waits until every node reports cluster_state:ok and every
// replica's link to its master is up. The caller must call Close.
func NewClusterWithReplicas(n, replicas int) (*Cluster, error) {
	return redisserver.NewClusterWithReplicas(n, replicas)
}

// NewClusterWith is NewClusterWithReplicas with options for every server of
// the cluster: WithArgs (a setting, or a command renamed away, as a
// managed service lacks it: "--rename-command", "SPUBLISH", ""), WithEnv.
// The caller must call Close.
func NewClusterWith(n, replicas int, opts ...Option) (*Cluster, error) {
	return redisserver.NewClusterWith(n, replicas, opts...)
}

// StartClusterWith starts a Redis Cluster of n masters with replicas
// replicas each, every server with opts (see NewClusterWith), for the
// test, stopped in the test's Cleanup.
func StartClusterWith(tb testing.TB, n, replicas int, opts ...Option) *Cluster {
	tb.Helper()
	c, err := NewClusterWith(n, replicas, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// Start starts a redis-server for the test and stops it in the test's Cleanup.
// It fails the test if no server can be started.
func Start(tb testing.TB, opts ...Option) *Server {
	tb.Helper()
	s, err := NewServer(opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	return s
}

// StartN starts n independent redis-servers (for example the masters of a
// Redlock) for the test, stopped in the test's Cleanup.
func StartN(tb testing.TB, n int, opts ...Option) []*Server {
	tb.Helper()
	servers := make([]*Server, n)
	for i := range servers {
		servers[i] = Start(tb, opts...)
	}
	return servers
}

// StartSentinel starts a sentinel watching master (see NewSentinel) for the
// test, stopped in the test's Cleanup.
func StartSentinel(tb testing.TB, masterName string, master *Server) *Server {
	tb.Helper()
	s, err := NewSentinel(masterName, master)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	return s
}

// Clients returns one new default go-redis client per server, each closed in
// the test's Cleanup, as the []redis.UniversalClient that dlock.NewRedlock takes.
func Clients(tb testing.TB, servers ...*Server) []redis.UniversalClient {
	tb.Helper()
	clients := make([]redis.UniversalClient, len(servers))
	for i, s := range servers {
		c := s.Client()
		tb.Cleanup(func() { _ = c.Close() })
		clients[i] = c
	}
	return clients
}

// StartClusterWithReplicas starts a Redis Cluster of n masters with
// replicas replicas each for the test, stopped in the test's Cleanup.
func StartClusterWithReplicas(tb testing.TB, n, replicas int) *Cluster {
	tb.Helper()
	c, err := NewClusterWithReplicas(n, replicas)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// StartCluster starts a Redis Cluster of n masters for the test, stopped in the
// test's Cleanup.
func StartCluster(tb testing.TB, n int) *Cluster {
	tb.Helper()
	c, err := NewCluster(n)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = c.Close() })
	return c
}
