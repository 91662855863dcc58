package dlock

import (
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
)

// Health is an http.Handler for a Kubernetes liveness or readiness probe
// of a process that holds a lock, typically a leader (Campaign): it
// answers 200 while the lock it was given (Set) is held and valid, and 503
// once its Lost channel closed (lost, or released: the leader resigned),
// once its validity ran out, or before Set. It reads only the lock's own
// state (Lost, ValidUntil): a probe costs no Redis command. The zero
// Health is ready to use; it is safe for concurrent use.
//
// A process that campaigns again after losing the leadership calls Set
// with each new leadership, so that one handler serves the process's
// life:
//
//	var health dlock.Health
//	http.Handle("/leader", &health)
//	for {
//		k, err := locker.Campaign(ctx, "scheduler", hostname)
//		if err != nil {
//			return err
//		}
//		health.Set(k)
//		lead(ctx, k) // until <-k.Lost()
//	}
//
// and in the pod's spec, so that only the leader is ready:
//
//	readinessProbe:
//	  httpGet: {path: /leader, port: 8080}
//	  periodSeconds: 5
type Health struct {
	lock atomic.Pointer[Lock]
}

var _ http.Handler = (*Health)(nil)

// Set makes k the lock that h reports (nil: none, and h answers 503).
func (h *Health) Set(k *Lock) { h.lock.Store(k) }

// ServeHTTP answers 200 with "held KEY fence FENCE" while the lock is held
// and valid, else 503 with the reason, as text.
func (h *Health) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	k := h.lock.Load()
	var why string
	switch {
	case k == nil:
		why = "no lock held"
	case isClosed(k.Lost()):
		why = "lock " + strconv.Quote(k.Key()) + " lost or released"
	case !time.Now().Before(k.ValidUntil()):
		why = "lock " + strconv.Quote(k.Key()) + " past its validity"
	default:
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte("held " + strconv.Quote(k.Key()) + " fence " + strconv.FormatUint(k.Fence(), 10) + "\n"))
		return
	}
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = w.Write([]byte(why + "\n"))
}

// isClosed reports whether ch is closed.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
