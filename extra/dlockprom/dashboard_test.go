package dlockprom_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v3"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlocktest"
	"github.com/dlock-dev/dlock/extra/dlockprom"
)

// exports is what a Collector exported after real acquisitions: the series
// that PromQL can select, with their label names, and the values seen of
// each label. A histogram is selected through its _bucket, _sum and _count
// series, never by its own name (that would be a native histogram).
type exports struct {
	families map[string]bool            // metric family names
	series   map[string]map[string]bool // series name → its label names
	labels   map[string]bool            // every label name of every series
	values   map[string]map[string]bool // label name → the values seen
}

// targetLabels are the labels that Prometheus adds to every scraped series.
var targetLabels = []string{"job", "instance"}

// valueLabels are the labels whose values the files name: a value that the
// Collector does not export would select nothing, silently.
var valueLabels = map[string]bool{"result": true, "reason": true, "outcome": true}

// TestDashboardAndAlerts checks dashboard.json and alerts.yaml against the
// metrics that a Collector exports after real acquisitions, so that they
// cannot drift from the code: every dlock_ series they name must be
// exported, every label they match on must be one of that series', every
// result, reason and outcome they name must have been seen, and every
// metric must have a panel.
func TestDashboardAndAlerts(t *testing.T) {
	ex := gatherExports(t)
	t.Run("dashboard.json", func(t *testing.T) { checkDashboard(t, ex) })
	t.Run("alerts.yaml", func(t *testing.T) { checkAlerts(t, ex) })
	t.Run("checker", func(t *testing.T) { checkChecker(t, ex) })
}

// counting is the hook of the Lockers of gatherExports: it passes events on
// to the Collector, and counts them by kind, so that the test waits for
// events without naming a metric (a metric renamed in the code must fail
// the checks of the files, not a wait).
type counting struct {
	*dlockprom.Collector
	mu sync.Mutex
	n  map[dlock.EventKind]int
}

func (h *counting) Event(ctx context.Context, e dlock.Event) {
	h.Collector.Event(ctx, e)
	h.mu.Lock()
	h.n[e.Kind]++
	h.mu.Unlock()
}

func (h *counting) count(kind dlock.EventKind) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n[kind]
}

