package dlockgocron

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-co-op/gocron/v2"

	"github.com/dlock-dev/dlock"
)

// ErrNotLeader is wrapped by the error of Elector.IsLeader when this
// instance is not the leader.
var ErrNotLeader = errors.New("dlockgocron: not the leader")

// Elector is a gocron.Elector backed by a dlock leader election: pass it to
// gocron.WithDistributedElector in every instance, and only the instance that
// leads runs jobs (all of them, on its own schedule). Make it with
// NewElector; stop it with Close. It is safe for concurrent use.
type Elector struct {
	l     *dlock.Locker
	key   string
	value string
	opts  []dlock.LockOption

	cancel context.CancelFunc
	done   chan struct{} // closed when the campaign goroutine has returned

	mu       sync.Mutex
	changed  chan struct{} // closed (and replaced) when lead changes
	lead     *dlock.Lock   // the leadership, nil while not leading
	err      error         // why not leading, if known (the last campaign error)
	closeErr error
}

var _ gocron.Elector = (*Elector)(nil)

// Campaign retries after an error that waiting does not fix
// (dlock.ErrMisconfigured: Redis refused the commands) start at
// retryMin and double up to retryMax.
const (
	retryMin = time.Second
	retryMax = 30 * time.Second
)

// NewElector starts campaigning in the background for the leadership of the
// dlock election named key, with value (this instance's name or address:
// what dlock.Locker.Leader and Observe report, and `dlock status` shows) as
// the leader's value, and returns at once. opts are dlock.Locker.Campaign's
// (dlock.WithTTL sets how long the others wait for a leader that died
// without resigning; default 30s).
//
// The campaign goes on until ctx ends or Close is called: a leader that
// loses its leadership (Redis did not confirm a renewal in time, or the
// lock was force-released) campaigns again, and candidates wait for the
// leader to resign or its lock to expire (dlock's Campaign: woken by the
// resignation, not polling). When the dlock.Locker is closed, the campaign
// ends and leadership passes on at once. It returns an error wrapping
// dlock.ErrInvalid for a nil l, an empty key or an empty value.
func NewElector(ctx context.Context, l *dlock.Locker, key, value string, opts ...dlock.LockOption) (*Elector, error) {
	switch {
	case l == nil:
		return nil, fmt.Errorf("%w: NewElector needs a *dlock.Locker", dlock.ErrInvalid)
	case key == "":
		return nil, fmt.Errorf("%w: NewElector needs an election key", dlock.ErrInvalid)
	case value == "":
		return nil, fmt.Errorf("%w: NewElector needs a value naming this instance", dlock.ErrInvalid)
	case len(value) > dlock.MaxMetadata:
		return nil, fmt.Errorf("%w: a value of %d bytes is longer than %d", dlock.ErrInvalid, len(value), dlock.MaxMetadata)
	}
	ctx, cancel := context.WithCancel(ctx)
	e := &Elector{l: l, key: key, value: value, opts: opts, cancel: cancel,
		done: make(chan struct{}), changed: make(chan struct{})}
	go e.run(ctx)
	return e, nil
}

// IsLeader returns nil while this instance leads the election, and an error
// wrapping ErrNotLeader otherwise (joined with the reason the campaign last
// failed, if any: dlock.ErrMisconfigured, dlock.ErrClosed, ...). It makes no
// call to Redis: it reads the leadership's Lost channel, so it fails from the
// moment leadership can no longer be guaranteed (before the leadership's
// lock can have expired in Redis, when another candidate could take over).
// gocron calls it before every run and skips the run on an error; a run
// that already started is not stopped (watch Leadership().Lost() in the job
// for that).
func (e *Elector) IsLeader(context.Context) error {
	e.mu.Lock()
	lead, cause := e.lead, e.err
	e.mu.Unlock()
	if lead != nil && !lost(lead) {
		return nil
	}
	err := fmt.Errorf("%w: election %q (candidate %q)", ErrNotLeader, e.key, e.value)
	if cause != nil {
		err = errors.Join(err, cause)
	}
	return err
}

// Leadership returns the dlock lock of the leadership while this instance
// leads, or nil: its Fence is the term (larger than every earlier term), and
// its Lost channel closes when leadership can no longer be guaranteed, for
// a job that should stop at once then.
func (e *Elector) Leadership() *dlock.Lock {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.lead != nil && !lost(e.lead) {
		return e.lead
	}
	return nil
}

// WaitLeader waits until this instance leads, and returns the leadership
// (as Leadership). It returns an error wrapping ctx's error when ctx ends
// first, and IsLeader's error when the campaign has ended (Close, the
// dlock.Locker closed, an error that ends it).
func (e *Elector) WaitLeader(ctx context.Context) (*dlock.Lock, error) {
	for {
		e.mu.Lock()
		lead, changed := e.lead, e.changed
		e.mu.Unlock()
		if lead != nil && !lost(lead) {
			return lead, nil
		}
		select {
		case <-changed:
		case <-e.done:
			return nil, e.IsLeader(ctx)
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: election %q: %w", ErrNotLeader, e.key, ctx.Err())
		}
	}
}

// Close stops campaigning and resigns the leadership if this instance leads
// (the next candidate takes over at once), and waits for the campaign to
// stop. IsLeader returns an error from then on. It returns the resignation's
// error if it could not be confirmed (dlock.ErrUnavailable: the leadership
// then passes on when its lock expires, after its TTL). It does not close
// the dlock.Locker. Close is idempotent.
func (e *Elector) Close() error {
	e.cancel()
	<-e.done
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.closeErr
}

func (e *Elector) run(ctx context.Context) {
	defer close(e.done)
	retry := retryMin
	for {
		lead, err := e.l.Campaign(ctx, e.key, e.value, e.opts...)
		if err != nil {
			// A bad argument ends it for good; a key held with another
			// limit (ErrMisconfigured, which matches ErrInvalid too) is
			// the fleet's disagreement, tried again below.
			if errors.Is(err, dlock.ErrClosed) || (errors.Is(err, dlock.ErrInvalid) && !errors.Is(err, dlock.ErrMisconfigured)) {
				e.setErr(err)
				return // for good
			}
			if ctx.Err() != nil {
				e.setErr(stopped(ctx))
				return
			}
			e.setErr(err)
			// dlock.ErrMisconfigured (returned at once): try again later.
			t := time.NewTimer(retry)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				e.setErr(stopped(ctx))
				return
			}
			retry = min(2*retry, retryMax)
			continue
		}
		retry = retryMin
		e.set(lead, nil)
		select {
		case <-lead.Lost():
			e.setErr(fmt.Errorf("%w: leadership of %q", dlock.ErrLockLost, e.key))
			// Let dlock clean up after the lost lock (owner-checked: it
			// cannot end another candidate's leadership).
			_ = lead.Release(context.Background())
		case <-ctx.Done():
			e.setErr(stopped(ctx))
			rerr := lead.Release(context.Background())
			if rerr != nil && !errors.Is(rerr, dlock.ErrNotHeld) {
				e.mu.Lock()
				e.closeErr = rerr
				e.mu.Unlock()
			}
			return
		}
	}
}

// stopped is the reason for not leading once the campaign's context ended.
func stopped(ctx context.Context) error {
	return fmt.Errorf("dlockgocron: campaign stopped: %w", context.Cause(ctx))
}

// setErr records why this instance is not leading, and forgets the
// leadership.
func (e *Elector) setErr(err error) { e.set(nil, err) }

// set records the leadership (nil: none) and why there is none.
func (e *Elector) set(lead *dlock.Lock, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.lead, e.err = lead, err
	close(e.changed)
	e.changed = make(chan struct{})
}
