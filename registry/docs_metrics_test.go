package registry_test

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v2"

	"github.com/reclaim-registry/reclaim/internal/metrics"
	_ "github.com/reclaim-registry/reclaim/registry" // registers every metric the registry exports
)

// promqlWords are the PromQL functions, keywords and label names the
// dashboard and the alert rules may use besides metric names.
var promqlWords = map[string]bool{
	"sum": true, "max": true, "min": true, "by": true, "on": true, "and": true, "or": true, "unless": true,
	"rate": true, "increase": true, "delta": true, "time": true, "histogram_quantile": true,
	"le": true, "status": true, "dry_run": true, "kind": true, "reason": true, "result": true,
	"op": true, "outcome": true, "cause": true, "instance": true, "caller": true, "repository": true,
}

var (
	promString = regexp.MustCompile(`"[^"]*"`)
	promRange  = regexp.MustCompile(`\[[^\]]*\]`)
	promIdent  = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*`)
)

// checkExpr fails unless every identifier of expr is a PromQL word or a
// metric the code registers (a histogram's _bucket, _sum and _count
// series count as the histogram), and at least one is a metric.
func checkExpr(t *testing.T, where, expr string, registered []string) {
	t.Helper()
	s := promRange.ReplaceAllString(promString.ReplaceAllString(expr, ""), "")
	found := 0
	for _, id := range promIdent.FindAllString(s, -1) {
		if promqlWords[id] {
			continue
		}
		base := id
		for _, suf := range []string{"_bucket", "_sum", "_count"} {
			if b, ok := strings.CutSuffix(id, suf); ok && slices.Contains(registered, b) {
				base = b
			}
		}
		if !slices.Contains(registered, base) {
			t.Errorf("%s: %q is not a metric the registry registers (expr %s)", where, id, expr)
			continue
		}
		found++
	}
	if found == 0 {
		t.Errorf("%s: no metric in %q", where, expr)
	}
}

// TestDashboardUsesRegisteredMetrics parses docs/grafana-dashboard.json and
// checks the metrics of every panel's queries.
func TestDashboardUsesRegisteredMetrics(t *testing.T) {
	registered := metrics.Names()
	if !slices.Contains(registered, "reclaim_gc_runs_total") || !slices.Contains(registered, "reclaim_redis_gaps_total") {
		t.Fatalf("metrics.Names() lacks the GC and tracker metrics: %v", registered)
	}
	b, err := os.ReadFile("../docs/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("grafana-dashboard.json: %v", err)
	}
	exprs := 0
	for _, p := range dash.Panels {
		if p.Type != "row" && len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			checkExpr(t, "dashboard panel "+p.Title, tg.Expr, registered)
			exprs++
		}
	}
	if exprs < 20 {
		t.Errorf("the dashboard has %d queries; expected the full set", exprs)
	}
}

// TestAlertsUseRegisteredMetrics parses docs/alerts.yml as Prometheus rule
// groups and checks every rule's expression.
func TestAlertsUseRegisteredMetrics(t *testing.T) {
	b, err := os.ReadFile("../docs/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Expr        string            `yaml:"expr"`
				For         string            `yaml:"for"`
				Labels      map[string]string `yaml:"labels"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.UnmarshalStrict(b, &rules); err != nil {
		t.Fatalf("alerts.yml: %v", err)
	}
	n := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			n++
			if r.Alert == "" || r.Labels["severity"] == "" || r.Annotations["summary"] == "" {
				t.Errorf("rule %q: needs alert, labels.severity and annotations.summary", r.Alert)
			}
			checkExpr(t, "alert "+r.Alert, r.Expr, metrics.Names())
		}
	}
	if n == 0 {
		t.Fatal("alerts.yml has no rules")
	}
}
