package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock"
)

// Exit statuses, from sysexits.h where one fits.
const (
	exitOK          = 0
	exitFailure     = 1
	exitNotHeld     = 3  // dlock status --held: the lock is free (LSB's "not running")
	exitUsage       = 64 // EX_USAGE: bad flags, URLs or arguments
	exitUnavailable = 69 // EX_UNAVAILABLE: no Redis node could be reached
	exitNotAcquired = 75 // EX_TEMPFAIL: the lock is held elsewhere; try later
	exitLockLost    = 76 // the lock was lost while the command ran
	exitConfig      = 78 // EX_CONFIG: Redis refused the commands (auth, ACL, wrong type, topology)
	exitCannotExec  = 126
	exitNotFound    = 127
)

// defaultRedis is the Redis used when neither --redis nor $DLOCK_REDIS says.
const defaultRedis = "redis://127.0.0.1:6379"

func init() {
	// go-redis logs reconnections and the like on its own; dlock reports
	// what matters in its own voice. Set before any client exists.
	redis.SetLogger(silentLogger{})
}

type silentLogger struct{}

func (silentLogger) Printf(context.Context, string, ...any) {}

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
	case "release":
		return c.release(ctx, rest)
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
		return c.usageError("", "unknown command %q (commands: run, status, release, demo, help, version)", cmd)
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
		return c.usageError("", "no help for %q (commands: run, status, release, demo, help, version)", args[0])
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

// redisFlags are the flags shared by run, status and release.
type redisFlags struct {
	urls   urlList
	prefix string
	// Topology: the URLs are seeds of one Cluster, or Sentinels that
	// monitor the master named sentinel; otherwise one URL is one server
	// and several are a Redlock over independent masters.
	cluster          bool
	sentinel         string
	sentinelPassword string
	// TLS, for rediss:// URLs.
	tlsCA, tlsCert, tlsKey string
	tlsInsecure            bool
}

func (r *redisFlags) register(fs *flag.FlagSet, c *cli) {
	fs.Var(&r.urls, "redis", "Redis URL(s)")
	fs.StringVar(&r.prefix, "prefix", dlock.DefaultPrefix, "key prefix")
	fs.BoolVar(&r.cluster, "cluster", false, "the URLs are seeds of a Redis Cluster")
	fs.StringVar(&r.sentinel, "sentinel", "", "the URLs are Sentinels of the master of this name")
	fs.StringVar(&r.sentinelPassword, "sentinel-password", os.Getenv("DLOCK_SENTINEL_PASSWORD"), "the Sentinels' password")
	fs.StringVar(&r.tlsCA, "tls-ca", "", "PEM file of the CA that signed the servers' certificates")
	fs.StringVar(&r.tlsCert, "tls-cert", "", "PEM file of the client certificate (mutual TLS)")
	fs.StringVar(&r.tlsKey, "tls-key", "", "PEM file of the client certificate's key")
	fs.BoolVar(&r.tlsInsecure, "tls-insecure-skip-verify", false, "do not verify the servers' certificates (insecure)")
	fs.BoolVar(&c.quiet, "quiet", false, "print only errors")
	fs.BoolVar(&c.quiet, "q", false, "print only errors")
	fs.BoolVar(&c.verbose, "verbose", false, "say what dlock does")
	fs.BoolVar(&c.verbose, "v", false, "say what dlock does")
}

// urlList is the value of --redis: repeatable, each a comma-separated list.
type urlList []string

func (u *urlList) String() string { return strings.Join(*u, ",") }

func (u *urlList) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*u = append(*u, s)
		}
	}
	return nil
}

// target is the Redis deployment a command talks to.
type target struct {
	locker  *dlock.Locker
	clients []redis.UniversalClient
	names   []string // the URLs, passwords redacted
	kind    string   // "" (one server or a Redlock), "cluster" or "sentinel"
	// tlsWithoutCert: TLS URLs, and no client certificate; plainText: a
	// redis:// URL (no TLS).
	tlsWithoutCert, plainText bool
	// inspection is closed once inspect, started by open, has set wrong
	// (a mistake in the URLs, nil if none) and its hint.
	inspection chan struct{}
	wrong      error
	hint       string
}

