package dlock

import (
	"context"
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/internal/node"
	"github.com/dlock-dev/dlock/internal/quorum"
	"github.com/dlock-dev/dlock/internal/script"
)

// A server can lack a command dlock sends: a managed service that does not
// offer it (ElastiCache Serverless has no WAIT), a build without Lua, or a
// rename-command in redis.conf. Redis' own words for it ("ERR unknown
// command 'evalsha', with args beginning with: …") name neither what is
// missing for dlock nor what to do, and list the lock's key names; these
// errors do.

// commandError is a server's refusal of a command, in dlock's words. It is
// an error reply of Redis (RedisError): permanent (ErrMisconfigured), and a
// reply that says that the command wrote nothing, so that no clean-up is
// sent for it.
type commandError struct{ msg string }

func (e *commandError) Error() string { return e.msg }

// RedisError marks commandError as an error reply (redis.Error).
func (e *commandError) RedisError() {}

var _ redis.Error = (*commandError)(nil)

// unknownCommand reports whether err is Redis' answer to a command it does
// not have (not built in, or renamed away), and returns the first line of
// the answer without the arguments it echoes.
func unknownCommand(err error, name string) (string, bool) {
	if err == nil || !quorum.IsReply(err) {
		return "", false
	}
	msg := err.Error()
	if !strings.HasPrefix(strings.ToLower(msg), "err unknown command '"+name+"'") {
		return "", false
	}
	if i := strings.Index(msg, ", with args"); i >= 0 {
		msg = msg[:i]
	}
	return msg, true
}

// noScripting turns Redis' answer to an EVALSHA or EVAL that the server
// does not have into an error that says so; it returns other errors as
// they are.
func noScripting(err error) error {
	for _, name := range []string{"evalsha", "eval"} {
		if raw, ok := unknownCommand(err, name); ok {
			return &commandError{"this server has no " + strings.ToUpper(name) + " (" + raw +
				"): dlock runs every operation as a Lua script, and a server without scripting cannot run dlock: use a Redis (or Valkey) with EVAL and EVALSHA"}
		}
	}
	return err
}

// waitRefused is the error of a WAIT that the server refused after the
// script ran (WithReplicaAck): the script may have written the lock. It is
// permanent (ErrMisconfigured); the acquisition releases what it wrote
// (attemptCmd.run) before it returns.
func waitRefused(err error) error {
	if raw, ok := unknownCommand(err, "wait"); ok {
		return script.BadReply("WithReplicaAck needs WAIT, which this server does not have (%s; ElastiCache Serverless, for one, lacks it): "+
			"drop WithReplicaAck for this deployment", raw)
	}
	return script.BadReply("WithReplicaAck needs WAIT, which this server refused after the script ran (%s): "+
		"grant the user WAIT (+wait), or drop WithReplicaAck", err.Error())
}

// undoRefusedWait releases, on node i, whatever the attempt's script wrote
// before the node refused its WAIT (err, from waitRefused), within the
// round's ctx, so that the failed acquisition leaves no lock behind when it
// returns. Once released, the error is an error reply (nothing left: no
// clean-up follows); if the release fails, err stays what it is, a reply
// that may have written, and the Locker's clean-up releases it later.
func (a *attemptCmd) undoRefusedWait(ctx context.Context, i int, c node.Conn, err error) error {
	var rerr *script.ReplyError
	if !errors.As(err, &rerr) || !strings.HasPrefix(rerr.Msg, "WithReplicaAck needs WAIT") {
		return err
	}
	if _, relErr := a.l.runRelease(ctx, i, c, a.nm, a.argv.Token, "", true, anyShape, false, nil); relErr != nil {
		return err
	}
	return &commandError{rerr.Msg + "; what the script wrote was released"}
}
