package history

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock"
)

// Record is a worker's record, one JSON line: a section begins (after Acquire
// returned) or ends (before Release, or when Lost closed), or an attempt
// ended (Acquire returned).
type Record struct {
	W      int    `json:"w"`
	Kind   string `json:"kind"` // "begin", "end", "attempt"
	Fence  uint64 `json:"fence,omitempty"`
	At     int64  `json:"at"`              // Unix ns, the machine's clock
	Since  int64  `json:"since,omitempty"` // attempt: when Acquire was called
	Lost   bool   `json:"lost,omitempty"`
	Shared bool   `json:"shared,omitempty"` // begin: a shared hold (WithShared)
	Valid  int64  `json:"valid,omitempty"`  // end: the lock's ValidUntil, Unix ns
	Err    string `json:"err,omitempty"`
	Closed bool   `json:"closed,omitempty"`
	// end: the section went on under a lock that another Locker adopted
	// (Detach, Adopt: see handOver).
	Adopted bool `json:"adopted,omitempty"`
	// The other scenarios' records (extra.go): the key
	// ("": the lock's), the goroutine of a semaphore worker, the limit of a
	// SetLimit, and that a leader resigned because it was asked.
	Key   string `json:"key,omitempty"`
	G     int    `json:"g,omitempty"`
	Limit int    `json:"limit,omitempty"`
	Asked bool   `json:"asked,omitempty"`
}

const (
	historyKey     = "h"
	AcquireTimeout = 3 * time.Second // each Acquire's context (a worker's)
)

// Lockers makes a worker's two Lockers on the servers at addrs (one
// address: one Redis; more: a Redlock over them), each on clients of its
// own: l takes the lock; adopter, standing in for another process, adopts
// the holds that l detaches (see handOver) and runs the other scenarios
// (extra.go). closeAll closes both Lockers and their clients; it is
// not nil, also with an error.
type Lockers func(addrs []string) (l, adopter *dlock.Locker, closeAll func(), err error)

// IsWorker reports whether this process is a worker of a Test: its
// TestMain must then run Worker instead of the tests.
func IsWorker() bool { return os.Getenv("DLOCK_HISTORY_WORKER") == "1" }

// GoRedis are the Lockers on go-redis clients, dlock.New's and
// dlock.NewRedlock's.
func GoRedis(addrs []string) (l, adopter *dlock.Locker, closeAll func(), err error) {
	var mine, adopters []redis.UniversalClient
	for _, a := range addrs {
		mine = append(mine, redis.NewClient(&redis.Options{Addr: a}))
		adopters = append(adopters, redis.NewClient(&redis.Options{Addr: a}))
	}
	closeAll = func() {
		for _, x := range []*dlock.Locker{l, adopter} {
			if x != nil {
				x.Close()
			}
		}
		for _, c := range append(mine, adopters...) {
			c.Close()
		}
	}
	if l, err = dlock.NewRedlock(mine); err == nil {
		adopter, err = dlock.NewRedlock(adopters)
	}
	return l, adopter, closeAll, err
}

// Worker is a worker process, with newLockers' Lockers on the addresses
// that Test gave it: it locks and unlocks until its stdin closes, writing
// records to stdout, and returns its exit code.
func Worker(newLockers Lockers) int {
	w, _ := strconv.Atoi(os.Getenv("DLOCK_HISTORY_W"))
	ttl, _ := time.ParseDuration(os.Getenv("DLOCK_HISTORY_TTL"))
	rw := os.Getenv("DLOCK_HISTORY_RW") == "1" // two acquisitions in three shared
	l, adopter, closeAll, err := newLockers(strings.Split(os.Getenv("DLOCK_HISTORY_ADDRS"), ","))
	if err != nil {
		closeAll()
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	stop := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(stop)
	}()
	out := json.NewEncoder(os.Stdout)
	var mu sync.Mutex
	emit := func(r Record) {
		mu.Lock()
		defer mu.Unlock()
		r.W = w
		_ = out.Encode(r)
	}
	rnd := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
	extraDone := func() {}
	if os.Getenv("DLOCK_HISTORY_EXTRA") == "1" {
		extraDone = historyExtra(w, adopter, ttl, stop, emit)
	}
	for {
		select {
		case <-stop:
			extraDone()
			closeAll()
			return 0
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), AcquireTimeout)
		since := time.Now()
		shared := rw && rnd.IntN(3) != 0
		opts := []dlock.LockOption{dlock.WithTTL(ttl)}
		if shared {
			opts = append(opts, dlock.WithShared())
		}
		k, err := l.Acquire(ctx, historyKey, opts...)
		cancel()
		r := Record{Kind: "attempt", Since: since.UnixNano(), At: time.Now().UnixNano()}
		if err != nil {
			r.Err = ErrClass(err)
			emit(r)
			continue
		}
		emit(r)
		emit(Record{Kind: "begin", Fence: k.Fence(), At: time.Now().UnixNano(), Shared: shared})
		handed := rnd.IntN(4) == 0
		if handed {
			// One section in four goes on under another Locker (see handOver).
			if k = handOver(k, adopter, opts, emit); k == nil {
				continue
			}
		}
		// The work: mostly short; one section in ten holds the lock for
		// 0.5 to 2.5 TTLs, renewed, so that faults hit holders too.
		work := time.Duration(rnd.IntN(20)) * time.Millisecond
		if rnd.IntN(10) == 0 {
			work = ttl/2 + time.Duration(rnd.Int64N(int64(2*ttl)))
		}
		end := HoldFor(k, work, false)
		end.Adopted = handed
		emit(end)
		_ = k.Release(context.Background())
	}
}

