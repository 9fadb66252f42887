package registry_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v2"
)

// alertCase is one alert's firing condition as series the registry
// exports: promtool feeds them (one sample a minute) to the rule and
// expects the alert firing at At with Labels besides severity.
type alertCase struct {
	Series map[string]string // series selector -> promtool values notation
	At     string            // eval time
	Labels map[string]string // labels of the firing alert, besides alertname and severity
}

// alertCases makes every rule of docs/alerts.yml fire. The label values
// are ones the code emits (run status, abort and loss reasons, refusal
// reasons, reverse-link ops): a rule matching a value nothing emits, like
// the old status="interrupted", cannot pass here.
var alertCases = map[string]alertCase{
	"ReclaimGCRunFailed": {Series: map[string]string{
		`reclaim_gc_runs_total{status="failed",dry_run="false"}`: "0x10 1x60"}, At: "30m"},
	"ReclaimGCRunInterrupted": {Series: map[string]string{
		`reclaim_gc_runs_interrupted_total`: "0x10 1x60"}, At: "30m"},
	"ReclaimRetentionAborted": {Series: map[string]string{
		`reclaim_retention_aborts_total{reason="inuse_stale"}`: "0x10 1x60"}, At: "30m",
		Labels: map[string]string{"reason": "inuse_stale"}},
	"ReclaimRedisUntrusted": {Series: map[string]string{
		`reclaim_reclaimer_ticks_total{result="redis_evicts"}`: "0+1x120"}, At: "70m",
		Labels: map[string]string{"result": "redis_evicts"}},
	"ReclaimRecordingGap": {Series: map[string]string{
		`reclaim_redis_epoch_moves_total{reason="restart"}`: "0x10 1x30"}, At: "15m",
		Labels: map[string]string{"reason": "restart"}},
	"ReclaimRedisEvicts": {Series: map[string]string{
		`reclaim_redis_evicts{instance="a"}`: "1x60"}, At: "15m"},
	"ReclaimRedisErrors": {Series: map[string]string{
		`reclaim_redis_errors_total{op="touch"}`: "0+1x60"}, At: "20m"},
	"ReclaimWritesRefused": {Series: map[string]string{
		`reclaim_access_refusals_total{reason="redis"}`: "0+60x60"}, At: "20m",
		Labels: map[string]string{"reason": "redis"}},
	"ReclaimReviewQueueGrowing": {Series: map[string]string{
		`reclaim_reclaimer_queue_due{instance="a"}`: "1000+10x900"}, At: "13h"},
	"ReclaimLinkDBIncomplete": {Series: map[string]string{
		`reclaim_gc_kept_total{kind="blob",reason="linkdb_incomplete"}`: "0x10 5x60"}, At: "30m"},
	"ReclaimReclaimerOff": {Series: map[string]string{
		`reclaim_reclaimer_enabled{instance="a"}`: "0x1500"}, At: "1450m"},
	"ReclaimReclaimerStalled": {Series: map[string]string{
		`reclaim_reclaimer_last_tick_timestamp_seconds{instance="a"}`: "0x200",
		`reclaim_reclaimer_enabled{instance="a"}`:                     "1x200"}, At: "90m",
		Labels: map[string]string{"instance": "a"}},
	"ReclaimReclaimerRefusing": {Series: map[string]string{
		`reclaim_reclaimer_ticks_total{result="redis_recording_too_short"}`: "0+1x300"}, At: "240m",
		Labels: map[string]string{"result": "redis_recording_too_short"}},
	"ReclaimGCRefusing": {Series: map[string]string{
		`reclaim_gc_aborts_total{reason="linkdb_incomplete"}`: "0+1x300"}, At: "240m",
		Labels: map[string]string{"reason": "linkdb_incomplete"}},
	"ReclaimReverseLinkErrors": {Series: map[string]string{
		`reclaim_linkdb_reverse_link_ops_total{op="write",result="error"}`: "0x10 1x30"}, At: "20m",
		Labels: map[string]string{"op": "write"}},
}

// healthy is a registry with nothing wrong for a day: runs finish, the
// reclaimer is on and ticks every minute, its queue is empty, Redis keeps
// its records. No rule may fire on it.
var healthy = map[string]string{
	`reclaim_gc_runs_total{status="done",dry_run="false"}`:          "0+1x1500",
	`reclaim_gc_runs_interrupted_total`:                             "0x1500",
	`reclaim_reclaimer_ticks_total{result="ok"}`:                    "0+1x1500",
	`reclaim_reclaimer_enabled{instance="a"}`:                       "1x1500",
	`reclaim_reclaimer_last_tick_timestamp_seconds{instance="a"}`:   "0+60x1500", // = time()
	`reclaim_reclaimer_queue_due{instance="a"}`:                     "0x1500",
	`reclaim_redis_evicts{instance="a"}`:                            "0x1500",
	`reclaim_redis_errors_total{op="touch"}`:                        "0x1500",
	`reclaim_access_refusals_total{reason="fenced"}`:                "0x1500",
	`reclaim_linkdb_reverse_link_ops_total{op="write",result="ok"}`: "0+5x1500",
}

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

// TestAlertRulesFire runs docs/alerts.yml through promtool: the file
// passes `promtool check rules` (syntax, templates), every rule fires on
// its alertCase, and none fires on a healthy registry. promtool compares
// rendered annotations too; those are checked by check rules, so the unit
// test runs on a copy without them and judges expressions, `for` and labels.
func TestAlertRulesFire(t *testing.T) {
	promtool := os.Getenv("RECLAIM_PROMTOOL") // set by .ci/run: then it must be there
	if promtool == "" {
		p, err := exec.LookPath("promtool")
		if err != nil {
			t.Skip("promtool not found (Debian's prometheus package; .ci/run installs it)")
		}
		promtool = p
	}
	if out, err := exec.Command(promtool, "check", "rules", "../docs/alerts.yml").CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules docs/alerts.yml: %v\n%s", err, out)
	}
	rules, cases := promtoolCases(t)
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
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
}

// promtoolCases reads docs/alerts.yml: its rules without annotations, and
// one test case per rule (it fires on its alertCase) plus the healthy day
// (nothing fires).
func promtoolCases(t *testing.T) ([]promRule, []promTestCase) {
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
	seriesOf := func(m map[string]string) []promSeries {
		var out []promSeries
		for s, v := range m {
			out = append(out, promSeries{s, v})
		}
		return out
	}
	var rules []promRule
	var cases []promTestCase
	quiet := promTestCase{Name: "healthy", Interval: "1m", Input: seriesOf(healthy)}
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			rules = append(rules, r)
			c, ok := alertCases[r.Alert]
			if !ok {
				t.Errorf("alert %s has no case in alertCases: add the series that make it fire", r.Alert)
				continue
			}
			want := map[string]string{"severity": r.Labels["severity"]}
			for k, v := range c.Labels {
				want[k] = v
			}
			cases = append(cases, promTestCase{Name: r.Alert, Interval: "1m", Input: seriesOf(c.Series),
				AlertTests: []promAlertTest{{EvalTime: c.At, Alertname: r.Alert, ExpAlerts: []promExpAlert{{want}}}}})
			quiet.AlertTests = append(quiet.AlertTests, promAlertTest{EvalTime: "1450m", Alertname: r.Alert})
		}
	}
	for name := range alertCases {
		if !strings.Contains(string(raw), "alert: "+name+"\n") {
			t.Errorf("alertCases has %s, which docs/alerts.yml does not define", name)
		}
	}
	return rules, append(cases, quiet)
}
