package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/internal/keys"
)

// A live slot migration under load: the slot of three keys moves back and
// forth between the two masters of a Cluster, key by key (a pause between
// MIGRATEs, so that scripts find the lock's keys half moved: TRYAGAIN, ASK),
// while Lockers acquire, renew, wait for and release those keys. Checked:
// no two holders (a section lasts from Acquire's return to the release, or
// to Lost), fences increasing in the order of the sections, and no error
// but the transient ones (never ErrMisconfigured).

// sameSlotKeys returns n lock keys whose slot is one (dlock's keys hash
// on the lock key, their hash tag), and the slot.
func sameSlotKeys(n int) ([]string, int) {
	by := map[int][]string{}
	for i := 0; ; i++ {
		k := fmt.Sprintf("mig%d", i)
		s := keys.Slot(k)
		by[s] = append(by[s], k)
		if len(by[s]) == n {
			return by[s], s
		}
	}
}

// redirects counts the redirections and refusals of a migrating slot that
// nodes answer.
type redirects struct{ tryAgain, ask, moved atomic.Int64 }

func (r *redirects) note(err error) {
	switch {
	case err == nil:
	case redis.HasErrorPrefix(err, "TRYAGAIN"):
		r.tryAgain.Add(1)
	case redis.HasErrorPrefix(err, "ASK"):
		r.ask.Add(1)
	case redis.HasErrorPrefix(err, "MOVED"):
		r.moved.Add(1)
	}
}

func (r *redirects) DialHook(next redis.DialHook) redis.DialHook { return next }
func (r *redirects) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		r.note(cmd.Err())
		return err
	}
}
func (r *redirects) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			r.note(c.Err())
		}
		return err
	}
}

// migrator moves slot between the masters, back and forth, until ctx ends.
type migrator struct {
	servers    [2]*dlocktest.Server
	ids        [2]string
	slot       int
	owner      int
	migrations int
	keys       int
	pause      time.Duration
}

func (m *migrator) run(ctx context.Context, t *testing.T) error {
	clients := [2]*redis.Client{m.servers[0].Client(), m.servers[1].Client()}
	defer clients[0].Close()
	defer clients[1].Close()
	bg := context.Background()
	for ctx.Err() == nil {
		src, dst := m.owner, 1-m.owner
		s, d := clients[src], clients[dst]
		if err := d.Do(bg, "CLUSTER", "SETSLOT", m.slot, "IMPORTING", m.ids[src]).Err(); err != nil {
			return err
		}
		if err := s.Do(bg, "CLUSTER", "SETSLOT", m.slot, "MIGRATING", m.ids[dst]).Err(); err != nil {
			return err
		}
		for {
			ks, err := s.ClusterGetKeysInSlot(bg, m.slot, 100).Result()
			if err != nil {
				return err
			}
			if len(ks) == 0 {
				break
			}
			for _, k := range ks { // one at a time: the lock's keys half moved between
				err := s.Migrate(bg, "127.0.0.1", fmt.Sprint(m.servers[dst].Port()), k, 0, 5*time.Second).Err()
				if err != nil && !errors.Is(err, redis.Nil) && !strings.Contains(err.Error(), "NOKEY") {
					return fmt.Errorf("MIGRATE %s: %w", k, err)
				}
				m.keys++
				time.Sleep(m.pause)
			}
		}
		if err := d.Do(bg, "CLUSTER", "SETSLOT", m.slot, "NODE", m.ids[dst]).Err(); err != nil {
			return err
		}
		if err := s.Do(bg, "CLUSTER", "SETSLOT", m.slot, "NODE", m.ids[dst]).Err(); err != nil {
			return err
		}
		m.owner = dst
		m.migrations++
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(rand.IntN(100)) * time.Millisecond):
		}
	}
	return nil
}

// migSection is one hold of a key.
type migSection struct {
	key        string
	fence      uint64
	start, end time.Time
	lost       bool
}

