package dlock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/internal/keys"
	"github.com/dlock-dev/dlock/internal/node"
	"github.com/dlock-dev/dlock/internal/quorum"
	"github.com/dlock-dev/dlock/internal/script"
)

// ListTimeout bounds a List call whose ctx has no earlier deadline.
const ListTimeout = time.Minute

// listScanCount is SCAN's COUNT: the slots of the keyspace one SCAN looks
// at. Each SCAN holds the server for about as long as it takes to look at
// them (a few hundred µs for 1,000), so that other clients' commands are
// never kept waiting longer, whatever the keyspace's size; a keyspace of a
// million keys is scanned in about a thousand commands.
const listScanCount = 1000

// listBatch is the number of locks whose status one pipeline reads (12
// commands each: see readNodeStatus).
const listBatch = 64

// List reports every lock under the Locker's prefix whose name matches
// pattern, in the order of their names: for each, its Status as
// Locker.Status reports it (its shape, holders with their metadata, fences
// and time left, waiters in queue order, a pending release request, and
// each node's view: on a Redlock, Status.Held says whether a quorum holds
// it, and Nodes which nodes do). A lock is listed while a node holds it or
// has waiters registered for it; a key that is free everywhere is not.
//
// pattern is a Redis glob over the lock's name (* any text, ? one
// character, [abc], [a-z] and [^a] a set, \ quotes the next character);
// "" lists every lock. The names are found with SCAN (COUNT 1000, MATCH
// the prefix and pattern), never KEYS, on every node, and on every master
// of a Cluster, so that the server is never held for long whatever the
// size of its keyspace; the locks' statuses are then read in pipelines.
// The whole call is bounded by ctx, and by ListTimeout if ctx has no
// earlier deadline; each command by the node timeout (a SCAN of a
// Cluster's master by the client's read timeout, where the client does not
// apply context deadlines, but List returns at its own). A Cluster client
// must be go-redis' (*redis.ClusterClient): another family's is refused
// with an error wrapping ErrMisconfigured.
//
// It returns an error wrapping ErrInvalid for an invalid Locker option.
// When a node could not be scanned whole (down, too slow, a user without
// the permission to SCAN, or the time limit reached), List returns the
// locks it found with an error wrapping ErrUnavailable (ErrMisconfigured
// when the failure is permanent, such as a refused SCAN) and each such
// node's failure as *NodeError, and ctx's error once ctx ended: the list
// may then miss locks that only those nodes hold. Like Status, it is a
// snapshot for people and monitoring, and proves nothing about ownership.
func (l *Locker) List(ctx context.Context, pattern string) ([]Status, error) {
	if l.cfg.err != nil {
		return nil, l.cfg.err
	}
	if pattern == "" {
		pattern = "*"
	}
	ctx, cancel := context.WithTimeout(ctx, ListTimeout)
	defer cancel()
	names, scanErrs := l.scanNames(ctx, pattern)
	locks, readErrs := l.readLocks(ctx, names)
	o := l.newOutcome(pattern, len(l.nodes))
	for i := range l.nodes {
		if err := cmp.Or(scanErrs[i], readErrs[i]); err != nil {
			o.failed(l, i, err)
		} else {
			o.confirmed()
		}
	}
	if class := o.class(ErrNotAcquired); class != nil {
		what := fmt.Sprintf("list %q: %d of %d nodes scanned whole", pattern, o.ok, len(l.nodes))
		var first []error
		if ctx.Err() != nil {
			first = append(first, ctx.Err())
		}
		return locks, l.nameCauses(o.wrap(class, what, first...), DefaultTTL)
	}
	return locks, nil
}