// gatherExports runs acquisitions on real redis-servers that make every
// metric family and every label value of the Collector appear (a lost lock,
// a contended wait, a timeout, a suspect node...), with a key label, and
// returns what a registry gathers.
func gatherExports(t *testing.T) exports {
	t.Helper()
	m, reg := newCollector(t, dlockprom.WithKeyLabel(func(key string) string {
		kind, _, _ := strings.Cut(key, ":")
		return kind
	}))
	h := &counting{Collector: m, n: map[dlock.EventKind]int{}}
	ctx := ctxTimeout(t, 30*time.Second)
	l, s := single(t, h)

	// Acquired, busy, timeout; a waiter woken by the release.
	k, err := l.Acquire(ctx, "job:1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.TryAcquire(ctx, "job:1"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire of a held lock: %v, want ErrNotAcquired", err)
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := l.Acquire(short, "job:1"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire of a held lock until a deadline: %v, want DeadlineExceeded", err)
	}
	attempts := h.count(dlock.EventAttempt)
	got := make(chan error, 1)
	go func() {
		k2, err := l.Acquire(ctx, "job:1")
		if err == nil {
			err = k2.Release(ctx)
		}
		got <- err
	}()
	waitFor(t, "the waiter to find the lock busy", func() bool { return h.count(dlock.EventAttempt) > attempts })
	if err := k.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("waiter: %v", err)
	}

	// A lock lost: its key deleted under it.
	k, err = l.Acquire(ctx, "victim", dlock.WithTTL(300*time.Millisecond), dlock.WithAutoRenew(true))
	if err != nil {
		t.Fatal(err)
	}
	c := s.Client()
	defer c.Close()
	if n, err := c.Del(ctx, "dlock:{victim}").Result(); err != nil || n != 1 {
		t.Fatalf("DEL dlock:{victim}: %d, %v", n, err)
	}
	select {
	case <-k.Lost():
	case <-time.After(10 * time.Second):
		t.Fatal("Lost did not fire after the key was deleted")
	}
	waitFor(t, "the loss to be counted", func() bool { return h.count(dlock.EventLost) == 1 })

	// Node errors and a suspect node: one of three Redlock nodes frozen.
	servers := dlocktest.StartN(t, 3)
	rl, err := dlock.NewRedlock(dlocktest.Clients(t, servers...), dlock.WithNodeTimeout(100*time.Millisecond), dlock.WithHook(h))
	if err != nil {
		t.Fatal(err)
	}
	defer rl.Close()
	frozen := servers[2]
	if err := frozen.Freeze(); err != nil {
		t.Fatal(err)
	}
	defer frozen.Thaw() // before rl.Close
	k, err = rl.Acquire(ctx, "quorum")
	if err != nil {
		t.Fatalf("Acquire with 2 of 3 nodes: %v", err)
	}
	if err := k.Release(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the frozen node to be suspect", func() bool { return h.count(dlock.EventNodeSuspect) >= 1 })

	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	ex := exports{families: map[string]bool{}, series: map[string]map[string]bool{},
		labels: map[string]bool{}, values: map[string]map[string]bool{}}
	add := func(series string, labels []*dto.LabelPair, extra ...string) {
		if ex.series[series] == nil {
			ex.series[series] = map[string]bool{}
		}
		for _, lp := range labels {
			ex.series[series][lp.GetName()] = true
			ex.labels[lp.GetName()] = true
			if ex.values[lp.GetName()] == nil {
				ex.values[lp.GetName()] = map[string]bool{}
			}
			ex.values[lp.GetName()][lp.GetValue()] = true
		}
		for _, name := range extra {
			ex.series[series][name] = true
			ex.labels[name] = true
		}
	}
	for _, mf := range families {
		name := mf.GetName()
		ex.families[name] = true
		for _, m := range mf.GetMetric() {
			switch mf.GetType() {
			case dto.MetricType_HISTOGRAM:
				add(name+"_bucket", m.GetLabel(), "le")
				add(name+"_sum", m.GetLabel())
				add(name+"_count", m.GetLabel())
			case dto.MetricType_SUMMARY:
				add(name, m.GetLabel(), "quantile")
				add(name+"_sum", m.GetLabel())
				add(name+"_count", m.GetLabel())
			default:
				add(name, m.GetLabel())
			}
		}
	}

	// The run above must have made every family the Collector describes
	// appear (a histogram, or a node's metrics, only appear with their
	// first observation), or the checks below would miss its names.
	descs := make(chan *prometheus.Desc)
	go func() {
		m.Describe(descs)
		close(descs)
	}()
	fqName := regexp.MustCompile(`fqName: "([^"]+)"`)
	for d := range descs {
		match := fqName.FindStringSubmatch(d.String())
		if match == nil {
			t.Fatalf("no fqName in %v", d)
		}
		if !ex.families[match[1]] {
			t.Errorf("%s, which the Collector describes, was not gathered: make the test's acquisitions observe it", match[1])
		}
	}
	for _, label := range []string{"result", "reason", "outcome", "node", "key"} {
		if !ex.labels[label] {
			t.Errorf("no series with the label %q was gathered", label)
		}
	}
	return ex
}

var (
	metricRE   = regexp.MustCompile(`\bdlock_[a-zA-Z0-9_]+`)
	selectorRE = regexp.MustCompile(`\b(dlock_[a-zA-Z0-9_]+)\s*\{([^}]*)\}`)
	matcherRE  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"`)
	groupingRE = regexp.MustCompile(`\b(?:by|without)\s*\(([^)]*)\)`)
	valuesRE   = regexp.MustCompile(`^[a-z ]+(\|[a-z ]+)*$`)
	labelsRE   = regexp.MustCompile(`\$labels\.([a-zA-Z_][a-zA-Z0-9_]*)`)
)

// checkNames returns a problem for each dlock_ name in s that is not an
// exported series or, in prose (a description), a metric family.
func checkNames(ex exports, s string, prose bool) []string {
	var problems []string
	for _, name := range metricRE.FindAllString(s, -1) {
		if ex.series[name] == nil && !(prose && ex.families[name]) {
			what := "a series"
			if prose {
				what = "a metric"
			}
			problems = append(problems, fmt.Sprintf("%s is not %s the Collector exports (its series: %s)", name, what, strings.Join(sortedKeys(ex.series), ", ")))
		}
	}
	return problems
}