func (t *target) Close() {
	if t.inspection != nil {
		<-t.inspection // bounded by its timeout
	}
	_ = t.locker.Close()
	t.closeClients()
}

// describe names the deployment in messages.
func (t *target) describe() string {
	switch {
	case t.kind == "cluster":
		return "the Redis Cluster at " + strings.Join(t.names, ",")
	case t.kind != "":
		return fmt.Sprintf("the master %q of the Sentinels at %s", t.kind, strings.Join(t.names, ","))
	case len(t.names) == 1:
		return t.names[0]
	}
	return fmt.Sprintf("a Redlock quorum of %d of %d nodes", len(t.names)/2+1, len(t.names))
}

// nodes is how many independent deployments the lock is on.
func (t *target) nodes() int { return len(t.clients) }

// open parses the Redis URLs (--redis, else $DLOCK_REDIS, else the default)
// and returns a Locker on them: one URL is a lock on that Redis, several a
// Redlock over them; with --cluster the URLs are seeds of one Cluster, with
// --sentinel the Sentinels of one master. Errors are usage errors, with
// passwords redacted.
func (r *redisFlags) open() (*target, error) {
	urls := []string(r.urls)
	if len(urls) == 0 {
		var env urlList
		_ = env.Set(os.Getenv("DLOCK_REDIS"))
		urls = env
	}
	if len(urls) == 0 {
		urls = []string{defaultRedis}
	}
	if r.cluster && r.sentinel != "" {
		return nil, errors.New("--cluster and --sentinel exclude each other")
	}
	tlsCfg, err := r.tlsConfig()
	if err != nil {
		return nil, err
	}
	t := &target{}
	var opts []*redis.Options
	seen := make(map[string]string)
	for _, raw := range urls {
		opt, name, err := parseURL(raw)
		if err != nil {
			return nil, err
		}
		if opt.TLSConfig != nil && (tlsCfg == nil || len(tlsCfg.Certificates) == 0) {
			t.tlsWithoutCert = true
		}
		if opt.TLSConfig == nil {
			t.plainText = true
		}
		if opt.TLSConfig != nil && tlsCfg != nil {
			// No ServerName: each dial checks the host it dials (also an
			// IPv6 address, a Cluster node, a master found by Sentinel).
			opt.TLSConfig = tlsCfg.Clone()
		} else if tlsCfg != nil {
			return nil, fmt.Errorf("Redis URL %s: the --tls-* flags need a rediss:// URL", name)
		}
		id := fmt.Sprintf("%s/%d", opt.Addr, opt.DB)
		if prev, dup := seen[id]; dup {
			return nil, fmt.Errorf("Redis URLs %s and %s name the same database; a Redlock needs independent servers", prev, name)
		}
		seen[id] = name
		// dlock bounds every call itself; the client's identity handshake
		// is one more command per connection for nothing.
		opt.DisableIdentity = true
		opts = append(opts, opt)
		t.names = append(t.names, name)
	}
	lockerOpts := []dlock.Option{dlock.WithPrefix(r.prefix)}
	switch {
	case r.cluster:
		t.kind = "cluster"
		o := opts[0]
		if o.DB != 0 {
			return nil, fmt.Errorf("Redis URL %s: a Cluster has no database %d", t.names[0], o.DB)
		}
		co := &redis.ClusterOptions{Username: o.Username, Password: o.Password, TLSConfig: o.TLSConfig, DisableIndentity: true}
		for _, o := range opts {
			co.Addrs = append(co.Addrs, o.Addr)
		}
		t.clients = []redis.UniversalClient{redis.NewClusterClient(co)}
	case r.sentinel != "":
		t.kind = r.sentinel
		o := opts[0]
		fo := &redis.FailoverOptions{MasterName: r.sentinel, Username: o.Username, Password: o.Password, DB: o.DB,
			SentinelPassword: r.sentinelPassword, TLSConfig: o.TLSConfig, DisableIndentity: true}
		for _, o := range opts {
			fo.SentinelAddrs = append(fo.SentinelAddrs, o.Addr)
		}
		t.clients = []redis.UniversalClient{redis.NewFailoverClient(fo)}
	default:
		for _, o := range opts {
			t.clients = append(t.clients, redis.NewClient(o))
		}
	}
	if len(t.clients) == 1 {
		t.locker = dlock.New(t.clients[0], lockerOpts...)
		return t, nil
	}
	l, err := dlock.NewRedlock(t.clients, lockerOpts...)
	if err != nil {
		t.closeClients()
		return nil, err
	}
	t.locker = l
	return t, nil
}

