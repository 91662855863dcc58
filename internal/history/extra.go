package history

// The history checker's other scenarios, run by each worker beside its
// lock (when $DLOCK_HISTORY_EXTRA=1, in Test's exclusive runs),
// under the same faults: an election whose waiting candidates ask for the
// leadership (RequestLeadership) and whose leaders resign when asked, and
// a semaphore whose limit worker 0 changes (SetLimit) while the others
// hold permits. The checks are in extra_check.go.

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/dlock-dev/dlock"
)

const (
	historyElection  = "e" // the election's key
	historySemaphore = "s" // the semaphore's key
	// historyLimit is the limit the workers ask for (WithLimit): the
	// fleet's configuration, which the changer raises to historyRaised and
	// lowers back while they hold permits.
	historyLimit  = 2
	historyRaised = 4
	// historySemWorkers is how many goroutines of each worker take
	// permits: more holders than the raised limit, over the 4 workers.
	historySemWorkers = 2
)

// historyExtra runs a worker's election and semaphore scenarios on l until
// stop closes; each records with emit, marked with its key.
func historyExtra(w int, l *dlock.Locker, ttl time.Duration, stop <-chan struct{}, emit func(Record)) (wait func()) {
	var wg sync.WaitGroup
	run := func(f func()) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f()
		}()
	}
	run(func() { historyCandidate(w, l, ttl, stop, emit) })
	for g := range historySemWorkers {
		run(func() { historyPermits(w, g, l, ttl, stop, emit) })
	}
	if w == 0 {
		run(func() { historyChanger(l, stop, emit) })
	}
	return wg.Wait
}

func stopped(stop <-chan struct{}) bool {
	select {
	case <-stop:
		return true
	default:
		return false
	}
}

// historyCandidate campaigns for the election again and again; while its
// Campaign waits it asks, one time in three, for the leadership
// (RequestLeadership: a "request" record once a leader was asked); as the
// leader it works a while and resigns (Release) at the end of the work, at
// a request (Asked: its "end" record says so) or when Lost closed.
func historyCandidate(w int, l *dlock.Locker, ttl time.Duration, stop <-chan struct{}, emit func(Record)) {
	rnd := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
	for !stopped(stop) {
		ctx, cancel := context.WithTimeout(context.Background(), AcquireTimeout)
		since := time.Now()
		asked := make(chan struct{})
		if rnd.IntN(3) == 0 {
			go func() {
				defer close(asked)
				historyAsk(ctx, w, l, emit)
			}()
		} else {
			close(asked)
		}
		k, err := l.Campaign(ctx, historyElection, "w", dlock.WithTTL(ttl))
		returned := time.Now() // before the asking goroutine ends, which may take a node's timeout
		cancel()
		<-asked
		r := Record{Key: historyElection, Kind: "attempt", Since: since.UnixNano(), At: returned.UnixNano()}
		if err != nil {
			r.Err = ErrClass(err)
			emit(r)
			continue
		}
		emit(r)
		emit(Record{Key: historyElection, Kind: "begin", Fence: k.Fence(), At: returned.UnixNano()})
		work := time.Duration(50+rnd.IntN(400)) * time.Millisecond
		if rnd.IntN(10) == 0 {
			work = ttl/2 + time.Duration(rnd.Int64N(int64(2*ttl)))
		}
		end := HoldFor(k, work, true)
		end.Key = historyElection
		emit(end)
		_ = k.Release(context.Background())
	}
}

// historyAsk asks for the leadership once the Campaign of l waits: it
// tries until ctx ends or a leader was asked.
func historyAsk(ctx context.Context, w int, l *dlock.Locker, emit func(Record)) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(30 * time.Millisecond):
		}
		err := l.RequestLeadership(ctx, historyElection, "hand over")
		if err == nil {
			emit(Record{Key: historyElection, Kind: "request", At: time.Now().UnixNano()})
			return
		}
		if errors.Is(err, dlock.ErrNotHeld) {
			return // vacant: the Campaign takes it
		}
	}
}

// historyPermits takes permits of the semaphore, with the fleet's limit,
// and releases them, again and again.
func historyPermits(w, g int, l *dlock.Locker, ttl time.Duration, stop <-chan struct{}, emit func(Record)) {
	rnd := rand.New(rand.NewPCG(uint64(w*10+g), uint64(time.Now().UnixNano())))
	for !stopped(stop) {
		ctx, cancel := context.WithTimeout(context.Background(), AcquireTimeout)
		since := time.Now()
		k, err := l.Acquire(ctx, historySemaphore, dlock.WithLimit(historyLimit), dlock.WithTTL(ttl))
		cancel()
		r := Record{Key: historySemaphore, G: g, Kind: "attempt", Since: since.UnixNano(), At: time.Now().UnixNano()}
		if err != nil {
			r.Err = ErrClass(err)
			emit(r)
			continue
		}
		emit(r)
		emit(Record{Key: historySemaphore, G: g, Kind: "begin", Fence: k.Fence(), Since: since.UnixNano(), At: time.Now().UnixNano()})
		work := time.Duration(10+rnd.IntN(60)) * time.Millisecond
		if rnd.IntN(10) == 0 {
			work = ttl/2 + time.Duration(rnd.Int64N(int64(2*ttl)))
		}
		lost := false
		select {
		case <-time.After(work):
		case <-k.Lost():
			lost = true
		}
		now := time.Now()
		emit(Record{Key: historySemaphore, G: g, Kind: "end", Fence: k.Fence(), At: now.UnixNano(), Lost: lost, Valid: recordedValid(now, k.ValidUntil())})
		_ = k.Release(context.Background())
	}
}

// historyChanger changes the semaphore's limit, historyLimit →
// historyRaised → historyLimit …, every 200 to 700ms: a "limit-call"
// record before each SetLimit, a "limit" record (with its error) after.
func historyChanger(l *dlock.Locker, stop <-chan struct{}, emit func(Record)) {
	rnd := rand.New(rand.NewPCG(7, uint64(time.Now().UnixNano())))
	n := historyRaised
	for {
		select {
		case <-stop:
			return
		case <-time.After(time.Duration(200+rnd.IntN(500)) * time.Millisecond):
		}
		ctx, cancel := context.WithTimeout(context.Background(), AcquireTimeout)
		since := time.Now()
		emit(Record{Key: historySemaphore, Kind: "limit-call", Limit: n, At: since.UnixNano()})
		err := l.SetLimit(ctx, historySemaphore, n)
		cancel()
		r := Record{Key: historySemaphore, Kind: "limit", Limit: n, Since: since.UnixNano(), At: time.Now().UnixNano()}
		if err != nil {
			r.Err = "setlimit: " + ErrClass(err)
			if errors.Is(err, dlock.ErrNotHeld) {
				r.Err = "setlimit: not held"
			}
			emit(r)
			continue // the same limit again
		}
		emit(r)
		if n == historyRaised {
			n = historyLimit
		} else {
			n = historyRaised
		}
	}
}
