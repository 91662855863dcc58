package bench

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock"
)

// DlockLibrary is dlock with its defaults: New on one address, NewRedlock on
// several; Acquire waits (woken by the release), Release.
func DlockLibrary() Library {
	return Library{
		Name:    "dlock",
		GoRedis: true,
		Note:    "defaults (TTL 30s, auto-renew); Acquire waits for the release notification",
		New: func(addrs []string, sent *Counter) (Process, error) {
			p := &dlockProcess{}
			for _, a := range addrs {
				p.clients = append(p.clients, goRedisClient(a, sent))
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

type dlockProcess struct {
	clients []redis.UniversalClient
	locker  *dlock.Locker
}

func (p *dlockProcess) Lock(ctx context.Context, key string) (Held, error) {
	l, err := p.locker.Acquire(ctx, key)
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
	for _, c := range p.clients {
		_ = c.Close()
	}
}