// open opens the deployment the flags name, for the subcommand sub; on
// failure it reports and returns nil and the exit status: 64 for bad flags
// or URLs, 78 for URLs that reach the same server twice.
func (c *cli) open(ctx context.Context, sub string, rf *redisFlags) (*target, int) {
	t, err := rf.open()
	if err != nil {
		return nil, c.usageError(sub, "%s", err)
	}
	t.inspection = make(chan struct{})
	go func() {
		defer close(t.inspection)
		t.hint, t.wrong = t.inspect(ctx)
	}()
	return t, -1
}

// inspected waits for the inspection of the URLs that open started (see
// inspect), and reports a mistake it found as exit 78; else it returns -1.
func (c *cli) inspected(t *target) int {
	<-t.inspection
	if t.wrong == nil {
		return -1
	}
	c.errorf("%s", t.wrong)
	c.hintf("%s", t.hint)
	return exitConfig
}

// parseURL parses one Redis URL; errors name it with its password redacted.
func parseURL(raw string) (*redis.Options, string, error) {
	name := redactURL(raw)
	if !strings.Contains(raw, "://") {
		name = strings.TrimPrefix(redactURL("redis://"+raw), "redis://")
		return nil, name, fmt.Errorf("bad Redis URL %s: no scheme: write redis://%s (or rediss:// for TLS)", name, name)
	}
	opt, err := redis.ParseURL(raw)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // its message quotes the whole URL again
		}
		return nil, name, fmt.Errorf("bad Redis URL %s: %s (want redis://[USER:PASSWORD@]HOST[:PORT][/DB])", name, redactIn(err.Error(), raw))
	}
	if opt.Network == "tcp" && strings.HasPrefix(opt.Addr, ":") {
		return nil, name, fmt.Errorf("bad Redis URL %s: no host", name)
	}
	return opt, name, nil
}

