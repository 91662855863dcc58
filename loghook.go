package dlock

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"
)

// logRepeatAfter is how long a node's failure stays quiet in the log once
// logged, while it repeats with the same message.
const logRepeatAfter = 10 * time.Second

// logHook is WithLogger's hook.
type logHook struct {
	log *slog.Logger

	mu    sync.Mutex
	quiet map[string]logged // per node: the failure logged last
}

type logged struct {
	msg string
	at  time.Time
}

var _ Hook = (*logHook)(nil)

func (h *logHook) Start(ctx context.Context, _ string) context.Context { return ctx }

func (h *logHook) Event(ctx context.Context, e Event) {
	key := slog.String("key", e.Key)
	switch e.Kind {
	case EventAcquired:
		h.log.LogAttrs(ctx, slog.LevelDebug, "dlock: acquired", key, slog.Uint64("fence", e.Fence),
			slog.Duration("wait", e.Wait), slog.Int("attempts", e.Attempt))
	case EventRefused:
		h.log.LogAttrs(ctx, slog.LevelDebug, "dlock: not acquired", key, slog.Duration("wait", e.Wait),
			slog.Int("attempts", e.Attempt), slog.Any("error", e.Err))
	case EventReleased:
		level := slog.LevelDebug
		if e.Err != nil {
			level = slog.LevelWarn
		}
		h.log.LogAttrs(ctx, level, "dlock: released", key, slog.Duration("held", e.Held), slog.Any("error", e.Err))
	case EventRenewFailed:
		h.log.LogAttrs(ctx, slog.LevelWarn, "dlock: renewal not confirmed, the lock is held until its validity runs out", key, slog.Any("error", e.Err))
	case EventLost:
		h.log.LogAttrs(ctx, slog.LevelWarn, "dlock: lock lost", key, slog.String("reason", e.Reason),
			slog.Duration("held", e.Held), slog.Any("error", e.Err))
	case EventNodeError:
		if !h.first(e.Node, e.Err.Error()) {
			return
		}
		level, msg := slog.LevelWarn, "dlock: node failed"
		var refused *subscriptionError
		switch {
		case e.Key == "" && errors.As(e.Err, &refused):
			level, msg = slog.LevelError, "dlock: node refused the subscription to the waiters' channel: waiting for a lock cannot work (check the ACL)"
		case e.Key == "":
			// Waiting works: the waiters use classic pub/sub, or releases
			// that cannot SPUBLISH reach them only through their timers.
			msg = "dlock: node refused part of the waiters' pub/sub; waiting works"
		case errors.As(e.Err, &refused):
			level, msg = slog.LevelError, "dlock: node refused the subscription to the election's channel: observers hear of changes only by reading the leader, every second while no node allows it (check the ACL)"
		}
		h.log.LogAttrs(ctx, level, msg, slog.String("node", e.Node), key, slog.Any("error", e.Err))
	case EventNodeSuspect:
		h.log.LogAttrs(ctx, slog.LevelWarn, "dlock: node did not answer in time; rounds do not wait for it until it answers", slog.String("node", e.Node))
	case EventNodeBack:
		h.forget(e.Node)
		h.log.LogAttrs(ctx, slog.LevelInfo, "dlock: node answers again", slog.String("node", e.Node))
	}
}

// first reports whether node's failure msg should be logged: it was not the
// last one logged for the node, or that was logRepeatAfter ago.
func (h *logHook) first(node, msg string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := time.Now()
	if last, ok := h.quiet[node]; ok && last.msg == msg && now.Sub(last.at) < logRepeatAfter {
		return false
	}
	h.quiet[node] = logged{msg: msg, at: now}
	return true
}

func (h *logHook) forget(node string) {
	h.mu.Lock()
	delete(h.quiet, node)
	h.mu.Unlock()
}
