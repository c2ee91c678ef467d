package monitoring

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/skewgate/skewgate/deploy/monitoring/dashboard"
	"github.com/skewgate/skewgate/lab/testenv"
	"go.yaml.in/yaml/v3"
)

// promtool returns the path of promtool (Debian package prometheus).
func promtool(t *testing.T) string {
	t.Helper()
	return testenv.RequireCommand(t, "promtool", "prometheus")
}

func runPromtool(t *testing.T, args ...string) {
	t.Helper()
	out, err := exec.Command(promtool(t), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func TestPromtoolCheckRules(t *testing.T) {
	runPromtool(t, "check", "rules", "alerts.yaml")
}

func TestPromtoolTestRules(t *testing.T) {
	runPromtool(t, "test", "rules", "alerts_test.yaml")
}

// TestDashboardQueriesParse has promtool parse every dashboard query, each
// as a recording rule, with Grafana's placeholders replaced by what Grafana
// would send. That they return data is for a test against a Prometheus that
// scrapes skewgate.
func TestDashboardQueriesParse(t *testing.T) {
	queries, err := dashboard.Queries()
	if err != nil {
		t.Fatal(err)
	}
	expand := strings.NewReplacer("$__rate_interval", "1m", "$cluster", ".*", "$node", ".*", "$server", ".*")
	type rule struct {
		Record string `yaml:"record"`
		Expr   string `yaml:"expr"`
	}
	var recorded []rule
	var index strings.Builder
	for i, q := range queries {
		name := fmt.Sprintf("dashboard_query_%d", i)
		recorded = append(recorded, rule{Record: name, Expr: expand.Replace(q.Expr)})
		fmt.Fprintf(&index, "%s: %s, query %s\n", name, q.Panel, q.RefID)
	}
	ruleFile, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": recorded}}})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "dashboard-queries.yaml")
	if err := os.WriteFile(path, ruleFile, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(promtool(t), "check", "rules", path).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules: %v\n%s\nthe rules are:\n%s", err, out, index.String())
	}
}
