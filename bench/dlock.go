package bench

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/extra/dlockrueidis"
)

// DlockLibrary is dlock with its defaults: New on one address, NewRedlock on
// several; Acquire waits (woken by the release), Release. With ctxTimeout the
// go-redis clients are built with ContextTimeoutEnabled: dlock then calls
// them directly instead of through WithTimeout copies (one Redis).
func DlockLibrary(ctxTimeout bool) Library {
	name, note := "dlock", "defaults (TTL 30s, auto-renew), default go-redis clients; Acquire waits for the release notification"
	if ctxTimeout {
		name, note = "dlock-ctx", "as dlock, with go-redis clients built with ContextTimeoutEnabled: true"
	}
	return Library{
		Name:    name,
		GoRedis: true,
		Dlock:   true,
		Note:    note,
		New: func(addrs []string, sent *Counter) (Process, error) {
			p := &dlockProcess{}
			for _, a := range addrs {
				p.clients = append(p.clients, newGoRedisClient(&redis.Options{Addr: a, ContextTimeoutEnabled: ctxTimeout}, sent))
			}
			if len(addrs) == 1 {
				p.locker = dlock.New(p.clients[0])
				return p, nil
			}
			l, err := dlock.NewRedlock(p.clients)
			if err != nil {
				p.closeClients()
				return nil, err
			}
			p.locker = l
			return p, nil
		},
	}
}

// DlockRueidisLibrary is dlock with its defaults on rueidis clients
// (extra/dlockrueidis, default rueidis options: auto-pipelining), side by
// side with rueidislock (issue 35).
func DlockRueidisLibrary() Library {
	return Library{
		Name:  "dlock-rueidis",
		Dlock: true,
		Note:  "defaults (TTL 30s, auto-renew) on default rueidis clients (extra/dlockrueidis); Acquire waits for the release notification",
		New: func(addrs []string, sent *Counter) (Process, error) {
			var cs []rueidis.Client
			closeAll := func() {
				for _, c := range cs {
					c.Close()
				}
			}
			for _, a := range addrs {
				c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{a}})
				if err != nil {
					closeAll()
					return nil, err
				}
				cs = append(cs, countingRueidis{Client: c, sent: sent})
			}
			p := &dlockProcess{close: closeAll}
			if len(cs) == 1 {
				p.locker = dlockrueidis.New(cs[0])
				return p, nil
			}
			l, err := dlockrueidis.NewRedlock(cs)
			if err != nil {
				closeAll()
				return nil, err
			}
			p.locker = l
			return p, nil
		},
	}
}

// DlockSemaphoreLibrary is dlock-ctx with WithLimit(limit): a semaphore,
// which none of the peers offers.
func DlockSemaphoreLibrary(limit int) Library {
	lib := DlockLibrary(true)
	lib.Name = fmt.Sprintf("dlock-ctx, limit %d", limit)
	lib.Note = fmt.Sprintf("as dlock-ctx, with WithLimit(%d)", limit)
	lib.Limit = limit
	newProcess := lib.New
	lib.New = func(addrs []string, sent *Counter) (Process, error) {
		p, err := newProcess(addrs, sent)
		if err != nil {
			return nil, err
		}
		dp := p.(*dlockProcess)
		dp.opts = []dlock.LockOption{dlock.WithLimit(limit)}
		return dp, nil
	}
	return lib
}

// DlockTryLibrary is lib, one of dlock's configurations, with TryAcquire
// in place of Acquire (its name gets "-try"): the uncontended targets'
// other call, measured against the floor only (it does not wait).
func DlockTryLibrary(lib Library) Library {
	lib.Name += "-try"
	lib.Note += "; TryAcquire instead of Acquire"
	newProcess := lib.New
	lib.New = func(addrs []string, sent *Counter) (Process, error) {
		p, err := newProcess(addrs, sent)
		if err != nil {
			return nil, err
		}
		p.(*dlockProcess).try = true
		return p, nil
	}
	return lib
}

type dlockProcess struct {
	clients []redis.UniversalClient
	close   func() // another family's clients
	locker  *dlock.Locker
	opts    []dlock.LockOption
	try     bool // TryAcquire instead of Acquire
}

func (p *dlockProcess) Lock(ctx context.Context, key string) (Held, error) {
	acquire := p.locker.Acquire
	if p.try {
		acquire = p.locker.TryAcquire
	}
	l, err := acquire(ctx, key, p.opts...)
	if err != nil {
		return nil, err
	}
	return dlockHeld{l}, nil
}

type dlockHeld struct{ l *dlock.Lock }

func (h dlockHeld) Unlock(ctx context.Context) error { return h.l.Release(ctx) }

func (p *dlockProcess) Close() error {
	err := p.locker.Close()
	p.closeClients()
	return err
}

func (p *dlockProcess) closeClients() {
	if p.close != nil {
		p.close()
	}
	for _, c := range p.clients {
		_ = c.Close()
	}
}
