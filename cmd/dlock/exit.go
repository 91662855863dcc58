package main

import (
	"errors"
	"regexp"
	"strings"

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
	case errors.Is(err, dlock.ErrMisconfigured) && t.kind == "cluster" && strings.Contains(err.Error(), "cluster support disabled"):
		c.errorf("the server at %s is not a node of a Redis Cluster (%s)", strings.Join(t.names, ","), nodeErrorsText(err))
		c.hintf("drop --cluster: one URL is then that server, several a Redlock over independent servers")
		return exitConfig
	case errors.Is(err, dlock.ErrMisconfigured) && t.redlock():
		c.errorf("the Redlock's nodes refused dlock's commands (%s): %s", t.quorumText(), nodeErrorsText(err))
		c.hintf("%s", configHint(err))
		return exitConfig
	case errors.Is(err, dlock.ErrMisconfigured):
		c.errorf("%s refused dlock's commands: %s", t.server(), nodeErrorsText(err))
		c.hintf("%s", configHint(err))
		return exitConfig
	case errors.Is(err, dlock.ErrUnavailable):
		if t.redlock() {
			c.errorf("cannot reach enough of the Redlock's nodes (%s): %s", t.quorumText(), nodeErrorsText(err))
		} else {
			c.errorf("cannot reach %s: %s", t.server(), nodeErrorsText(err))
		}
		msg := err.Error()
		if !hint {
			return exitUnavailable
		}
		dropped := strings.Contains(msg, "reset by peer") || strings.Contains(msg, "EOF") || strings.Contains(msg, "broken pipe")
		plainAt := ""
		if strings.Contains(msg, "deadline exceeded") || strings.Contains(msg, "timeout") {
			plainAt = t.plainTextTLSAddr()
		}
		switch {
		case plainAt != "":
			// A TLS handshake to a plain-text port gets no answer.
			c.hintf("the server at %s speaks plain text, not TLS: write redis:// instead of rediss://", plainAt)
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
	case has("is held with limit", "is held with shared holds"):
		return "every copy that runs under KEY must give the same --limit (without it, 1), or --shared for shared holders: KEY is a semaphore of that many permits, or has shared holders"
	case has("cluster support disabled"):
		return "the server is not a node of a Redis Cluster: drop --cluster"
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

// errText is err's message on one line, without the "dlock: " prefix of the
// library's errors, which the CLI's own messages carry already.
// The library's advice to a Go program that met MOVED through a plain
// client, or no password, is left out too: the CLI's hint names --cluster,
// or the URL's password, instead.
func errText(err error) string {
	s := strings.ReplaceAll(strings.ReplaceAll(err.Error(), "dlock: ", ""), "\n", "; ")
	return clusterAdvice.ReplaceAllString(s, "")
}

var clusterAdvice = regexp.MustCompile(` \((the server is a node of a Redis Cluster, |the server requires a password: set Password)[^)]*\)`)
