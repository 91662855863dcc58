// Package redisserver starts and stops real redis-server processes on free
// loopback ports: the machinery of package dlocktest (which adds the
// helpers that take a *testing.T) and of `dlock demo`, which must not link
// the testing package.
package redisserver

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrNoRedisServer is returned when no redis-server binary can be found.
var ErrNoRedisServer = errors.New("dlocktest: redis-server not found on PATH (install Debian's redis-server package, or set $REDIS_SERVER)")

// startTimeout bounds how long a server may take to accept connections.
const startTimeout = 10 * time.Second

// Server is one redis-server process listening on 127.0.0.1.
type Server struct {
	addr    string
	port    int
	tlsAddr string // "" without WithTLS
	args    []string
	env     []string // added to the test process's environment (WithEnv)
	dir     string   // removed by Close, if set

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	frozen bool
	closed bool
}

// Option configures a server started by [NewServer], [Start] or [StartN].
type Option func(*config)

type config struct {
	extra  []string
	env    []string
	tls    *TLSFiles
	mutual bool
}

// WithArgs passes extra command-line arguments to redis-server, for example
// WithArgs("--maxmemory", "10mb").
func WithArgs(args ...string) Option {
	return func(c *config) { c.extra = append(c.extra, args...) }
}

// WithEnv adds environment variables ("NAME=value") to the server's, which
// is otherwise the test process's: for example LD_PRELOAD and FAKETIME_*
// to run it under libfaketime, with a clock of the test's choosing. A
// restarted server keeps them.
func WithEnv(kv ...string) Option {
	return func(c *config) { c.env = append(c.env, kv...) }
}

// Binary returns the path of the redis-server binary that servers are started
// from, or ErrNoRedisServer.
func Binary() (string, error) {
	if p := os.Getenv("REDIS_SERVER"); p != "" {
		return p, nil
	}
	p, err := exec.LookPath("redis-server")
	if err != nil {
		return "", ErrNoRedisServer
	}
	return p, nil
}

// NewServer starts a redis-server on a free loopback port and waits until it
// answers PING. The caller must call Close.
func NewServer(opts ...Option) (*Server, error) {
	c, bin, err := prepare(opts)
	if err != nil {
		return nil, err
	}
	// A directory of its own (removed by Close), unless the options give
	// one: a replica writes the RDB of its sync there, which would
	// otherwise land in the caller's working directory, shared by every
	// server it starts.
	dir := ""
	if !slices.Contains(c.extra, "--dir") {
		if dir, err = os.MkdirTemp("", "dlocktest-server-"); err != nil {
			return nil, err
		}
		c.extra = append(slices.Clone(c.extra), "--dir", dir)
	}
	var tlsPort int
	s, err := startOnFreePort(bin, dir, c.env, func(port int) ([]string, error) {
		var args []string
		args, tlsPort, err = c.args("127.0.0.1", port)
		return args, err
	})
	if err != nil && dir != "" {
		_ = os.RemoveAll(dir)
	}
	if err == nil && c.tls != nil {
		s.tlsAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(tlsPort))
	}
	return s, err
}

// NewServerAt starts a redis-server listening at addr, a loopback address
// with its port ("127.0.0.1:6379"), and waits until it answers PING. It
// fails if something else listens there. The caller must call Close.
func NewServerAt(addr string, opts ...Option) (*Server, error) {
	c, bin, err := prepare(opts)
	if err != nil {
		return nil, err
	}
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("dlocktest: server address %q: %w", addr, err)
	}
	port, err := strconv.Atoi(p)
	if err != nil || port <= 0 {
		return nil, fmt.Errorf("dlocktest: server address %q: no port", addr)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return nil, fmt.Errorf("dlocktest: server address %q: not a loopback IP address", addr)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("dlocktest: %s is in use: %w", addr, err)
	}
	l.Close()
	s := &Server{port: port, addr: net.JoinHostPort(host, p), env: c.env}
	var tlsPort int
	if s.args, tlsPort, err = c.args(host, port); err != nil {
		return nil, err
	}
	if err := s.start(bin); err != nil {
		return nil, err
	}
	if c.tls != nil {
		s.tlsAddr = net.JoinHostPort(host, strconv.Itoa(tlsPort))
	}
	// Another server that took the port between the probe and the start
	// answers PING too, while this one exits: ask the one that answers.
	if err := s.isAnswering(); err != nil {
		_ = s.Close()
		return nil, err
	}
	return s, nil
}

