package bench

import (
	"context"
	"errors"

	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidislock"
)

// RueidislockLibrary is rueidis' rueidislock with its defaults, as its README
// shows: NewLocker, WithContext (waits, woken by client-side-caching
// invalidations), and the returned cancel function to release. It is not
// built on go-redis. Its defaults use KeyMajority 2: three keys per lock.
func RueidislockLibrary() Library { return rueidislockLibrary(false) }

// RueidislockOneKeyLibrary is rueidislock in its README's configuration
// for one Redis instance: KeyMajority 1 (one key per lock) and
// NoLoopTracking (issue 35's target row for dlock on rueidis).
func RueidislockOneKeyLibrary() Library { return rueidislockLibrary(true) }

func rueidislockLibrary(oneKey bool) Library {
	name, note := "rueidislock", "defaults (KeyMajority 2: 3 keys per lock, validity 5s); WithContext waits for invalidations"
	var majority int32
	if oneKey {
		name, note, majority = "rueidislock-1key", "its README's one-instance configuration (KeyMajority 1, NoLoopTracking); WithContext waits for invalidations", 1
	}
	return Library{
		Name: name,
		Note: note,
		New: func(addrs []string, sent *Counter) (Process, error) {
			if len(addrs) != 1 {
				return nil, errors.New(name + ": one Redis only")
			}
			l, err := rueidislock.NewLocker(rueidislock.LockerOption{
				KeyMajority:    majority,
				NoLoopTracking: oneKey,
				ClientOption:   rueidis.ClientOption{InitAddress: addrs},
				ClientBuilder: func(o rueidis.ClientOption) (rueidis.Client, error) {
					c, err := rueidis.NewClient(o)
					if err != nil {
						return nil, err
					}
					return countingRueidis{Client: c, sent: sent}, nil
				},
			})
			if err != nil {
				return nil, err
			}
			return rueidisProcess{l}, nil
		},
	}
}

// countingRueidis counts the commands a rueidis client sends. rueidislock
// sends everything through Do (scripts included), and waits on invalidation
// pushes, which are not commands.
type countingRueidis struct {
	rueidis.Client
	sent *Counter
}

func (c countingRueidis) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	c.sent.Add(1)
	return c.Client.Do(ctx, cmd)
}

func (c countingRueidis) DoMulti(ctx context.Context, cmds ...rueidis.Completed) []rueidis.RedisResult {
	c.sent.Add(len(cmds))
	return c.Client.DoMulti(ctx, cmds...)
}

type rueidisProcess struct{ l rueidislock.Locker }

func (p rueidisProcess) Lock(ctx context.Context, key string) (Held, error) {
	_, cancel, err := p.l.WithContext(ctx, key)
	if err != nil {
		return nil, err
	}
	return rueidisHeld(cancel), nil
}

// rueidisHeld releases by calling the cancel function, which deletes the keys
// and waits for that to finish.
type rueidisHeld context.CancelFunc

func (h rueidisHeld) Unlock(context.Context) error {
	h()
	return nil
}

func (p rueidisProcess) Close() error {
	p.l.Close()
	return nil
}
