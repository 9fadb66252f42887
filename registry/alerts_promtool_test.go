package registry_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	gometrics "github.com/docker/go-metrics"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v2"
)

// The alert rules of docs/alerts.yml are tested against what the registry
// really exports. Each scene (alerts_scenes_test.go) starts an in-process
// registry, scrapes GET /metrics from the handler `serve` mounts on its
// debug server (docker/go-metrics, Prometheus' default registry, where
// every reclaim_* metric lives), scripts a condition (a run that fails,
// Redis that evicts, ...) and scrapes again. The scrapes become promtool
// input series, one sample a minute, and promtool must see the alerts the
// scene names fire, with the labels the scene names; on the healthy scene
// no rule may fire. The one rule no scene scripts is fed hand-written
// series (handWritten says which and why).
//
// A script takes seconds where the rules wait minutes or hours (`for:`,
// ranges), so after its last scrape a scene goes on for as long as the
// rule needs by repeating its last step every minute: a counter that grew
// by n grows by n again each minute (the failure recurs, as `for` waits
// for), a gauge keeps its last change, and what did not change stays. A
// unix timestamp (*_timestamp_seconds) is placed on promtool's clock by
// its age at the scrape, and it keeps pace with the clock if it moved in
// the last step (the reclaimer ticks) or stays where it was (stalled).
//
// A labelled counter appears on /metrics at its first increment; the
// scrape before a scene lacks it, and it is written as 0 there. Prometheus
// would see such a series only from that first sample, so increase() over
// a new series misses its first increment: that is how Prometheus treats
// counters, and what this test does not model.

// scrape is one GET /metrics: every reclaim_* counter and gauge series by
// its selector (`name{label="value",...}`, labels sorted) and the wall
// time it was taken.
type scrape struct {
	at     time.Time
	values map[string]float64
	kinds  map[string]dto.MetricType // by metric name
}

// scraper reads /metrics from the registry's metrics handler.
type scraper struct{ url string }

func newScraper(t *testing.T) *scraper {
	srv := httptest.NewServer(gometrics.Handler())
	t.Cleanup(srv.Close)
	return &scraper{url: srv.URL + "/metrics"}
}

func (s *scraper) scrape(t *testing.T) scrape {
	t.Helper()
	resp, err := http.Get(s.url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	at := time.Now()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	sc := scrape{at: at, values: map[string]float64{}, kinds: map[string]dto.MetricType{}}
	for name, f := range fams {
		if !strings.HasPrefix(name, "reclaim_") {
			continue
		}
		sc.kinds[name] = f.GetType()
		for _, m := range f.GetMetric() {
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				sc.values[selector(name, m.GetLabel())] = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				sc.values[selector(name, m.GetLabel())] = m.GetGauge().GetValue()
			}
		}
	}
	return sc
}

func selector(name string, labels []*dto.LabelPair) string {
	if len(labels) == 0 {
		return name
	}
	parts := make([]string, 0, len(labels))
	for _, l := range labels {
		parts = append(parts, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
	}
	sort.Strings(parts)
	return name + "{" + strings.Join(parts, ",") + "}"
}

// value reads one series of sc (0 when absent), for the scripts' waits.
func (sc scrape) value(sel string) float64 { return sc.values[sel] }

// metricOf is the metric name of a selector.
func metricOf(sel string) string { name, _, _ := strings.Cut(sel, "{"); return name }

// scene is a scripted condition: its scrapes, one a minute, and the
// alerts it must make fire, each with the labels of every firing
// instance besides alertname and severity. A scene with no alerts is
// healthy: no rule may fire on it.
type alertScene struct {
	name      string
	scrapes   []scrape
	fire      map[string][]map[string]string
	synthetic bool // written by hand, not scraped (handWritten)
}

// inputSeries turns the scrapes into promtool input series that go on for
// hold more minutes after the last scrape (see the top of this file).
func (sc alertScene) inputSeries(hold int) []promSeries {
	k := len(sc.scrapes) - 1
	keys := map[string]bool{}
	for _, s := range sc.scrapes {
		for sel := range s.values {
			keys[sel] = true
		}
	}
	var out []promSeries
	for sel := range keys {
		name := metricOf(sel)
		vals := make([]string, 0, k+1)
		var prev, last float64
		var prevOK, lastOK bool
		for i, s := range sc.scrapes {
			v, ok := s.values[sel]
			if !ok && s.kinds[name] != dto.MetricType_GAUGE {
				v, ok = 0, true // a counter not incremented yet
			}
			if ok && strings.HasSuffix(name, "_timestamp_seconds") && v != 0 {
				age := float64(s.at.UnixMilli())/1000 - v
				v = float64(60*i) - age
			}
			prev, prevOK, last, lastOK = last, lastOK, v, ok
			if i == k {
				break
			}
			vals = append(vals, promValue(v, ok))
		}
		step := 0.0
		if prevOK && lastOK && k > 0 {
			step = last - prev
			if strings.HasSuffix(name, "_timestamp_seconds") {
				step = 0
				if sc.scrapes[k].values[sel] != sc.scrapes[k-1].values[sel] {
					step = 60 // it moved: it keeps moving with the clock
				}
			}
		}
		switch {
		case !lastOK:
			vals = append(vals, fmt.Sprintf("_x%d", hold))
		case step < 0:
			vals = append(vals, fmt.Sprintf("%s-%sx%d", num(last), num(-step), hold))
		default:
			vals = append(vals, fmt.Sprintf("%s+%sx%d", num(last), num(step), hold))
		}
		out = append(out, promSeries{Series: sel, Values: strings.Join(vals, " ")})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Series < out[j].Series })
	return out
}

