package monitoring

import (
	"bytes"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/skewgate/skewgate/deploy/monitoring/dashboard"
	"github.com/skewgate/skewgate/docs"
	"go.yaml.in/yaml/v3"
)

type ruleFile struct {
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

type ruleTests struct {
	Tests []struct {
		Name          string `yaml:"name"`
		AlertRuleTest []struct {
			Alertname string `yaml:"alertname"`
			ExpAlerts []struct {
				ExpLabels map[string]string `yaml:"exp_labels"`
			} `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
	} `yaml:"tests"`
}

func decodeYAML(t *testing.T, name string, v any) {
	t.Helper()
	dec := yaml.NewDecoder(bytes.NewReader(readFile(t, name)))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

// runbookBase is where runbook_url points: docs/operations.md, one section
// per alert.
const runbookBase = "https://github.com/skewgate/skewgate/blob/main/docs/operations.md#"

// TestAlertConventions holds every alert to what operators rely on: one
// group, a for: so a blip does not page, a known severity, and the three
// annotations, the runbook at the alert's section of docs/operations.md.
func TestAlertConventions(t *testing.T) {
	var rf ruleFile
	decodeYAML(t, "alerts.yaml", &rf)
	if len(rf.Groups) != 1 || rf.Groups[0].Name != "skewgate" {
		t.Fatalf("want one group named skewgate, got %d groups", len(rf.Groups))
	}
	if len(rf.Groups[0].Rules) == 0 {
		t.Fatal("no rules")
	}
	severities := []string{"critical", "warning", "info"}
	runbooks := readFile(t, "../../docs/operations.md")
	for i, r := range rf.Groups[0].Rules {
		if r.Alert == "" {
			t.Errorf("rule %d: not an alert (a recording rule belongs elsewhere)", i)
			continue
		}
		if r.For == "" {
			t.Errorf("%s: no for:", r.Alert)
		}
		if !slices.Contains(severities, r.Labels["severity"]) {
			t.Errorf("%s: severity %q, want one of %v", r.Alert, r.Labels["severity"], severities)
		}
		for _, a := range []string{"summary", "description"} {
			if strings.TrimSpace(r.Annotations[a]) == "" {
				t.Errorf("%s: no %s annotation", r.Alert, a)
			}
		}
		if want := runbookBase + strings.ToLower(r.Alert); r.Annotations["runbook_url"] != want {
			t.Errorf("%s: runbook_url %q, want %q", r.Alert, r.Annotations["runbook_url"], want)
		}
		if !strings.Contains(string(runbooks), "\n### "+r.Alert+"\n") {
			t.Errorf("%s: no section ### %s in docs/operations.md, where its runbook_url points", r.Alert, r.Alert)
		}
		if _, ok := r.Annotations["runbook"]; ok {
			t.Errorf("%s: annotation runbook: kubernetes-mixin's name is runbook_url", r.Alert)
		}
	}
}

// TestEveryAlertIsUnitTested requires alerts_test.yaml to show every alert
// firing (each of its severities) and, somewhere, staying quiet.
func TestEveryAlertIsUnitTested(t *testing.T) {
	var rf ruleFile
	decodeYAML(t, "alerts.yaml", &rf)
	var tests ruleTests
	dec := yaml.NewDecoder(bytes.NewReader(readFile(t, "alerts_test.yaml")))
	if err := dec.Decode(&tests); err != nil {
		t.Fatalf("alerts_test.yaml: %v", err)
	}
	fired := map[string]bool{} // alertname/severity
	quiet := map[string]bool{} // alertname
	for _, tc := range tests.Tests {
		for _, at := range tc.AlertRuleTest {
			if len(at.ExpAlerts) == 0 {
				quiet[at.Alertname] = true
			}
			for _, a := range at.ExpAlerts {
				fired[at.Alertname+"/"+a.ExpLabels["severity"]] = true
			}
		}
	}
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if !fired[r.Alert+"/"+r.Labels["severity"]] {
				t.Errorf("%s (%s): no case in alerts_test.yaml where it fires", r.Alert, r.Labels["severity"])
			}
			if !quiet[r.Alert] {
				t.Errorf("%s: no case in alerts_test.yaml where it must not fire", r.Alert)
			}
		}
	}
}

// TestOnlyExportedMetrics fails on an alert or panel that reads a metric
// nobody exports: a panel on it shows nothing, and an alert on it never
// fires. skewgate's are the rows of docs/metrics.md, which the packages'
// TestMetricsDocumented hold to what they register; the others are the
// few external ones named here.
func TestOnlyExportedMetrics(t *testing.T) {
	rows, err := docs.Metrics()
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, r := range rows {
		documented[r.Name] = true
	}
	check := func(what, expr string) {
		for _, name := range metricNames(expr) {
			if !exported(name, documented) {
				t.Errorf("%s reads %s, which no row of docs/metrics.md (nor a known external metric) names: if skewgate registers it, add its row there — | `%s` | type | `label`, … | what it means | `package` |", what, name, strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_count"), "_sum"))
			}
		}
	}
	var rf ruleFile
	decodeYAML(t, "alerts.yaml", &rf)
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			check("alert "+r.Alert, r.Expr)
		}
	}
	queries, err := dashboard.Queries()
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range queries {
		check(fmt.Sprintf("panel %q query %s", q.Panel, q.RefID), q.Expr)
	}
}

// external are the metrics of others that alerts and panels may read:
// Prometheus' own up, kube-apiserver's, the kubelet's cAdvisor's.
// Go's and the process's collectors (go_*, process_*) are in every Go
// program, skewgate's included.
var external = map[string]bool{
	"up":                                 true,
	"apiserver_request_duration_seconds": true,
	"apiserver_request_total":            true,
	"container_spec_memory_limit_bytes":  true,
}

// exported says whether name, or the histogram it is a series of, is
// documented or external.
func exported(name string, documented map[string]bool) bool {
	if strings.HasPrefix(name, "go_") || strings.HasPrefix(name, "process_") {
		return true
	}
	for _, suffix := range []string{"", "_bucket", "_count", "_sum"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && (documented[base] || external[base]) {
			return true
		}
	}
	return false
}

// TestMetricNames: metricNames finds what an expression reads, and nothing
// else, or TestOnlyExportedMetrics checks nothing.
func TestMetricNames(t *testing.T) {
	for expr, want := range map[string][]string{
		`sum by (cluster, instance) (increase(skewgate_handback_connections_total{job="skewgate"}[5m])) > 0`:           {"skewgate_handback_connections_total"},
		`max by (cluster) (skewgate_skew_window) == 1 and on (cluster) up{job=~"kube-apiserver"} offset 1e3s`:          {"skewgate_skew_window", "up"},
		`histogram_quantile(0.99, sum by (le) (rate(apiserver_request_duration_seconds_bucket[5m]))) > 2.5e-1`:         {"apiserver_request_duration_seconds_bucket"},
		`label_replace(skewgate_members{a="b"} * 1000, "resource", "x", "", "") < on (instance) group_left skewgate_x`: {"skewgate_members", "skewgate_x"},
	} {
		if got := metricNames(expr); !slices.Equal(got, want) {
			t.Errorf("metricNames(%s) = %q, want %q", expr, got, want)
		}
	}
}

var (
	promString   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'`)
	promMatchers = regexp.MustCompile(`\{[^}]*\}|\[[^\]]*\]`)
	promLabels   = regexp.MustCompile(`\b(by|on|without|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promWord     = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*`)
	promKeywords = map[string]bool{}
)

func init() {
	for _, w := range strings.Fields(`sum min max avg count group stddev stdvar topk bottomk quantile count_values
		by on without ignoring group_left group_right and or unless bool offset
		rate irate increase delta idelta deriv predict_linear resets changes absent absent_over_time
		avg_over_time min_over_time max_over_time sum_over_time count_over_time last_over_time quantile_over_time present_over_time
		histogram_quantile label_replace label_join clamp clamp_min clamp_max abs ceil floor round sqrt exp ln log2 log10
		time timestamp vector scalar sort sort_desc day_of_week hour minute month year days_in_month e inf nan Inf NaN`) {
		promKeywords[w] = true
	}
}

// metricNames are the metric names a PromQL expression reads: what is left
// once strings, label matchers, ranges, grouping labels, functions and
// keywords are taken out.
func metricNames(expr string) []string {
	expr = promString.ReplaceAllString(expr, " ")
	expr = promLabels.ReplaceAllString(expr, " ")
	expr = promMatchers.ReplaceAllString(expr, " ")
	var out []string
	for _, loc := range promWord.FindAllStringIndex(expr, -1) {
		w := expr[loc[0]:loc[1]]
		if promKeywords[w] || loc[0] > 0 && (expr[loc[0]-1] >= '0' && expr[loc[0]-1] <= '9' || expr[loc[0]-1] == '.') {
			continue // a keyword or function, or a number's exponent or a duration's unit
		}
		if !slices.Contains(out, w) {
			out = append(out, w)
		}
	}
	return out
}

var grouping = regexp.MustCompile(`\b(by|on)\s*\(([^)]*)\)`)

// TestAlertsKeepCluster: every by (...) and on (...) in an alert keeps the
// cluster label, so one Prometheus watching several clusters neither sums
// their series together nor lets one cluster's window or members speak for
// another's. An aggregation without by (sum(x)) drops it too.
func TestAlertsKeepCluster(t *testing.T) {
	bare := regexp.MustCompile(`\b(sum|max|min|count|avg|group)\s*\(`)
	var rf ruleFile
	decodeYAML(t, "alerts.yaml", &rf)
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			for _, m := range grouping.FindAllStringSubmatch(r.Expr, -1) {
				labels := strings.Split(m[2], ",")
				for i := range labels {
					labels[i] = strings.TrimSpace(labels[i])
				}
				if !slices.Contains(labels, "cluster") {
					t.Errorf("%s: %s drops the cluster label", r.Alert, m[0])
				}
			}
			if loc := bare.FindStringIndex(r.Expr); loc != nil {
				t.Errorf("%s: %q aggregates without by (cluster, ...)", r.Alert, r.Expr[loc[0]:min(loc[1]+30, len(r.Expr))])
			}
		}
	}
}

// Issue 44: the README's alert table lacked two alerts an operator could
// be paged by. Every alert in alerts.yaml has its row, and every row an
// alert.
func TestREADMEListsEveryAlert(t *testing.T) {
	rules, err := os.ReadFile("alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	alerts := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s*- alert: (\S+)`).FindAllSubmatch(rules, -1) {
		alerts[string(m[1])] = true
	}
	rows := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `(Skewgate\\w+)` \\|").FindAllSubmatch(readme, -1) {
		rows[string(m[1])] = true
	}
	if len(alerts) == 0 || len(rows) == 0 {
		t.Fatalf("found %d alerts and %d README rows: the scan is broken", len(alerts), len(rows))
	}
	for a := range alerts {
		if !rows[a] {
			t.Errorf("alert %s has no row in README.md's table", a)
		}
	}
	for r := range rows {
		if !alerts[r] {
			t.Errorf("README.md's table lists %s, which alerts.yaml does not define", r)
		}
	}
}