// checkQuery returns the problems of a PromQL query: no dlock_ metric,
// unbalanced brackets, a name that is not exported, a matcher on a label
// the series does not have or with a value never seen, a grouping by a
// label that no series has.
func checkQuery(ex exports, q string) []string {
	problems := checkNames(ex, q, false)
	if !metricRE.MatchString(q) {
		problems = append(problems, "no dlock_ metric")
	}
	if err := balanced(q); err != nil {
		problems = append(problems, err.Error())
	}
	for _, sel := range selectorRE.FindAllStringSubmatch(q, -1) {
		name, body := sel[1], sel[2]
		if rest := strings.Trim(matcherRE.ReplaceAllString(body, ""), " ,"); rest != "" {
			problems = append(problems, fmt.Sprintf("%s{%s}: cannot read the matchers %q", name, body, rest))
		}
		for _, mt := range matcherRE.FindAllStringSubmatch(body, -1) {
			label, op, val := mt[1], mt[2], mt[3]
			if labels := ex.series[name]; labels != nil && !labels[label] && !slices.Contains(targetLabels, label) {
				problems = append(problems, fmt.Sprintf("%s has no label %q (it has %s)", name, label, strings.Join(sortedKeys(labels), ", ")))
			}
			if !valueLabels[label] || strings.Contains(val, "$") {
				continue
			}
			vals := []string{val}
			if op == "=~" || op == "!~" {
				if !valuesRE.MatchString(val) {
					problems = append(problems, fmt.Sprintf("%s%s%q: not a list of values a|b|c", label, op, val))
					continue
				}
				vals = strings.Split(val, "|")
			}
			for _, v := range vals {
				if !ex.values[label][v] {
					problems = append(problems, fmt.Sprintf("%s=%q is not a value the Collector exports (%s)", label, v, strings.Join(sortedKeys(ex.values[label]), ", ")))
				}
			}
		}
	}
	for _, g := range groupingRE.FindAllStringSubmatch(q, -1) {
		for _, label := range strings.Split(g[1], ",") {
			label = strings.TrimSpace(label)
			if label != "" && !ex.labels[label] && !slices.Contains(targetLabels, label) {
				problems = append(problems, fmt.Sprintf("grouping by %q, a label that no series has", label))
			}
		}
	}
	return problems
}