func promValue(v float64, ok bool) string {
	if !ok {
		return "_"
	}
	return num(v)
}

func num(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

type promRule struct {
	Alert  string            `yaml:"alert"`
	Expr   string            `yaml:"expr"`
	For    string            `yaml:"for,omitempty"`
	Labels map[string]string `yaml:"labels,omitempty"`
}

type (
	promSeries struct {
		Series string `yaml:"series"`
		Values string `yaml:"values"`
	}
	promExpAlert struct {
		ExpLabels map[string]string `yaml:"exp_labels"`
	}
	promAlertTest struct {
		EvalTime  string         `yaml:"eval_time"`
		Alertname string         `yaml:"alertname"`
		ExpAlerts []promExpAlert `yaml:"exp_alerts"`
	}
	promTestCase struct {
		Name       string          `yaml:"name"`
		Interval   string          `yaml:"interval"`
		Input      []promSeries    `yaml:"input_series"`
		AlertTests []promAlertTest `yaml:"alert_rule_test"`
	}
)

// promtoolPath finds promtool: $RECLAIM_PROMTOOL (set by .ci/run: then it
// must be there), else on PATH; the test skips without it.
func promtoolPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("RECLAIM_PROMTOOL"); p != "" {
		return p
	}
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not found (Debian's prometheus package; .ci/run installs it); set RECLAIM_PROMTOOL")
	}
	return p
}