// scanNames returns the names under the prefix that match pattern of the
// locks whose key or waiting set is on a node (sorted), and each node's
// failure to be scanned whole (nil: it was).
func (l *Locker) scanNames(ctx context.Context, pattern string) ([]string, []error) {
	match := scanMatch(l.cfg.prefix, pattern)
	type scanned struct {
		keys []string
		err  error
	}
	done := make([]chan scanned, len(l.nodes))
	for i := range l.nodes {
		done[i] = make(chan scanned, 1)
		go func() {
			ks, err := l.scanNode(ctx, i, match)
			done[i] <- scanned{ks, err}
		}()
	}
	seen := map[string]bool{}
	errs := make([]error, len(l.nodes))
	for i := range l.nodes {
		var r scanned
		select {
		case r = <-done[i]:
		case <-ctx.Done():
			// A node still scanning counts as failed; what it found so far is
			// not used. (Its goroutine ends with its command's timeout.)
			r.err = ctx.Err()
		}
		for _, k := range r.keys {
			if name, ok := lockName(l.cfg.prefix, k); ok && globMatch(pattern, name) {
				seen[name] = true
			}
		}
		errs[i] = r.err
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	slices.Sort(names)
	return names, errs
}

// errClusterScan is the refusal of a Cluster client whose masters dlock
// cannot reach one by one (another client family's than go-redis).
var errClusterScan = errors.New("dlock: List scans every master of a Cluster through go-redis' *redis.ClusterClient; this Cluster client's masters cannot be scanned one by one")

// scanNode returns the keys of node i that match match, scanned whole, or
// those found until its error.
func (l *Locker) scanNode(ctx context.Context, i int, match string) ([]string, error) {
	n := l.nodes[i]
	timeout := l.nodeTimeout(DefaultTTL)
	if !n.Cluster {
		return scanAll(ctx, match, func(ctx context.Context, args []any) (any, error) {
			v, err, answered, _ := quorum.Call(ctx, n, timeout, func(ctx context.Context, c node.Conn) (any, error) {
				return c.Do(ctx, args...)
			}, nil)
			if !answered && err == nil {
				err = context.DeadlineExceeded
			}
			return v, err
		})
	}
	cc, ok := n.Client.(*redis.ClusterClient)
	if !ok {
		return nil, errClusterScan
	}
	var mu sync.Mutex
	var found []string
	err := cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		c := quorum.NewConn(m)
		ks, err := scanAll(ctx, match, func(ctx context.Context, args []any) (any, error) {
			ctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			return c.Do(ctx, args...)
		})
		mu.Lock()
		found = append(found, ks...)
		mu.Unlock()
		if err != nil {
			return fmt.Errorf("master %s: %w", m.Options().Addr, err)
		}
		return nil
	})
	return found, err
}

// scanAll runs SCAN with MATCH match until the cursor comes back to 0,
// each command through do, and returns the keys found, with the first
// failure (ctx's end included).
func scanAll(ctx context.Context, match string, do func(ctx context.Context, args []any) (any, error)) ([]string, error) {
	var found []string
	cursor := "0"
	for {
		if err := ctx.Err(); err != nil {
			return found, err
		}
		v, err := do(ctx, []any{"scan", cursor, "match", match, "count", listScanCount})
		if err != nil {
			return found, err
		}
		arr, _ := v.([]any)
		if len(arr) != 2 {
			return found, script.BadReply("unexpected SCAN reply %v", v)
		}
		ks, _ := arr[1].([]any)
		for _, k := range ks {
			found = append(found, node.String(k))
		}
		if cursor = node.String(arr[0]); cursor == "0" || cursor == "" {
			return found, nil
		}
	}
}

// readLocks reads the status of each lock named in names, listBatch at a
// time in one pipeline per node, and returns those that are listed (see
// listed), and each node's first failure (nil: every read answered).
func (l *Locker) readLocks(ctx context.Context, names []string) ([]Status, []error) {
	var locks []Status
	failed := make([]error, len(l.nodes))
	timeout := l.nodeTimeout(DefaultTTL)
	for len(names) > 0 && ctx.Err() == nil {
		batch := names[:min(listBatch, len(names))]
		names = names[len(batch):]
		nms := make([]*keys.Names, len(batch))
		for j, name := range batch {
			nms[j] = keys.Make(l.cfg.prefix, name)
		}
		results, missing := quorum.Fanout(ctx, l.nodes, timeout,
			quorum.RunFunc[[]NodeStatus](func(ctx context.Context, _ int, c node.Conn) ([]NodeStatus, error) {
				return readNodeStatuses(ctx, c, nms)
			}),
			func([]quorum.Result[[]NodeStatus], int) bool { return false }, nil)
		answers := make([][]NodeStatus, len(l.nodes)) // per node, per lock
		errs := make([]error, len(l.nodes))
		for _, r := range results {
			answers[r.Node], errs[r.Node] = r.Val, r.Err
		}
		for _, m := range missing {
			errs[m.Node] = m.Err
		}
		for j, name := range batch {
			st := Status{Key: name, Nodes: make([]NodeStatus, len(l.nodes))}
			for i := range l.nodes {
				ns := NodeStatus{Err: errs[i]}
				if errs[i] == nil {
					ns = answers[i][j]
				}
				ns.Addr = l.nodes[i].Addr
				st.Nodes[i] = ns
			}
			l.merge(&st)
			if listed(st) {
				locks = append(locks, st)
			}
		}
		for i, err := range errs {
			failed[i] = cmp.Or(failed[i], err)
		}
	}
	if len(names) > 0 { // ctx ended with locks left to read
		for i := range failed {
			failed[i] = cmp.Or(failed[i], ctx.Err())
		}
	}
	return locks, failed
}

