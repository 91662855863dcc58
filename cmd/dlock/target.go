package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/quorum"
	"github.com/dlock-dev/dlock/internal/serverinfo"
)

// target is the Redis deployment a command talks to.
type target struct {
	locker  *dlock.Locker
	clients []redis.UniversalClient
	names   []string // the URLs, passwords redacted
	kind    string   // "" (one server or a Redlock), "cluster" or the master's name (Sentinel)
	// limit is dlock run's --limit (0 for the other commands and for
	// --shared), shared its --shared: a quorum's size, and how a busy lock
	// is told.
	limit  int
	shared bool
	// tlsWithoutCert: TLS URLs, and no client certificate; plainText: a
	// redis:// URL (no TLS); tlsAddrs: the addresses of the rediss:// URLs.
	tlsWithoutCert, plainText bool
	tlsAddrs                  []string
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

// describe names the deployment in messages: the URL of one server, else
// what the URLs are.
func (t *target) describe() string {
	switch {
	case t.kind == "cluster":
		return "the Redis Cluster at " + strings.Join(t.names, ",")
	case t.kind != "":
		return fmt.Sprintf("the master %q of the Sentinels at %s", t.kind, strings.Join(t.names, ","))
	case len(t.names) == 1:
		return t.names[0]
	}
	return fmt.Sprintf("a Redlock of %d nodes (%s)", len(t.names), t.quorumText())
}

// server names one deployment as the subject of a message: "Redis at URL"
// for one server, else as describe does.
func (t *target) server() string {
	if t.kind == "" && len(t.names) == 1 {
		return "Redis at " + t.names[0]
	}
	return t.describe()
}

// plainTextTLSAddr is the address of a rediss:// URL whose server speaks
// plain text (see plainTextAt), or "".
func (t *target) plainTextTLSAddr() string {
	for _, a := range t.tlsAddrs {
		if plainTextAt(a, inspectTimeout) {
			return a
		}
	}
	return ""
}

// redlock reports whether the URLs are the nodes of a Redlock.
func (t *target) redlock() bool { return t.kind == "" && len(t.names) > 1 }

// quorumText says how many of a Redlock's nodes a lock needs.
func (t *target) quorumText() string {
	return fmt.Sprintf("a quorum needs %d of %d", quorum.For(len(t.names), t.limit), len(t.names))
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
		if opt.TLSConfig != nil {
			opt.Dialer = tlsDialer(opt.TLSConfig)
			t.tlsAddrs = append(t.tlsAddrs, opt.Addr)
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
	if err := r.makeClients(t, opts); err != nil {
		return nil, err
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

// makeClients makes t's clients, and sets its kind, from the URLs' options:
// one Cluster client of the URLs as seeds (--cluster), one Sentinel client
// (--sentinel), else one client per URL.
func (r *redisFlags) makeClients(t *target, opts []*redis.Options) error {
	switch {
	case r.cluster:
		t.kind = "cluster"
		o := opts[0]
		if o.DB != 0 {
			return fmt.Errorf("Redis URL %s: a Cluster has no database %d", t.names[0], o.DB)
		}
		co := &redis.ClusterOptions{Username: o.Username, Password: o.Password, TLSConfig: o.TLSConfig, DisableIndentity: true}
		if o.TLSConfig != nil {
			co.Dialer = tlsDialer(o.TLSConfig)
		}
		for _, o := range opts {
			co.Addrs = append(co.Addrs, o.Addr)
		}
		t.clients = []redis.UniversalClient{redis.NewClusterClient(co)}
	case r.sentinel != "":
		t.kind = r.sentinel
		o := opts[0]
		fo := &redis.FailoverOptions{MasterName: r.sentinel, Username: o.Username, Password: o.Password, DB: o.DB,
			SentinelPassword: r.sentinelPassword, TLSConfig: o.TLSConfig, DisableIndentity: true}
		if o.TLSConfig != nil {
			fo.Dialer = tlsDialer(o.TLSConfig)
		}
		for _, o := range opts {
			fo.SentinelAddrs = append(fo.SentinelAddrs, o.Addr)
		}
		t.clients = []redis.UniversalClient{redis.NewFailoverClient(fo)}
	default:
		if err := sameAddress(opts, t.names); err != nil {
			return err
		}
		for _, o := range opts {
			t.clients = append(t.clients, redis.NewClient(o))
		}
	}
	return nil
}

// sameAddress refuses a Redlock two of whose URLs name one address (with
// another database: the same one is a usage error): one server, as
// NewRedlock would say, in the words of the URLs. It matches
// dlock.ErrMisconfigured.
func sameAddress(opts []*redis.Options, names []string) error {
	for j := range opts {
		for i := range j {
			if opts[i].Addr == opts[j].Addr {
				return fmt.Errorf("%w: Redis URLs %s and %s reach the same server (databases %d and %d of it): a Redlock needs independent masters",
					dlock.ErrMisconfigured, names[i], names[j], opts[i].DB, opts[j].DB)
			}
		}
	}
	return nil
}

// open opens the deployment the flags name, for the subcommand sub; on
// failure it reports and returns nil and the exit status: 64 for bad flags
// or URLs, 78 for URLs that reach the same server twice.
func (c *cli) open(ctx context.Context, sub string, rf *redisFlags) (*target, int) {
	t, err := rf.open()
	if errors.Is(err, dlock.ErrMisconfigured) {
		// Two URLs of one address, with another database (sameAddress).
		c.errorf("%s", strings.TrimPrefix(errText(err), "Redis refused the command (misconfigured): "))
		c.hintf("%s", sameServerHint)
		return nil, exitConfig
	}
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
		if serverinfo.Field(info, "cluster_enabled") == "1" {
			return "add --cluster: the URLs are then seed nodes of the Cluster, and every key goes to its master",
				fmt.Errorf("the server at %s is a node of a Redis Cluster, and a plain URL reaches only its own slots", t.names[i])
		}
		ids[i] = serverinfo.RunID(info)
	}
	if i, j, ok := serverinfo.Repeated(ids); ok {
		return sameServerHint,
			fmt.Errorf("Redis URLs %s and %s reach the same server (run id %s): a Redlock needs independent masters", t.names[i], t.names[j], ids[i])
	}
	return "", nil
}

// sameServerHint follows the refusal of a Redlock that reaches one server
// twice.
const sameServerHint = "give each independent master once"

// inspectTimeout bounds inspect: the node timeout of the default TTL.
const inspectTimeout = time.Second

func (t *target) closeClients() {
	for _, cl := range t.clients {
		_ = cl.Close()
	}
}