// isAnswering checks that the server answering at s's address is s's
// process.
func (s *Server) isAnswering() error {
	c := s.Client()
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return fmt.Errorf("dlocktest: redis-server at %s: %w", s.addr, err)
	}
	if pid := strconv.Itoa(s.PID()); !strings.Contains(info, "\nprocess_id:"+pid+"\r") {
		return fmt.Errorf("dlocktest: %s is served by another process than the redis-server started there", s.addr)
	}
	return nil
}

// prepare returns the configuration that opts give and the binary to run.
func prepare(opts []Option) (config, string, error) {
	var c config
	for _, o := range opts {
		o(&c)
	}
	bin, err := Binary()
	return c, bin, err
}

// args returns the arguments of a server on host:port, and its TLS port
// (a free one, with WithTLS).
func (c config) args(host string, port int) ([]string, int, error) {
	var extra []string
	tlsPort := 0
	if c.tls != nil {
		var err error
		if tlsPort, err = freePort(); err != nil {
			return nil, 0, err
		}
		extra = tlsArgs(c.tls, c.mutual, tlsPort)
	}
	return append(append([]string{
		"--port", strconv.Itoa(port),
		"--bind", host,
		"--save", "",
		"--appendonly", "no",
		"--daemonize", "no",
		"--protected-mode", "no",
		"--loglevel", "warning",
		"--logfile", "",
	}, extra...), c.extra...), tlsPort, nil
}

// startOnFreePort starts bin with the arguments args gives for a free port.
// A free port can be taken by someone else between the probe and the
// server's bind, so it tries again with another port a few times.
func startOnFreePort(bin, dir string, env []string, args func(port int) ([]string, error)) (*Server, error) {
	var lastErr error
	for i := 0; i < 5; i++ {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		s := &Server{port: port, addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), dir: dir, env: env}
		if s.args, err = args(port); err != nil {
			return nil, err
		}
		if err := s.start(bin); err != nil {
			lastErr = err
			continue
		}
		return s, nil
	}
	return nil, lastErr
}

// NewSentinel starts a Redis Sentinel on a free loopback port that monitors
// master under the name masterName (quorum 1, failure detected after 1s). A
// go-redis FailoverClient with SentinelAddrs {s.Addr()} reaches the master
// through it. The caller must call Close.
func NewSentinel(masterName string, master *Server) (*Server, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "dlocktest-sentinel-")
	if err != nil {
		return nil, err
	}
	s, err := startOnFreePort(bin, dir, nil, func(port int) ([]string, error) {
		conf := filepath.Join(dir, "sentinel.conf")
		text := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\n"+
			"sentinel monitor %s 127.0.0.1 %d 1\n"+
			"sentinel down-after-milliseconds %s 1000\n"+
			"sentinel failover-timeout %s 5000\n",
			port, dir, masterName, master.Port(), masterName, masterName)
		if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
			return nil, err
		}
		// The configuration file must come first; Sentinel rewrites it.
		return []string{conf, "--sentinel", "--daemonize", "no", "--loglevel", "warning", "--logfile", ""}, nil
	})
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

