package history

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
)

// slot is one of the explorer's Lockers: closed at random moments and made
// again (a new generation), each time on new clients, with the same faults.
type slot struct {
	i       int
	proxies []*dlocktest.Proxy // ByAddr: the slot's own way to each server

	mu           sync.Mutex
	l            *dlock.Locker
	gen          int
	closing      bool
	closeClients func()
	keys         []any // the registry's keys of this generation
}

func (x *exploreRun) newSlot(i int) *slot {
	s := &slot{i: i}
	if !x.e.Family.ByAddr {
		return s
	}
	for _, a := range x.addrs {
		p, err := dlocktest.NewProxy(a)
		if err != nil {
			x.t.Fatal(err)
		}
		s.proxies = append(s.proxies, p)
	}
	return s
}

// locker returns the slot's Locker and its generation.
func (s *slot) locker() (*dlock.Locker, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.l, s.gen
}

// open makes the slot's Locker (a new generation).
func (x *exploreRun) open(s *slot) error {
	addrs := x.addrs
	if s.proxies != nil {
		addrs = nil
		for _, p := range s.proxies {
			addrs = append(addrs, p.Addr())
		}
	}
	var keys []any
	register := func(i int, key any) {
		if !x.e.Family.ByAddr {
			registry.Store(key, x.faults[s.i][i])
			keys = append(keys, key)
		}
	}
	l, closeClients, err := x.e.Family.New(addrs, x.top.Cluster, register)
	if err != nil {
		closeClients()
		for _, k := range keys {
			registry.Delete(k)
		}
		return err
	}
	s.mu.Lock()
	s.l, s.closeClients, s.keys = l, closeClients, keys
	s.gen++
	s.mu.Unlock()
	return nil
}

// closeSlot closes the slot's Locker, records the Close, and with reopen
// makes the next one. It returns false if the slot was being closed
// already.
func (x *exploreRun) closeSlot(s *slot, reopen bool) bool {
	s.mu.Lock()
	if s.closing || s.l == nil {
		s.mu.Unlock()
		return false
	}
	s.closing = true
	l, gen, closeClients, keys := s.l, s.gen, s.closeClients, s.keys
	s.mu.Unlock()
	start := now()
	err := l.Close()
	if x.sab.closeReleases() {
		x.releaseDetached(s.i, gen)
	}
	end := now()
	x.mu.Lock()
	x.closes = append(x.closes, closeRec{slot: s.i, gen: gen, start: start, end: end, ok: err == nil})
	x.mu.Unlock()
	closeClients()
	for _, k := range keys {
		registry.Delete(k)
	}
	if reopen {
		for x.open(s) != nil {
			time.Sleep(50 * time.Millisecond)
		}
	} else {
		s.mu.Lock()
		s.l = nil
		s.mu.Unlock()
	}
	s.mu.Lock()
	s.closing = false
	s.mu.Unlock()
	return true
}

// goRedisLocker is GoRedisFamily's New.
func goRedisLocker(addrs []string, cluster bool, register func(i int, key any)) (*dlock.Locker, func(), error) {
	if cluster {
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
		register(0, c)
		return dlock.New(c), func() { c.Close() }, nil
	}
	var cs []redis.UniversalClient
	for i, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a})
		register(i, c)
		cs = append(cs, c)
	}
	closeAll := func() {
		for _, c := range cs {
			c.Close()
		}
	}
	if len(cs) == 1 {
		return dlock.New(cs[0]), closeAll, nil
	}
	l, err := dlock.NewRedlock(cs)
	return l, closeAll, err
}

