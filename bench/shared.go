package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-dev/dlock"
)

// The scenarios of dlock's own features, which none of the peers offers:
// shared (read) holds with WithShared, and AcquireAll. Both run dlock-ctx
// (as the semaphore scenario does); every figure is reported, none is a
// target.

// dlockProcesses starts n processes of dlock-ctx on srv, each with opts,
// counting the commands they send in sent.
func dlockProcesses(srv Server, n int, sent *Counter, opts ...dlock.LockOption) ([]*dlockProcess, error) {
	lib := DlockLibrary(true)
	ps, err := startProcesses(lib, []string{srv.Addr}, n, sent)
	if err != nil {
		return nil, err
	}
	out := make([]*dlockProcess, len(ps))
	for i, p := range ps {
		out[i] = p.(*dlockProcess)
		out[i].opts = opts
	}
	return out, nil
}

func closeDlock(ps []*dlockProcess) {
	var all []Process
	for _, p := range ps {
		all = append(all, p)
	}
	closeAll(all)
}

// ReadWriteResult is one run of the read-write scenario.
type ReadWriteResult struct {
	Lib     string
	Readers int
	Hold    time.Duration
	Window  time.Duration
	// Reads and Writes are the shared and exclusive holds completed (their
	// Release returned) during the window.
	Reads, Writes             int64
	ReadsPerSec, WritesPerSec float64
	// WriterWaitP50/P99: how long the writer's Acquire took (call →
	// return), over its acquisitions in the window; ReaderWait the same
	// for the readers' shared Acquire.
	WriterWaitP50, WriterWaitP99 time.Duration
	ReaderWaitP50, ReaderWaitP99 time.Duration
	// RoundTrips is the number of commands all clients sent per hold
	// (reads + writes); Commands the number Redis executed per hold,
	// those inside scripts included (INFO commandstats).
	RoundTrips float64
	Commands   float64
	// Violations counts a writer holding alongside anyone, or a reader
	// alongside the writer.
	Violations int64
	Errors     int64
}

