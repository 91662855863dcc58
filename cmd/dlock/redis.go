package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock"
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

// tlsDialer dials with TLS, the handshake bounded by the context, which
// go-redis' own TLS dialer ignores (it waits for DialTimeout, 5s: the
// library then stops waiting at its node timeout, but INFO, the inspection
// of the URLs, does not). No ServerName in cfg: each dial checks the host
// it dials.
func tlsDialer(cfg *tls.Config) func(ctx context.Context, network, addr string) (net.Conn, error) {
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 5 * time.Minute}, Config: cfg}
	return d.DialContext
}

// plainTextAt reports whether the server at addr answers a plain-text
// PING within timeout: Redis without TLS on that port (a TLS port answers
// with an alert, or not at all).
func plainTextAt(addr string, timeout time.Duration) bool {
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return false
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(timeout))
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	var b [1]byte
	if _, err := io.ReadFull(conn, b[:]); err != nil {
		return false
	}
	return b[0] == '+' || b[0] == '-' // PONG, or an error such as NOAUTH
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