// faultLoop injects the faults that last a while, one every 50 to 300ms
// during storms (the proxies' at all times), chosen by the run's seed,
// until the run stops; and delivers the copies held back too long.
func (x *exploreRun) faultLoop() {
	rnd := rand.New(rand.NewPCG(x.seed, 999))
	phase := time.Now()
	for !x.stopped() {
		select {
		case <-x.stop:
			return
		case <-time.After(time.Duration(50+rnd.IntN(250)) * time.Millisecond):
		}
		x.sweep(false)
		if time.Now().After(phase) {
			// Storms of 1 to 3s, and calms as long.
			x.storm.Store(!x.storm.Load())
			phase = time.Now().Add(time.Duration(1000+rnd.IntN(2000)) * time.Millisecond)
		}
		s, n := rnd.IntN(slots+1), rnd.IntN(x.nodes())
		f := x.faults[s][n]
		k := rnd.IntN(10)
		if x.e.Family.ProxyFaults && k < 7 {
			x.proxyFault(rnd, s, n) // unseen: the client tries again
			continue
		}
		if !x.storm.Load() {
			continue
		}
		switch {
		case k < 3:
			f.mu.Lock()
			f.cutCalls++
			f.mu.Unlock()
			x.counted(fCutCall, s, n, 0)
		case k < 5:
			d := time.Duration(200+rnd.IntN(1300)) * time.Millisecond
			f.mu.Lock()
			f.cutUntil = time.Now().Add(d)
			f.mu.Unlock()
			x.counted(fCutWhile, s, n, d)
		case k < 7:
			d := time.Duration(300+rnd.IntN(1700)) * time.Millisecond
			f.mu.Lock()
			f.slowBy, f.slowTill = time.Duration(10+rnd.IntN(300))*time.Millisecond, time.Now().Add(d)
			f.mu.Unlock()
			x.counted(fSlow, s, n, d)
		default:
			x.serverFault(rnd)
		}
	}
}

// counted records a fault that the loop started, of one slot and node, for
// d.
func (x *exploreRun) counted(kind string, s, n int, d time.Duration) {
	t := now()
	x.mu.Lock()
	x.kinds[kind]++
	x.injected = append(x.injected, faultRec{kind: kind + " (begins)", slot: s, node: n, start: t, end: t + int64(d)})
	x.mu.Unlock()
}

// The server faults, which every Locker meets.
const (
	fFreeze  = "redis-server frozen"
	fRestart = "redis-server restarted empty after the longest TTL"
	fPReset  = "proxy: connections reset"
	fPHold   = "proxy: a copy held back, the client's connection reset (its retry)"
)

// serverFault freezes a server for 100 to 800ms, or, one time in fifteen
// (every time under the sabotage of the fence's clock floor) and not on a
// Cluster, restarts one empty after the longest TTL (the delayed restart: a
// fence counter lost).
func (x *exploreRun) serverFault(rnd *rand.Rand) {
	if x.top.Cluster {
		return
	}
	node := rnd.IntN(len(x.servers))
	srv := x.servers[node]
	start := now()
	kind := fFreeze
	if x.sab.restarts() || rnd.IntN(15) == 0 {
		kind = fRestart
		_ = srv.Kill()
		// The whole time, also when the run stops meanwhile: a server
		// restarted sooner would forget holds that are still valid.
		time.Sleep(maxTTL + 200*time.Millisecond)
		for srv.Restart() != nil {
			time.Sleep(50 * time.Millisecond)
		}
	} else {
		_ = srv.Freeze()
		time.Sleep(time.Duration(100+rnd.IntN(700)) * time.Millisecond)
		_ = srv.Thaw()
	}
	x.fault(faultRec{kind: kind, slot: -1, node: node, start: start, end: now()}, true)
}

// sleep sleeps d, or until the run stops.
func (x *exploreRun) sleep(d time.Duration) {
	select {
	case <-time.After(d):
	case <-x.stop:
	}
}

// proxyFault resets the connections of slot s's proxy to node n, or holds
// the next copy sent through it back (delivered 5 to 500ms later) and
// resets the client's connection, so that the client sends it again.
func (x *exploreRun) proxyFault(rnd *rand.Rand, s, n int) {
	p := x.slots[s].proxies[n]
	start := now()
	kind := fPReset
	if rnd.IntN(3) != 0 {
		kind = fPHold
		p.HoldNext(time.Duration(5+rnd.IntN(495)) * time.Millisecond)
	} else {
		p.Reset()
	}
	x.fault(faultRec{kind: kind, slot: s, node: n, start: start, end: now()}, true)
}

// sweep delivers the copies held back for more than 2s (no later command
// came to deliver them), or, with all, every copy held back, and waits for
// those.
func (x *exploreRun) sweep(all bool) {
	var wg sync.WaitGroup
	for _, fs := range x.faults {
		for _, f := range fs {
			for _, h := range f.overdue(all) {
				wg.Add(1)
				go func() {
					defer wg.Done()
					h.via.send(detached(context.Background()), h.cmds, h.multi)
				}()
			}
		}
	}
	if all {
		wg.Wait()
	}
}