// ReadWrite runs readers processes looping shared Acquire (WithShared) /
// hold / Release and one writer process looping exclusive Acquire / hold /
// Release, all on one key, for warm + dur; the numbers cover the last dur.
func ReadWrite(srv Server, readers int, hold, warm, dur time.Duration) (ReadWriteResult, error) {
	res := ReadWriteResult{Lib: DlockLibrary(true).Name, Readers: readers, Hold: hold, Window: dur}
	sent := &Counter{}
	rs, err := dlockProcesses(srv, readers, sent, dlock.WithShared())
	if err != nil {
		return res, err
	}
	defer closeDlock(rs)
	ws, err := dlockProcesses(srv, 1, sent)
	if err != nil {
		return res, err
	}
	defer closeDlock(ws)
	key := freshKey("rw")

	base := time.Now()
	mStart, mEnd := base.Add(warm), base.Add(warm+dur)
	ctx, cancel := context.WithDeadline(context.Background(), mEnd)
	defer cancel()
	var (
		readersIn, writerIn      atomic.Int64
		reads, writes            atomic.Int64
		violations, errs         atomic.Int64
		mu                       sync.Mutex
		readerWaits, writerWaits []time.Duration
		wg                       sync.WaitGroup
	)
	loop := func(p *dlockProcess, writer bool) {
		defer wg.Done()
		var waits []time.Duration
		for n := 0; n < 10_000_000 && ctx.Err() == nil; n++ {
			t0 := time.Now()
			h, err := p.Lock(ctx, key)
			t1 := time.Now()
			if err != nil {
				if ctx.Err() == nil {
					errs.Add(1)
				}
				continue
			}
			if writer {
				if writerIn.Add(1) > 1 || readersIn.Load() > 0 {
					violations.Add(1)
				}
			} else if readersIn.Add(1); writerIn.Load() > 0 {
				violations.Add(1)
			}
			if !t1.Before(mStart) && t1.Before(mEnd) {
				waits = append(waits, t1.Sub(t0))
			}
			time.Sleep(hold)
			if writer {
				writerIn.Add(-1)
			} else {
				readersIn.Add(-1)
			}
			rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
			err = h.Unlock(rctx)
			rcancel()
			if err != nil {
				errs.Add(1)
				continue
			}
			if t2 := time.Now(); !t2.Before(mStart) && t2.Before(mEnd) {
				if writer {
					writes.Add(1)
				} else {
					reads.Add(1)
				}
			}
		}
		mu.Lock()
		if writer {
			writerWaits = append(writerWaits, waits...)
		} else {
			readerWaits = append(readerWaits, waits...)
		}
		mu.Unlock()
	}
	for _, p := range rs {
		wg.Add(1)
		go loop(p, false)
	}
	wg.Add(1)
	go loop(ws[0], true)

	sctx, scancel := context.WithTimeout(context.Background(), warm+dur+30*time.Second)
	defer scancel()
	time.Sleep(time.Until(mStart))
	sent0 := sent.Load()
	st0, err0 := srv.Stats(sctx)
	time.Sleep(time.Until(mEnd))
	sent1 := sent.Load()
	st1, err1 := srv.Stats(sctx)
	cancel()
	wg.Wait()
	if err := errors.Join(err0, err1); err != nil {
		return res, err
	}

	res.Reads, res.Writes = reads.Load(), writes.Load()
	res.ReadsPerSec = float64(res.Reads) / dur.Seconds()
	res.WritesPerSec = float64(res.Writes) / dur.Seconds()
	res.WriterWaitP50, res.WriterWaitP99 = percentile(writerWaits, 50), percentile(writerWaits, 99)
	res.ReaderWaitP50, res.ReaderWaitP99 = percentile(readerWaits, 50), percentile(readerWaits, 99)
	if holds := res.Reads + res.Writes; holds > 0 {
		res.RoundTrips = float64(sent1-sent0) / float64(holds)
		res.Commands = float64(st1.Commands-st0.Commands) / float64(holds)
	}
	res.Violations = violations.Load()
	res.Errors = errs.Load()
	return res, nil
}

// MultiVariant is how a worker of the multi-key scenario takes its keys.
type MultiVariant string

const (
	// MultiAcquireAll: one AcquireAll call for both keys.
	MultiAcquireAll MultiVariant = "AcquireAll"
	// MultiOrdered: the baseline written by hand, the keys sorted and
	// acquired one Acquire at a time, in that order.
	MultiOrdered MultiVariant = "sorted Acquire ×2"
)

// MultiResult is one run of the multi-key scenario.
type MultiResult struct {
	Variant      MultiVariant
	Workers      int
	Processes    int
	Keys         int
	PerOp        int
	Hold         time.Duration
	Acquisitions int64 // of all PerOp keys, in the window
	AcqPerSec    float64
	// WaitP50/P99: from the call (the first Acquire, for the baseline) to
	// holding every key.
	WaitP50, WaitP99 time.Duration
	// RoundTrips and Commands are per acquisition (of all PerOp keys),
	// release included, as in ReadWriteResult.
	RoundTrips float64
	Commands   float64
	// Violations counts a key held by two workers at once.
	Violations int64
	Errors     int64
}