// TestSlotMigrationUnderLoad runs for 4s in make test, for
// DLOCK_MIGRATION_DURATION (default 1m) in make reliability.
func TestSlotMigrationUnderLoad(t *testing.T) {
	t.Parallel()
	d := 4 * time.Second
	if os.Getenv("DLOCK_RELIABILITY") == "1" {
		d = time.Minute
		if v := os.Getenv("DLOCK_MIGRATION_DURATION"); v != "" {
			var err error
			if d, err = time.ParseDuration(v); err != nil {
				t.Fatal(err)
			}
		}
	}
	cl := dlocktest.StartCluster(t, 2)
	keys, slot := sameSlotKeys(3)
	m := &migrator{servers: [2]*dlocktest.Server{cl.Servers[0], cl.Servers[1]}, slot: slot, owner: slot * 2 / 16384, pause: 2 * time.Millisecond}
	for i, s := range m.servers {
		c := s.Client()
		id, err := c.Do(ctx(t), "CLUSTER", "MYID").Text()
		c.Close()
		if err != nil {
			t.Fatal(err)
		}
		m.ids[i] = id
	}
	var redir redirects
	var lockers []*dlock.Locker
	for range 4 {
		cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
		cc.OnNewNode(func(c *redis.Client) { c.AddHook(&redir) })
		t.Cleanup(func() { cc.Close() })
		lockers = append(lockers, newLocker(t, cc))
	}
	runCtx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var (
		mu       sync.Mutex
		sections []migSection
		errs     = map[string]int{}
		samples  []string
		longest  time.Duration // the longest Acquire
		waited   time.Duration
		calls    int
	)
	var wg sync.WaitGroup
	for _, l := range lockers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for runCtx.Err() == nil {
				key := keys[rand.IntN(len(keys))]
				actx, acancel := context.WithTimeout(runCtx, 3*time.Second)
				began := time.Now()
				k, err := l.Acquire(actx, key, dlock.WithTTL(time.Second))
				took := time.Since(began)
				acancel()
				mu.Lock()
				longest = max(longest, took)
				waited += took
				calls++
				mu.Unlock()
				if err != nil {
					class := "other"
					for _, c := range []error{dlock.ErrNotAcquired, dlock.ErrUnavailable, dlock.ErrMisconfigured} {
						if errors.Is(err, c) {
							class = c.Error()
						}
					}
					mu.Lock()
					errs[class]++
					if class != dlock.ErrNotAcquired.Error() && len(samples) < 5 {
						samples = append(samples, err.Error())
					}
					mu.Unlock()
					continue
				}
				sec := migSection{key: key, fence: k.Fence(), start: time.Now()}
				hold := time.Duration(rand.IntN(30)) * time.Millisecond
				if rand.IntN(10) == 0 {
					hold = time.Second + time.Duration(rand.IntN(1000))*time.Millisecond // renewed across migrations
				}
				select {
				case <-time.After(hold):
				case <-k.Lost():
					sec.lost = true
				}
				sec.end = time.Now()
				rerr := k.Release(context.Background())
				mu.Lock()
				sections = append(sections, sec)
				if rerr != nil && !errors.Is(rerr, dlock.ErrNotHeld) {
					errs["release"]++
					if len(samples) < 8 {
						samples = append(samples, rerr.Error())
					}
				}
				mu.Unlock()
			}
		}()
	}
	var migErr error
	if os.Getenv("DLOCK_MIGRATION_OFF") == "" {
		migErr = m.run(runCtx, t)
	} else {
		<-runCtx.Done()
	}
	wg.Wait()
	if migErr != nil && !errors.Is(migErr, net.ErrClosed) {
		t.Fatalf("the migration: %v", migErr)
	}
	var overlaps, lower, lost int
	for _, key := range keys {
		var ss []migSection
		for _, s := range sections {
			if s.key == key {
				ss = append(ss, s)
			}
		}
		slices.SortFunc(ss, func(a, b migSection) int { return a.start.Compare(b.start) })
		for i := 1; i < len(ss); i++ {
			if ss[i].start.Before(ss[i-1].end) {
				overlaps++
			}
			if ss[i].fence <= ss[i-1].fence {
				lower++
			}
		}
	}
	for _, s := range sections {
		if s.lost {
			lost++
		}
	}
	t.Logf("%s: %d migrations of slot %d (%d keys moved one by one); %d sections (%d ended by Lost); failed acquisitions %v; nodes answered TRYAGAIN %d, ASK %d, MOVED %d; %d overlaps, %d fences not above the one before",
		d, m.migrations, slot, m.keys, len(sections), lost, errs, redir.tryAgain.Load(), redir.ask.Load(), redir.moved.Load(), overlaps, lower)
	t.Logf("%d Acquire calls (3s contexts): mean %s, longest %s", calls, (waited / time.Duration(max(calls, 1))).Round(time.Millisecond), longest.Round(time.Millisecond))
	for _, s := range samples {
		t.Log(s)
	}
	if overlaps != 0 || lower != 0 {
		t.Errorf("%d overlapping sections, %d fences not above the one before", overlaps, lower)
	}
	// Release tries a node again while the slot moves, within its node
	// timeout (200ms): none failed in the runs measured; a loaded machine
	// may still see one time out: up to 2% of the releases, rounded up (the
	// short run of make test holds about 25).
	if errs["release"] > (len(sections)+49)/50 {
		t.Errorf("%d releases of %d not confirmed: Release tries a node again while the slot moves", errs["release"], len(sections))
	}
	if errs[dlock.ErrMisconfigured.Error()] != 0 || errs["other"] != 0 {
		t.Errorf("acquisitions failed for good during a migration: %v %v", errs, samples)
	}
	if m.migrations < 2 || len(sections) == 0 {
		t.Errorf("%d migrations, %d sections: the test did not run", m.migrations, len(sections))
	}
}