// balanced reports brackets that do not match in q, outside strings.
func balanced(q string) error {
	var stack []rune
	pairs := map[rune]rune{')': '(', ']': '[', '}': '{'}
	for i := 0; i < len(q); i++ {
		switch ch := rune(q[i]); ch {
		case '"':
			for i++; i < len(q) && q[i] != '"'; i++ {
				if q[i] == '\\' {
					i++
				}
			}
			if i >= len(q) {
				return errors.New("a string is not closed")
			}
		case '(', '[', '{':
			stack = append(stack, ch)
		case ')', ']', '}':
			if len(stack) == 0 || stack[len(stack)-1] != pairs[ch] {
				return fmt.Errorf("unbalanced %q at %d", ch, i)
			}
			stack = stack[:len(stack)-1]
		}
	}
	if len(stack) > 0 {
		return fmt.Errorf("%d brackets not closed", len(stack))
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// family returns the metric family of a series name.
func family(ex exports, series string) string {
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if f := strings.TrimSuffix(series, suffix); f != series && ex.families[f] {
			return f
		}
	}
	return series
}

type datasourceRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type panel struct {
	ID          int            `json:"id"`
	Type        string         `json:"type"`
	Title       string         `json:"title"`
	Description string         `json:"description"`
	Datasource  *datasourceRef `json:"datasource"`
	GridPos     struct{ H, W, X, Y int }
	Targets     []struct {
		Expr       string         `json:"expr"`
		RefID      string         `json:"refId"`
		Datasource *datasourceRef `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's
}

type dashboard struct {
	UID           string `json:"uid"`
	Title         string `json:"title"`
	SchemaVersion int    `json:"schemaVersion"`
	Templating    struct {
		List []struct {
			Type       string          `json:"type"`
			Name       string          `json:"name"`
			Query      json.RawMessage `json:"query"`
			Definition string          `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

func checkDashboard(t *testing.T, ex exports) {
	data, err := os.ReadFile("dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("dashboard.json: %v", err)
	}
	if d.UID == "" || d.Title == "" || d.SchemaVersion < 36 {
		t.Errorf("dashboard.json: uid %q, title %q, schemaVersion %d: want a uid, a title and a schemaVersion of Grafana 9 or later", d.UID, d.Title, d.SchemaVersion)
	}

	// Every dlock_ name anywhere (queries, variables, descriptions); the
	// queries are checked further below.
	var all any
	if err := json.Unmarshal(data, &all); err != nil {
		t.Fatal(err)
	}
	walkStrings(all, func(s string) {
		for _, p := range checkNames(ex, s, true) {
			t.Errorf("dashboard.json: %q: %s", s, p)
		}
	})

	vars := map[string]bool{}
	for _, v := range d.Templating.List {
		vars[v.Name] = true
		if v.Type != "query" {
			continue
		}
		var q struct{ Query string }
		if err := json.Unmarshal(v.Query, &q); err != nil {
			if err := json.Unmarshal(v.Query, &q.Query); err != nil {
				t.Errorf("dashboard.json: variable %s: query %s", v.Name, v.Query)
			}
		}
		for _, s := range []string{q.Query, v.Definition} {
			for _, p := range checkQuery(ex, s) {
				t.Errorf("dashboard.json: variable %s: %q: %s", v.Name, s, p)
			}
		}
	}
	if !vars["datasource"] {
		t.Error("dashboard.json: no datasource variable")
	}

	used := map[string]bool{} // families with a panel
	ids := map[int]bool{}
	var walk func([]panel)
	walk = func(panels []panel) {
		for _, p := range panels {
			where := fmt.Sprintf("dashboard.json: panel %d %q", p.ID, p.Title)
			if ids[p.ID] {
				t.Errorf("%s: the id is not unique", where)
			}
			ids[p.ID] = true
			if g := p.GridPos; g.W < 1 || g.H < 1 || g.X < 0 || g.X+g.W > 24 {
				t.Errorf("%s: gridPos %+v out of the 24 columns", where, g)
			}
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			if p.Title == "" || p.Description == "" {
				t.Errorf("%s: a title and a description are wanted", where)
			}
			if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
				t.Errorf("%s: datasource %+v, want the uid ${datasource}", where, p.Datasource)
			}
			if len(p.Targets) == 0 {
				t.Errorf("%s: no query", where)
			}
			refIDs := map[string]bool{}
			for _, tg := range p.Targets {
				if tg.RefID == "" || refIDs[tg.RefID] {
					t.Errorf("%s: refId %q is empty or not unique", where, tg.RefID)
				}
				refIDs[tg.RefID] = true
				if tg.Datasource != nil && tg.Datasource.UID != "${datasource}" {
					t.Errorf("%s: query %s: datasource %+v, want the uid ${datasource}", where, tg.RefID, tg.Datasource)
				}
				for _, p := range checkQuery(ex, tg.Expr) {
					t.Errorf("%s: %q: %s", where, tg.Expr, p)
				}
				for _, name := range metricRE.FindAllString(tg.Expr, -1) {
					used[family(ex, name)] = true
				}
			}
		}
	}
	walk(d.Panels)
	for _, f := range sortedKeys(ex.families) {
		if !used[f] {
			t.Errorf("dashboard.json: no panel shows %s", f)
		}
	}
}

// walkStrings calls f with every string of a decoded JSON document.
func walkStrings(v any, f func(string)) {
	switch v := v.(type) {
	case string:
		f(v)
	case []any:
		for _, e := range v {
			walkStrings(e, f)
		}
	case map[string]any:
		for k, e := range v {
			f(k)
			walkStrings(e, f)
		}
	}
}

// ruleFile is the format of a Prometheus rule file (rulefmt), as far as
// alerting rules go.
type ruleFile struct {
	Groups []struct {
		Name     string `yaml:"name"`
		Interval string `yaml:"interval"`
		Rules    []struct {
			Alert         string            `yaml:"alert"`
			Record        string            `yaml:"record"`
			Expr          string            `yaml:"expr"`
			For           string            `yaml:"for"`
			KeepFiringFor string            `yaml:"keep_firing_for"`
			Labels        map[string]string `yaml:"labels"`
			Annotations   map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// wantAlerts are the alerts that issue 19 asks for: lost locks,
// misconfiguration, unavailable nodes, long waits.
var wantAlerts = []string{"DlockLockLost", "DlockMisconfigured", "DlockUnavailable", "DlockNodeSuspect", "DlockLongWaits"}

func checkAlerts(t *testing.T, ex exports) {
	data, err := os.ReadFile("alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true) // a misspelt key is an error, as in promtool
	var rf ruleFile
	if err := dec.Decode(&rf); err != nil {
		t.Fatalf("alerts.yaml: %v", err)
	}
	if len(rf.Groups) == 0 {
		t.Fatal("alerts.yaml: no groups")
	}
	groups, alerts := map[string]bool{}, map[string]bool{}
	for _, g := range rf.Groups {
		if g.Name == "" || groups[g.Name] {
			t.Errorf("alerts.yaml: group name %q is empty or not unique", g.Name)
		}
		groups[g.Name] = true
		if len(g.Rules) == 0 {
			t.Errorf("alerts.yaml: group %s has no rules", g.Name)
		}
		for i, r := range g.Rules {
			where := fmt.Sprintf("alerts.yaml: group %s, rule %d %s", g.Name, i, r.Alert)
			if r.Alert == "" || r.Record != "" {
				t.Errorf("%s: want an alerting rule (alert:, no record:)", where)
				continue
			}
			if alerts[r.Alert] || !regexp.MustCompile(`^Dlock[A-Z][A-Za-z]+$`).MatchString(r.Alert) {
				t.Errorf("%s: the name is not unique, or not DlockCamelCase", where)
			}
			alerts[r.Alert] = true
			for _, p := range checkQuery(ex, r.Expr) {
				t.Errorf("%s: %q: %s", where, r.Expr, p)
			}
			for _, d := range []string{r.For, r.KeepFiringFor} {
				if d == "" {
					continue
				}
				if _, err := model.ParseDuration(d); err != nil {
					t.Errorf("%s: %v", where, err)
				}
			}
			if s := r.Labels["severity"]; s != "critical" && s != "warning" && s != "info" {
				t.Errorf("%s: severity %q, want critical, warning or info", where, s)
			}
			if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("%s: a summary and a description are wanted", where)
			}
			// The labels that the annotations print must be the alert's:
			// those it groups by, or those of its series.
			kept := map[string]bool{}
			for _, g := range groupingRE.FindAllStringSubmatch(r.Expr, -1) {
				for _, label := range strings.Split(g[1], ",") {
					kept[strings.TrimSpace(label)] = true
				}
			}
			if len(kept) == 0 {
				for _, name := range metricRE.FindAllString(r.Expr, -1) {
					for label := range ex.series[name] {
						kept[label] = true
					}
				}
				for _, label := range targetLabels {
					kept[label] = true
				}
			}
			for k, a := range r.Annotations {
				for _, p := range checkNames(ex, a, true) {
					t.Errorf("%s: annotation %s: %s", where, k, p)
				}
				if strings.Count(a, "{{") != strings.Count(a, "}}") {
					t.Errorf("%s: annotation %s: unbalanced {{ }}", where, k)
				}
				for _, l := range labelsRE.FindAllStringSubmatch(a, -1) {
					if !kept[l[1]] {
						t.Errorf("%s: annotation %s prints $labels.%s, which the expression does not keep", where, k, l[1])
					}
				}
			}
		}
	}
	for _, a := range wantAlerts {
		if !alerts[a] {
			t.Errorf("alerts.yaml: no alert %s", a)
		}
	}
}

// checkChecker shows that checkQuery catches the drifts it is for.
func checkChecker(t *testing.T, ex exports) {
	good := `histogram_quantile(0.99, sum by (le) (rate(dlock_acquire_wait_seconds_bucket{job=~"$job", key=~"$key", result=~"acquired|timeout"}[5m])))`
	if p := checkQuery(ex, good); len(p) > 0 {
		t.Errorf("%s: %v, want no problem", good, p)
	}
	for _, bad := range []string{
		`sum(rate(dlock_acquisition_total[5m]))`,                            // misspelt
		`histogram_quantile(0.9, rate(dlock_acquire_wait_seconds[5m]))`,     // not a native histogram
		`rate(dlock_acquire_wait_seconds_bucket{result="acquire"}[5m])`,     // no such result
		`increase(dlock_locks_lost_total{reason="expiry"}[5m])`,             // no such reason
		`increase(dlock_locks_lost_total{reason=~"expired|gone"}[5m])`,      // no such reason
		`sum(dlock_node_suspect{key="job"})`,                                // node metrics have no key
		`sum by (holder) (dlock_acquisitions_in_progress)`,                  // no such label
		`sum(rate(dlock_acquisitions_total{result=acquired}[5m]))`,          // unquoted
		`sum(rate(dlock_acquisitions_total{result="acquired"}[5m])`,         // unbalanced
		`sum(rate(app_acquisitions_total[5m]))`,                             // no dlock_ metric
		`dlock_held_seconds_bucket{outcome="expired"}`,                      // no such outcome
		`sum(rate(dlock_acquire_attempts_total{result=~"acquired.*"}[5m]))`, // not a list of values
	} {
		if p := checkQuery(ex, bad); len(p) == 0 {
			t.Errorf("%s: no problem found", bad)
		} else {
			t.Logf("%s: %s", bad, p[0])
		}
	}
}