// HoldFor holds k for work, or until Lost closes (or, with asked, until
// Asked does: the holder lets go when asked), reads Lost once more, and
// returns the section's "end" record: its fence, when it ended, whether
// Lost or Asked closed, and its validity as the checker reads it.
func HoldFor(k *dlock.Lock, work time.Duration, asked bool) Record {
	var askedCh <-chan struct{} // nil: never ready
	if asked {
		askedCh = k.Asked()
	}
	lost, wasAsked := false, false
	select {
	case <-time.After(work):
	case <-askedCh:
		wasAsked = true
	case <-k.Lost():
		lost = true
	}
	select {
	case <-k.Lost():
		lost = true
	default:
	}
	now := time.Now()
	return Record{Kind: "end", Fence: k.Fence(), At: now.UnixNano(), Lost: lost, Asked: wasAsked, Valid: recordedValid(now, k.ValidUntil())}
}

// handOver detaches k and adopts its hold with adopter: the adopted lock,
// or nil once it has recorded the end of the section (emit) when the
// Adopt failed: ownership was guaranteed until the detached lock's
// validity at most, and not past the Adopt's return.
func handOver(k *dlock.Lock, adopter *dlock.Locker, opts []dlock.LockOption, emit func(Record)) *dlock.Lock {
	h := k.Detach()
	ctx, cancel := context.WithTimeout(context.Background(), AcquireTimeout)
	defer cancel()
	k2, err := adopter.Adopt(ctx, h.Key, h.Token, opts...)
	if err != nil {
		now := time.Now()
		emit(Record{Kind: "end", Fence: h.Fence, At: now.UnixNano(), Lost: true, Valid: recordedValid(now, k.ValidUntil()), Err: "adopt: " + ErrClass(err)})
		return nil
	}
	return k2
}

// recordedValid is a lock's ValidUntil on the wall clock, as a worker records
// it at now. A lock that a quorum said is no longer ours has no validity
// left (the zero time): its section ends when its worker saw that.
func recordedValid(now, validUntil time.Time) int64 {
	if validUntil.IsZero() {
		return now.UnixNano()
	}
	return now.Add(time.Until(validUntil)).UnixNano()
}

// ErrClass is err's class as a record says it: the dlock sentinel it
// wraps, or its text.
func ErrClass(err error) string {
	for _, c := range []error{dlock.ErrNotAcquired, dlock.ErrUnavailable, dlock.ErrMisconfigured, dlock.ErrClosed} {
		if errors.Is(err, c) {
			return c.Error()
		}
	}
	return err.Error()
}

// Checker checks the history of one key recorded in this process, by
// goroutines of its own (no worker processes, no faults of the Test's): as
// Test's checker does. Its methods may be called concurrently.
type Checker struct{ h *historyRun }

// NewChecker returns a Checker of a lock taken with ttl.
func NewChecker(t *testing.T, ttl time.Duration) *Checker {
	return &Checker{&historyRun{t: t, ttl: ttl, paused: map[int][]fault{}, killed: map[int][]time.Time{}}}
}

// Add records r.
func (c *Checker) Add(r Record) {
	c.h.mu.Lock()
	c.h.recs = append(c.h.recs, r)
	c.h.mu.Unlock()
}

// Fault records a fault that hit every worker from start to end: a gap in
// progress then is explained.
func (c *Checker) Fault(kind string, start, end time.Time) {
	c.h.logFault(fault{kind: kind, w: -1, node: -1, start: start, end: end})
}

// Records are the records so far, in the order added.
func (c *Checker) Records() []Record {
	c.h.mu.Lock()
	defer c.h.mu.Unlock()
	return slices.Clone(c.h.recs)
}

// Check verifies the history, reporting each violation with errorf, and
// returns a summary.
func (c *Checker) Check(errorf func(format string, args ...any)) string { return c.h.check(errorf) }