// tlsConfig is the TLS configuration the --tls-* flags ask for, or nil.
func (r *redisFlags) tlsConfig() (*tls.Config, error) {
	if r.tlsCA == "" && r.tlsCert == "" && r.tlsKey == "" && !r.tlsInsecure {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: r.tlsInsecure}
	if r.tlsCA != "" {
		pemCA, err := os.ReadFile(r.tlsCA)
		if err != nil {
			return nil, fmt.Errorf("--tls-ca: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pemCA) {
			return nil, fmt.Errorf("--tls-ca %s: no PEM certificate in it", r.tlsCA)
		}
	}
	switch {
	case (r.tlsCert == "") != (r.tlsKey == ""):
		return nil, errors.New("--tls-cert and --tls-key go together")
	case r.tlsCert != "":
		cert, err := tls.LoadX509KeyPair(r.tlsCert, r.tlsKey)
		if err != nil {
			return nil, fmt.Errorf("--tls-cert/--tls-key: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// inspect refuses, before any lock command is sent, two mistakes that
// would otherwise show only for some keys or some of the time: a plain URL
// to a node of a Redis Cluster (it would answer for the keys of its own
// slots and MOVED for the others), and a Redlock whose URLs reach the same
// server under two names (127.0.0.1:P and localhost:P: its run id tells).
// It reads INFO once from each URL; a node that does not answer within the
// timeout, or refuses INFO, is not checked (the lock's commands report it).
// It returns a hint with the error.
func (t *target) inspect(ctx context.Context) (hint string, err error) {
	if t.kind != "" {
		return "", nil
	}
	ctx, cancel := context.WithTimeout(ctx, inspectTimeout)
	defer cancel()
	infos := make([]string, len(t.clients))
	var wg sync.WaitGroup
	for i, c := range t.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// INFO without a section: the default sections hold both
			// (several sections in one INFO need Redis 7). The client's
			// own read timeout (3s by default) would hold a connection
			// to a frozen server past the context's deadline.
			if cl, ok := c.(*redis.Client); ok {
				c = cl.WithTimeout(inspectTimeout)
			}
			infos[i], _ = c.Info(ctx).Result()
		}()
	}
	wg.Wait()
	ids := make([]string, len(infos))
	for i, info := range infos {
		if infoField(info, "cluster_enabled") == "1" {
			return "add --cluster: the URLs are then seed nodes of the Cluster, and every key goes to its master",
				fmt.Errorf("the server at %s is a node of a Redis Cluster, and a plain URL reaches only its own slots", t.names[i])
		}
		ids[i] = infoField(info, "run_id")
	}
	for i := range ids {
		for j := range i {
			if ids[i] != "" && ids[i] == ids[j] {
				return "give each independent master once",
					fmt.Errorf("Redis URLs %s and %s reach the same server (run id %s): a Redlock needs independent masters", t.names[j], t.names[i], ids[i])
			}
		}
	}
	return "", nil
}

// inspectTimeout bounds inspect: the node timeout of the default TTL.
const inspectTimeout = time.Second

// infoField is the value of field in INFO's text, or "".
func infoField(info, field string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}

func (t *target) closeClients() {
	for _, cl := range t.clients {
		_ = cl.Close()
	}
}

// userinfo matches the user-information part of a URL that may not parse.
var userinfo = regexp.MustCompile(`^([A-Za-z][A-Za-z0-9+.-]*://[^/@:]*:)([^/@]*)@`)

// redactURL returns raw with its password, if any, replaced by "xxxxx". The
// pattern goes first: a password that url.Parse does not see as one (with a
// '#' or '?' in it, it takes the rest for a fragment or a query) must not
// come through whole.
func redactURL(raw string) string {
	s := userinfo.ReplaceAllString(raw, "${1}xxxxx@")
	if u, err := url.Parse(s); err == nil {
		return u.Redacted()
	}
	return s
}

// redactIn removes the password of raw from msg, which may quote raw.
func redactIn(msg, raw string) string {
	msg = strings.ReplaceAll(msg, raw, redactURL(raw))
	if m := userinfo.FindStringSubmatch(raw); m != nil && len(m[2]) >= 3 {
		msg = strings.ReplaceAll(msg, m[2], "xxxxx")
		if un, err := url.PathUnescape(m[2]); err == nil && len(un) >= 3 {
			msg = strings.ReplaceAll(msg, un, "xxxxx")
		}
	}
	return msg
}

// redisFailure reports an error of the library that is about Redis, not
// about the lock, and returns its exit status: 78 (EX_CONFIG) when Redis
// refused the commands for good (ErrMisconfigured), 69 (EX_UNAVAILABLE) when
// too few nodes answered (ErrUnavailable). Both are printed, also with -q: a
// misconfigured fleet must not be silent. It returns -1 for other errors.
func (c *cli) redisFailure(t *target, err error) int {
	return c.reportRedisFailure(t, err, true)
}

// reportRedisFailure is redisFailure, with the hint that follows an
// unavailable Redis left out unless hint (dlock status --watch gives it
// once, not at every refresh).
func (c *cli) reportRedisFailure(t *target, err error, hint bool) int {
	switch {
	case errors.Is(err, dlock.ErrMisconfigured) && errors.Is(err, dlock.ErrInvalid):
		// A key held with another limit: not Redis' refusal, the fleet's.
		c.errorf("%s", strings.TrimPrefix(errText(err), "Redis refused the command (misconfigured): "))
		c.hintf("%s", configHint(err))
		return exitConfig
	case errors.Is(err, dlock.ErrMisconfigured):
		c.errorf("Redis at %s refused dlock's commands: %s", t.describe(), nodeErrorsText(err))
		c.hintf("%s", configHint(err))
		return exitConfig
	case errors.Is(err, dlock.ErrUnavailable):
		c.errorf("cannot reach Redis at %s: %s", t.describe(), nodeErrorsText(err))
		msg := err.Error()
		if !hint {
			return exitUnavailable
		}
		dropped := strings.Contains(msg, "reset by peer") || strings.Contains(msg, "EOF") || strings.Contains(msg, "broken pipe")
		switch {
		case dropped && t.tlsWithoutCert:
			// With TLS 1.3 a server that requires a client certificate
			// may close the connection before its alert is read.
			c.hintf("if the server requires a client certificate (tls-auth-clients yes), give it with --tls-cert FILE --tls-key FILE")
		case dropped && t.plainText:
			// A TLS port drops a plain-text client.
			c.hintf("if the server's port speaks TLS, write rediss:// instead of redis://")
		default:
			c.hintf("check --redis or $DLOCK_REDIS, and that the server is up and answering")
		}
		return exitUnavailable
	}
	return -1
}

// configHint says what to do about a permanent error of Redis.
func configHint(err error) string {
	msg := err.Error()
	has := func(subs ...string) bool {
		for _, s := range subs {
			if strings.Contains(msg, s) {
				return true
			}
		}
		return false
	}
	switch {
	case has("NOAUTH", "unauthenticated"):
		return "the server requires a password: give it in the URL, redis://:PASSWORD@HOST:PORT (or redis://USER:PASSWORD@HOST:PORT)"
	case has("WRONGPASS", "invalid password", "AUTH"):
		return "check the user name and password in the URL: redis://USER:PASSWORD@HOST:PORT"
	case has("NOPERM"):
		return "the Redis user may not run a command, or use a key or channel, that dlock needs: grant it the keys and channels under the prefix (--prefix, default dlock:)"
	case has("WRONGTYPE"):
		return "a Redis key of this lock holds a value of another type: choose another KEY, or another --prefix"
	case has("is held with limit"):
		return "every copy that runs under KEY must give the same --limit (without it, 1): KEY is a semaphore of that many permits"
	case has("MOVED", "CROSSSLOT", "ASK "):
		return "the server is a node of a Redis Cluster, which a plain URL reaches only for the keys of its own slots: add --cluster"
	case has("DB index"):
		return "the database number in the URL (redis://HOST:PORT/DB) does not exist on the server"
	case has("certificate required", "bad certificate", "unknown certificate"):
		return "the server requires a client certificate it trusts (mutual TLS): give it with --tls-cert FILE --tls-key FILE"
	case has("x509", "certificate", "tls:"):
		return "the server's TLS certificate is not signed by a CA this host trusts: give the CA with --tls-ca FILE (or $SSL_CERT_FILE)"
	case has("unknown command"):
		return "the server lacks a command dlock needs (renamed or disabled, or an old Redis)"
	}
	return "fix the server's configuration or the URL; waiting will not help"
}

// nodeErrorsText lists the node failures in err, on one line.
func nodeErrorsText(err error) string {
	var msgs []string
	var walk func(error)
	walk = func(err error) {
		switch e := err.(type) {
		case *dlock.NodeError:
			msgs = append(msgs, errText(e))
		case interface{ Unwrap() []error }:
			for _, e := range e.Unwrap() {
				walk(e)
			}
		case interface{ Unwrap() error }:
			walk(e.Unwrap())
		}
	}
	walk(err)
	if len(msgs) == 0 {
		return errText(err)
	}
	return strings.Join(msgs, "; ")
}

// countNodeErrors counts the *dlock.NodeError in err's tree.
func countNodeErrors(err error) int {
	switch e := err.(type) {
	case nil:
		return 0
	case *dlock.NodeError:
		return 1
	case interface{ Unwrap() []error }:
		n := 0
		for _, e := range e.Unwrap() {
			n += countNodeErrors(e)
		}
		return n
	case interface{ Unwrap() error }:
		return countNodeErrors(e.Unwrap())
	}
	return 0
}