func (s *Server) start(bin string) error {
	cmd := exec.Command(bin, s.args...)
	if len(s.env) > 0 {
		cmd.Env = append(os.Environ(), s.env...)
	}
	cmd.Stdout = nil
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	// Own process group, so that a Ctrl-C aimed at the test does not reach the
	// servers before the test has cleaned them up.
	cmd.SysProcAttr = procAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("dlocktest: start %s: %w", bin, err)
	}
	exited := make(chan struct{})
	var logMu sync.Mutex
	var logTail []string
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			logMu.Lock()
			logTail = append(logTail, sc.Text())
			if len(logTail) > 20 {
				logTail = logTail[1:]
			}
			logMu.Unlock()
		}
		_ = cmd.Wait()
		close(exited)
	}()
	s.mu.Lock()
	s.cmd, s.exited, s.frozen, s.closed = cmd, exited, false, false
	s.mu.Unlock()

	deadline := time.Now().Add(startTimeout)
	for {
		select {
		case <-exited:
			logMu.Lock()
			defer logMu.Unlock()
			return fmt.Errorf("dlocktest: redis-server on port %d exited: %s", s.port, strings.Join(logTail, "; "))
		default:
		}
		if err := ping(s.addr); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-exited
			return fmt.Errorf("dlocktest: redis-server on port %d did not answer within %s", s.port, startTimeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	// A server that requires a password answers NOAUTH: it is up too.
	if !strings.HasPrefix(line, "+PONG") && !strings.HasPrefix(line, "-NOAUTH") {
		return fmt.Errorf("unexpected reply %q", line)
	}
	return nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("dlocktest: find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Addr returns the server's address, "127.0.0.1:PORT".
func (s *Server) Addr() string { return s.addr }

// URL returns the server's address as a redis:// URL.
func (s *Server) URL() string { return "redis://" + s.addr }

// Port returns the server's TCP port.
func (s *Server) Port() int { return s.port }

// PID returns the process ID of the running server, or 0 if it is not running.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.closed {
		return 0
	}
	return s.cmd.Process.Pid
}

// Client returns a new go-redis client for the server with go-redis' default
// settings. The caller closes it.
func (s *Server) Client() *redis.Client {
	return redis.NewClient(&redis.Options{Addr: s.addr})
}

// Freeze stops the server with SIGSTOP: its sockets stay open and connections
// still succeed, but it answers nothing until Thaw.
func (s *Server) Freeze() error { return s.signal(syscall.SIGSTOP, true) }

// Thaw resumes a frozen server with SIGCONT.
func (s *Server) Thaw() error { return s.signal(syscall.SIGCONT, false) }

func (s *Server) signal(sig syscall.Signal, frozen bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.closed {
		return fmt.Errorf("dlocktest: server %s is not running", s.addr)
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("dlocktest: signal server %s: %w", s.addr, err)
	}
	s.frozen = frozen
	return nil
}

// Kill ends the server with SIGKILL and waits for it to exit. Its data is
// lost. Kill on a stopped server does nothing.
func (s *Server) Kill() error {
	s.mu.Lock()
	cmd, exited, closed := s.cmd, s.exited, s.closed
	s.closed = true
	s.frozen = false
	s.mu.Unlock()
	if cmd == nil || closed {
		return nil
	}
	_ = cmd.Process.Kill()
	<-exited
	return nil
}

// Restart starts a killed server again on the same port, without its data
// (the servers keep none). It fails if the server is still running.
func (s *Server) Restart() error {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if !closed {
		return fmt.Errorf("dlocktest: server %s is still running", s.addr)
	}
	bin, err := Binary()
	if err != nil {
		return err
	}
	return s.start(bin)
}

// Close stops the server (thawing it first if it is frozen) and waits for it
// to exit.
func (s *Server) Close() error {
	s.mu.Lock()
	frozen := s.frozen
	s.mu.Unlock()
	if frozen {
		_ = s.Thaw()
	}
	err := s.Kill()
	if s.dir != "" {
		_ = os.RemoveAll(s.dir)
	}
	return err
}

// Cluster is a Redis Cluster: masters, each with a range of slots, and
// their replicas, if any.
type Cluster struct {
	// Servers are the masters, as started (after a failover, a replica may
	// be a master and a master a replica: ask the nodes).
	Servers []*Server
	// Replicas are the replicas, Replicas[i] of Servers[i%len(Servers)].
	Replicas []*Server
	dirs     []string
}

// Addrs returns the masters' addresses.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.Servers))
	for i, s := range c.Servers {
		addrs[i] = s.Addr()
	}
	return addrs
}

// Client returns a new go-redis cluster client with default settings. The
// caller closes it.
func (c *Cluster) Client() *redis.ClusterClient {
	return redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
}

// Close stops every server of the cluster and removes their cluster state.
func (c *Cluster) Close() error {
	var errs []error
	for _, s := range append(append([]*Server(nil), c.Servers...), c.Replicas...) {
		errs = append(errs, s.Close())
	}
	for _, d := range c.dirs {
		errs = append(errs, os.RemoveAll(d))
	}
	return errors.Join(errs...)
}

// NewCluster starts a Redis Cluster of n masters (n ≥ 1) on loopback, assigns
// the 16384 slots evenly and waits until every node reports cluster_state:ok.
// The caller must call Close.
func NewCluster(n int) (*Cluster, error) {
	return NewClusterWithReplicas(n, 0)
}

// NewClusterWithReplicas starts a Redis Cluster of n masters, each with
// replicas replicas, on loopback, with a node timeout of 1s, so that a
// replica takes over a failed master within a few seconds. It waits until
// every node reports cluster_state:ok and every replica's link to its
// master is up. The caller must call Close.
func NewClusterWithReplicas(n, replicas int) (*Cluster, error) {
	return NewClusterWith(n, replicas)
}