// alertRules reads docs/alerts.yml's rules (without annotations:
// promtool compares rendered annotations too; `promtool check rules`
// checks those).
func alertRules(t *testing.T) []promRule {
	t.Helper()
	raw, err := os.ReadFile("../docs/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Groups []struct {
			Rules []promRule `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(raw, &file); err != nil {
		t.Fatal(err)
	}
	var rules []promRule
	for _, g := range file.Groups {
		rules = append(rules, g.Rules...)
	}
	if len(rules) == 0 {
		t.Fatal("docs/alerts.yml has no rules")
	}
	return rules
}

// minutes parses a rule's `for` ("30m", "3h", "1d") in minutes.
func minutes(t *testing.T, d string) int {
	t.Helper()
	if d == "" {
		return 0
	}
	if n, ok := strings.CutSuffix(d, "d"); ok {
		days, err := strconv.Atoi(n)
		if err != nil {
			t.Fatalf("for %q: %v", d, err)
		}
		return days * 24 * 60
	}
	dur, err := time.ParseDuration(d)
	if err != nil {
		t.Fatalf("for %q: %v", d, err)
	}
	return int(dur.Minutes())
}

// testCase is promtool's test of scene: the alerts it names fire, with
// their labels, once each rule's `for` has passed after the last scrape;
// a healthy scene checks every rule and expects none.
func (sc alertScene) testCase(t *testing.T, rules []promRule) promTestCase {
	t.Helper()
	k := len(sc.scrapes) - 1
	longest := 0
	var tests []promAlertTest
	for _, r := range rules {
		want, named := sc.fire[r.Alert]
		if !named && len(sc.fire) > 0 {
			continue
		}
		// An hour past `for`: a condition that takes time to build
		// (an hour without a tick) has built up.
		at := k + minutes(t, r.For) + 65
		longest = max(longest, at)
		at2 := promAlertTest{EvalTime: fmt.Sprintf("%dm", at), Alertname: r.Alert}
		for _, labels := range want {
			l := map[string]string{"severity": r.Labels["severity"]}
			for n, v := range labels {
				l[n] = v
			}
			at2.ExpAlerts = append(at2.ExpAlerts, promExpAlert{l})
		}
		tests = append(tests, at2)
	}
	return promTestCase{Name: sc.name, Interval: "1m", Input: sc.inputSeries(longest - k + 5), AlertTests: tests}
}

// TestAlertRulesFire runs every scene of alerts_scenes_test.go, then
// docs/alerts.yml through promtool: the file passes `promtool check
// rules`, every rule fires in a scene with the labels the scene expects,
// and none fires on the healthy scene. Every metric, label and label value
// a rule names must have appeared in a scrape (checkRuleSeries).
func TestAlertRulesFire(t *testing.T) {
	promtool := promtoolPath(t)
	if out, err := exec.Command(promtool, "check", "rules", "../docs/alerts.yml").CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules docs/alerts.yml: %v\n%s", err, out)
	}
	rules := alertRules(t)
	scenes := runScenes(t)
	fired := map[string]bool{}
	var cases []promTestCase
	for _, sc := range scenes {
		for a := range sc.fire {
			fired[a] = true
		}
		cases = append(cases, sc.testCase(t, rules))
	}
	for _, r := range rules {
		if !fired[r.Alert] {
			t.Errorf("alert %s: no scene makes it fire: add one to alerts_scenes_test.go", r.Alert)
		}
	}
	checkRuleSeries(t, rules, scenes)
	runPromtool(t, promtool, rules, cases)
}

// runPromtool writes the rules and the test cases and runs `promtool test
// rules` on them.
func runPromtool(t *testing.T, promtool string, rules []promRule, cases []promTestCase) {
	t.Helper()
	dir := t.TempDir()
	write := func(name string, v any) {
		b, err := yaml.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("rules.yml", map[string]any{"groups": []any{map[string]any{"name": "reclaim", "rules": rules}}})
	write("test.yml", map[string]any{"rule_files": []string{"rules.yml"}, "evaluation_interval": "1m", "tests": cases})
	cmd := exec.Command(promtool, "test", "rules", "test.yml")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool test rules (input in %s): %v\n%s", dir, err, out)
	}
}

var (
	ruleSelector = regexp.MustCompile(`\b(reclaim_[A-Za-z0-9_]+)\s*(\{[^}]*\})?`)
	ruleMatcher  = regexp.MustCompile(`([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"([^"]*)"`)
	ruleGrouping = regexp.MustCompile(`\b(?:by|on)\s*\(([^)]*)\)`)
	plainAlts    = regexp.MustCompile(`^[A-Za-z0-9_]+(\|[A-Za-z0-9_]+)*$`)
)

// checkRuleSeries fails a rule that names what no scrape of the scenes
// showed: a metric, a label of that metric, a value an = or =~ matcher
// asks for (each alternative of a =~), or a label it groups by (by, on).
func checkRuleSeries(t *testing.T, rules []promRule, scenes []alertScene) {
	t.Helper()
	seen := map[string]map[string]map[string]bool{} // metric -> label -> values
	for _, sc := range scenes {
		if sc.synthetic {
			continue
		}
		for _, s := range sc.scrapes {
			for sel := range s.values {
				name := metricOf(sel)
				if seen[name] == nil {
					seen[name] = map[string]map[string]bool{}
				}
				for _, m := range ruleMatcher.FindAllStringSubmatch(sel, -1) {
					if seen[name][m[1]] == nil {
						seen[name][m[1]] = map[string]bool{}
					}
					seen[name][m[1]][m[3]] = true
				}
			}
		}
	}
	for _, r := range rules {
		labels := map[string]bool{}
		for _, sm := range ruleSelector.FindAllStringSubmatch(r.Expr, -1) {
			name, ls := sm[1], seen[sm[1]]
			if ls == nil {
				t.Errorf("alert %s: metric %s was in no scrape", r.Alert, name)
				continue
			}
			for l := range ls {
				labels[l] = true
			}
			for _, m := range ruleMatcher.FindAllStringSubmatch(sm[2], -1) {
				checkMatcher(t, r.Alert, name, m[1], m[2], m[3], ls)
			}
		}
		for _, g := range ruleGrouping.FindAllStringSubmatch(r.Expr, -1) {
			for _, l := range strings.Split(g[1], ",") {
				if l = strings.TrimSpace(l); l != "" && !labels[l] {
					t.Errorf("alert %s: groups by %q, which no scraped series of its metrics has", r.Alert, l)
				}
			}
		}
	}
}

func checkMatcher(t *testing.T, alert, metric, label, op, value string, seen map[string]map[string]bool) {
	t.Helper()
	values, ok := seen[label]
	if !ok {
		t.Errorf("alert %s: %s has no label %q in any scrape", alert, metric, label)
		return
	}
	var want []string
	switch {
	case op == "=":
		want = []string{value}
	case op == "=~" && plainAlts.MatchString(value):
		want = strings.Split(value, "|")
	}
	for _, v := range want {
		if !values[v] {
			have := make([]string, 0, len(values))
			for h := range values {
				have = append(have, h)
			}
			slices.Sort(have)
			t.Errorf("alert %s: %s{%s=%q} was in no scrape (seen: %v)", alert, metric, label, v, have)
		}
	}
}