// listed reports whether List lists the lock of st: a node holds it or has
// waiters for it, or no node could be asked.
func listed(st Status) bool {
	answered := false
	for _, ns := range st.Nodes {
		if ns.Err == nil {
			answered = true
			if ns.Held || ns.Reserved || ns.Waiters > 0 {
				return true
			}
		}
	}
	return !answered
}

// scanMatch is SCAN's MATCH for the keys of the locks under prefix whose
// names match pattern: prefix{PATTERN}* (the lock, its waiting set and the
// rest: lockName picks), or prefix{* where a name of the pattern may begin
// with '}' or NUL (their keys have the tag keys.TagEscape+NAME) or the
// pattern with a special character. The prefix is quoted.
func scanMatch(prefix, pattern string) string {
	var b strings.Builder
	for i := 0; i < len(prefix); i++ {
		if strings.IndexByte(`*?[]\`, prefix[i]) >= 0 {
			b.WriteByte('\\')
		}
		b.WriteByte(prefix[i])
	}
	b.WriteByte('{')
	if strings.IndexByte("*?[\\}"+keys.TagEscape, pattern[0]) >= 0 {
		b.WriteByte('*')
	} else {
		b.WriteString(pattern)
		b.WriteString("}*")
	}
	return b.String()
}

// lockName returns the name of the lock whose key (prefix{NAME}) or waiting
// set (prefix{NAME}:waiters) key is, and whether it is one: the names of
// the lock's keys (keys.Make) must give key back.
func lockName(prefix, key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, prefix+"{")
	if !ok {
		return "", false
	}
	var tag string
	switch {
	case strings.HasSuffix(rest, "}"):
		tag = rest[:len(rest)-1]
	case strings.HasSuffix(rest, "}:waiters"):
		tag = rest[:len(rest)-len("}:waiters")]
	default:
		return "", false
	}
	name := strings.TrimPrefix(tag, keys.TagEscape)
	if name == "" {
		return "", false
	}
	if nm := keys.Make(prefix, name); nm.Lock() != key && nm.Waiters() != key {
		return "", false
	}
	return name, true
}

// globMatch reports whether s matches the glob pattern p as Redis matches
// a key against SCAN's MATCH (stringmatchlen: '*', '?', sets with ranges
// and '^', '\' quoting), byte by byte. A '*' is tried as short as it can
// be first, going back to the last '*' on a mismatch: linear in
// len(p)·len(s) at worst, never exponential.
func globMatch(p, s string) bool {
	pi, si := 0, 0
	star, starS := -1, 0
	for si < len(s) || pi < len(p) {
		if pi < len(p) {
			if p[pi] == '*' {
				star, starS = pi, si
				pi++
				continue
			}
			if si < len(s) {
				if next, ok := globOne(p, pi, s[si]); ok {
					pi, si = next, si+1
					continue
				}
			}
		}
		if star < 0 || starS >= len(s) {
			return false
		}
		starS++
		pi, si = star+1, starS
	}
	return true
}

// globOne matches c against the element of p at pi (not '*'): it returns
// the index after the element, and whether c matches it.
func globOne(p string, pi int, c byte) (int, bool) {
	switch p[pi] {
	case '?':
		return pi + 1, true
	case '\\':
		if pi+1 < len(p) {
			return pi + 2, p[pi+1] == c
		}
		return pi + 1, c == '\\'
	case '[':
		return globSet(p, pi+1, c)
	}
	return pi + 1, p[pi] == c
}

// globSet matches c against the set that begins at p[pi] (after its '['):
// it returns the index after the set's ']' (or the end of p, for a set
// that does not end), and whether c is in it.
func globSet(p string, pi int, c byte) (int, bool) {
	not := pi < len(p) && p[pi] == '^'
	if not {
		pi++
	}
	match := false
	for pi < len(p) && p[pi] != ']' {
		switch {
		case p[pi] == '\\' && pi+1 < len(p):
			pi++
			match = match || p[pi] == c
		case pi+2 < len(p) && p[pi+1] == '-':
			lo, hi := p[pi], p[pi+2]
			if lo > hi {
				lo, hi = hi, lo
			}
			match = match || (c >= lo && c <= hi)
			pi += 2
		default:
			match = match || p[pi] == c
		}
		pi++
	}
	if pi < len(p) {
		pi++ // the ']'
	}
	return pi, match != not
}