// NewClusterWith is NewClusterWithReplicas with options for every server of
// the cluster (WithArgs: a renamed command, a setting).
func NewClusterWith(n, replicas int, opts ...Option) (*Cluster, error) {
	if n < 1 || replicas < 0 {
		return nil, fmt.Errorf("dlocktest: a cluster needs at least one master, got %d (and %d replicas each)", n, replicas)
	}
	c := &Cluster{}
	// A replica takes over within a few node timeouts; without replicas a
	// long timeout keeps the cluster bus links up on a loaded machine
	// (Redis drops a link that stalls for half of it, and with it the
	// pub/sub messages it was to carry).
	timeout := "5000"
	if replicas > 0 {
		timeout = "1000"
	}
	for i := 0; i < n*(1+replicas); i++ {
		dir, err := os.MkdirTemp("", "dlocktest-cluster-")
		if err != nil {
			_ = c.Close()
			return nil, err
		}
		c.dirs = append(c.dirs, dir)
		s, err := NewServer(append([]Option{WithArgs("--cluster-enabled", "yes", "--dir", dir,
			"--cluster-config-file", "nodes.conf", "--cluster-node-timeout", timeout)}, opts...)...)
		if err != nil {
			_ = c.Close()
			return nil, err
		}
		if i < n {
			c.Servers = append(c.Servers, s)
		} else {
			c.Replicas = append(c.Replicas, s)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.setup(ctx); err != nil {
		_ = c.Close()
		return nil, err
	}
	return c, nil
}

func (c *Cluster) setup(ctx context.Context) error {
	const slots = 16384
	n := len(c.Servers)
	all := append(append([]*Server(nil), c.Servers...), c.Replicas...)
	clients := make([]*redis.Client, len(all))
	for i, s := range all {
		clients[i] = s.Client()
		defer clients[i].Close()
	}
	for i, cl := range clients {
		if i < n {
			lo, hi := i*slots/n, (i+1)*slots/n-1
			if err := cl.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", lo, hi).Err(); err != nil {
				return fmt.Errorf("dlocktest: cluster addslots on %s: %w", all[i].Addr(), err)
			}
		}
		if i > 0 {
			if err := cl.Do(ctx, "CLUSTER", "MEET", "127.0.0.1", c.Servers[0].Port()).Err(); err != nil {
				return fmt.Errorf("dlocktest: cluster meet: %w", err)
			}
		}
	}
	ids := make([]string, n)
	for i := range ids {
		id, err := clients[i].Do(ctx, "CLUSTER", "MYID").Text()
		if err != nil {
			return fmt.Errorf("dlocktest: cluster myid: %w", err)
		}
		ids[i] = id
	}
	wait := func(what string, ready func() (bool, error)) error {
		return pollUntil(ctx, "dlocktest: cluster: "+what, ready)
	}
	// Every node knows every other before a replica can follow its master.
	if err := wait("nodes did not meet", func() (bool, error) {
		for _, cl := range clients {
			info, err := cl.ClusterInfo(ctx).Result()
			if err != nil {
				return false, fmt.Errorf("dlocktest: cluster info: %w", err)
			}
			if !strings.Contains(info, fmt.Sprintf("cluster_known_nodes:%d", len(all))) {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		return err
	}
	for i, cl := range clients[n:] {
		if err := cl.Do(ctx, "CLUSTER", "REPLICATE", ids[i%n]).Err(); err != nil {
			return fmt.Errorf("dlocktest: cluster replicate: %w", err)
		}
	}
	return wait("did not become ready", func() (bool, error) {
		for i, cl := range clients {
			info, err := cl.ClusterInfo(ctx).Result()
			if err != nil {
				return false, fmt.Errorf("dlocktest: cluster info: %w", err)
			}
			if !strings.Contains(info, "cluster_state:ok") {
				return false, nil
			}
			if i >= n {
				repl, err := cl.Info(ctx, "replication").Result()
				if err != nil {
					return false, err
				}
				if !strings.Contains(repl, "master_link_status:up") {
					return false, nil
				}
			}
		}
		return true, nil
	})
}

// pollUntil calls ready every 50ms until it reports true or fails, or ctx
// ends (an error that says what did not happen).
func pollUntil(ctx context.Context, what string, ready func() (bool, error)) error {
	for {
		ok, err := ready()
		if err != nil || ok {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w", what, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// WithTLS makes a server also listen for TLS, on a port of its own
// ([Server.TLSAddr]), with the server certificate of files; with mutual,
// clients must present a certificate signed by its CA.
func WithTLS(files *TLSFiles, mutual bool) Option {
	return func(c *config) {
		c.tls = files
		c.mutual = mutual
	}
}
