package monitoring

import (
	"bytes"
	"os"
	"testing"

	"github.com/skewgate/skewgate/deploy/monitoring/dashboard"
	"github.com/skewgate/skewgate/deploy/monitoring/rules"
)

const regenerate = "go generate ./deploy/monitoring"

func TestPrometheusRuleIsCurrent(t *testing.T) {
	want, err := rules.PrometheusRule(readFile(t, "alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	requireCurrent(t, "prometheusrule.yaml", want)
	// The monitoring overlay's copy: kustomize loads no file outside its tree.
	requireCurrent(t, "../kubernetes/monitoring/prometheusrule.yaml", want)
	// The Helm chart's, which its template labels (.Files loads no file
	// outside the chart).
	requireCurrent(t, "../helm/skewgate/files/prometheusrule.yaml", want)
}

func TestDashboardIsCurrent(t *testing.T) {
	want, err := dashboard.JSON()
	if err != nil {
		t.Fatal(err)
	}
	requireCurrent(t, "skewgate-dashboard.json", want)
}

// TestDashboardConfigMapIsCurrent: the ConfigMap the monitoring overlay
// ships carries the current dashboard, labelled for Grafana's sidecar.
func TestDashboardConfigMapIsCurrent(t *testing.T) {
	want, err := dashboard.ConfigMapYAML()
	if err != nil {
		t.Fatal(err)
	}
	requireCurrent(t, "../kubernetes/monitoring/dashboard-configmap.yaml", want)
	requireCurrent(t, "../helm/skewgate/files/dashboard-configmap.yaml", want)
}

// requireCurrent fails t when the committed file is not want, naming the
// first line that differs.
func requireCurrent(t *testing.T, name string, want []byte) {
	t.Helper()
	got := readFile(t, name)
	if bytes.Equal(got, want) {
		return
	}
	gotLines, wantLines := bytes.Split(got, []byte("\n")), bytes.Split(want, []byte("\n"))
	for i := 0; i < max(len(gotLines), len(wantLines)); i++ {
		g, w := line(gotLines, i), line(wantLines, i)
		if g != w {
			t.Fatalf("%s is not what its generator writes; run %s\nline %d is    %q\nand should be %q", name, regenerate, i+1, g, w)
		}
	}
}

func line(lines [][]byte, i int) string {
	if i >= len(lines) {
		return "(end of file)"
	}
	return string(lines[i])
}

func readFile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
