package monitoring

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/skewgate/skewgate/deploy/monitoring/dashboard"
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

var metricName = regexp.MustCompile(`\bskewgate_[a-z0-9_]+`)

// TestOnlyExportedMetrics fails on an alert or panel that names a skewgate
// metric the code does not export: a panel on it shows nothing, and an
// alert on it never fires.
func TestOnlyExportedMetrics(t *testing.T) {
	exported := exportedMetrics(t, "../..", "agent", "proxy", "cmd")
	known := func(name string) bool {
		for _, suffix := range []string{"", "_bucket", "_count", "_sum"} {
			if base, ok := strings.CutSuffix(name, suffix); ok && exported[base] {
				return true
			}
		}
		return false
	}
	var rf ruleFile
	decodeYAML(t, "alerts.yaml", &rf)
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			for _, name := range metricName.FindAllString(r.Expr, -1) {
				if !known(name) {
					t.Errorf("alert %s: skewgate exports no metric %s", r.Alert, name)
				}
			}
		}
	}
	queries, err := dashboard.Queries()
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range queries {
		for _, name := range metricName.FindAllString(q.Expr, -1) {
			if !known(name) {
				t.Errorf("panel %q query %s: skewgate exports no metric %s", q.Panel, q.RefID, name)
			}
		}
	}
}

// exportedMetrics collects the skewgate_* names quoted in the non-test Go
// files under root's dirs: every metric is declared by a string literal.
func exportedMetrics(t *testing.T, root string, dirs ...string) map[string]bool {
	t.Helper()
	literal := regexp.MustCompile(`"(skewgate_[a-z0-9_]+)"`)
	names := map[string]bool{}
	for _, dir := range dirs {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			src, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, m := range literal.FindAllSubmatch(src, -1) {
				names[string(m[1])] = true
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if !names["skewgate_requests_total"] || !names["skewgate_build_info"] {
		t.Fatalf("found no skewgate_requests_total or skewgate_build_info under %s: the scan is broken", root)
	}
	return names
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