// Multi runs workers goroutines spread over procs processes, each looping:
// pick perOp distinct keys of nkeys at random (in random order), lock them
// all the way v says, hold them for hold (a sleep), release them, for warm
// + dur; the numbers cover the last dur.
func Multi(srv Server, v MultiVariant, workers, procs, nkeys, perOp int, hold, warm, dur time.Duration) (MultiResult, error) {
	res := MultiResult{Variant: v, Workers: workers, Processes: procs, Keys: nkeys, PerOp: perOp, Hold: hold}
	if perOp > nkeys {
		return res, fmt.Errorf("multi: %d keys per acquisition of %d", perOp, nkeys)
	}
	sent := &Counter{}
	ps, err := dlockProcesses(srv, procs, sent)
	if err != nil {
		return res, err
	}
	defer closeDlock(ps)
	prefix := freshKey("m")
	keys := make([]string, nkeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s:%d", prefix, i)
	}

	base := time.Now()
	mStart, mEnd := base.Add(warm), base.Add(warm+dur)
	ctx, cancel := context.WithDeadline(context.Background(), mEnd)
	defer cancel()
	var (
		inside           = make([]atomic.Int64, nkeys)
		acqs             atomic.Int64
		violations, errs atomic.Int64
		mu               sync.Mutex
		waits            []time.Duration
		wg               sync.WaitGroup
	)
	lockAll := func(p *dlockProcess, idx []int) ([]*dlock.Lock, error) {
		if v == MultiAcquireAll {
			names := make([]string, len(idx))
			for j, k := range idx {
				names[j] = keys[k]
			}
			return p.locker.AcquireAll(ctx, names)
		}
		sorted := make([]string, len(idx))
		for j, k := range idx {
			sorted[j] = keys[k]
		}
		slices.Sort(sorted)
		var held []*dlock.Lock
		for _, k := range sorted {
			l, err := p.locker.Acquire(ctx, k)
			if err != nil {
				releaseLocks(held)
				return nil, err
			}
			held = append(held, l)
		}
		return held, nil
	}
	for i := 0; i < workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := ps[i%procs]
			rng := rand.New(rand.NewPCG(uint64(base.UnixNano()), uint64(i)))
			var ws []time.Duration
			for n := 0; n < 10_000_000 && ctx.Err() == nil; n++ {
				idx := rng.Perm(nkeys)[:perOp]
				t0 := time.Now()
				held, err := lockAll(p, idx)
				t1 := time.Now()
				if err != nil {
					if ctx.Err() == nil {
						errs.Add(1)
					}
					continue
				}
				for _, k := range idx {
					if inside[k].Add(1) > 1 {
						violations.Add(1)
					}
				}
				if !t1.Before(mStart) && t1.Before(mEnd) {
					acqs.Add(1)
					ws = append(ws, t1.Sub(t0))
				}
				time.Sleep(hold)
				for _, k := range idx {
					inside[k].Add(-1)
				}
				errs.Add(int64(releaseLocks(held)))
			}
			mu.Lock()
			waits = append(waits, ws...)
			mu.Unlock()
		}()
	}

	sctx, scancel := context.WithTimeout(context.Background(), warm+dur+30*time.Second)
	defer scancel()
	time.Sleep(time.Until(mStart))
	sent0 := sent.Load()
	st0, err0 := srv.Stats(sctx)
	time.Sleep(time.Until(mEnd))
	sent1 := sent.Load()
	st1, err1 := srv.Stats(sctx)
	cancel()
	wg.Wait()
	if err := errors.Join(err0, err1); err != nil {
		return res, err
	}
	res.Acquisitions = acqs.Load()
	res.AcqPerSec = float64(res.Acquisitions) / dur.Seconds()
	res.WaitP50, res.WaitP99 = percentile(waits, 50), percentile(waits, 99)
	if a := res.Acquisitions; a > 0 {
		res.RoundTrips = float64(sent1-sent0) / float64(a)
		res.Commands = float64(st1.Commands-st0.Commands) / float64(a)
	}
	res.Violations = violations.Load()
	res.Errors = errs.Load()
	return res, nil
}

// releaseLocks releases ls one after the other, in reverse order, and
// returns the number of releases that failed.
func releaseLocks(ls []*dlock.Lock) int {
	failed := 0
	for i := len(ls) - 1; i >= 0; i-- {
		rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
		if ls[i].Release(rctx) != nil {
			failed++
		}
		rcancel()
	}
	return failed
}
