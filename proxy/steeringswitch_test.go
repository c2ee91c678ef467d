package proxy

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// rollback-grace-until takes one instant every node reads alike; anything
// else is no override, never a held breath on a typo.
func TestGraceOverrideKey(t *testing.T) {
	at := time.Date(2026, 3, 1, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		name  string
		cm    *corev1.ConfigMap
		want  time.Time
		fails bool
	}{
		{"no ConfigMap", nil, time.Time{}, false},
		{"no key", &corev1.ConfigMap{Data: map[string]string{SwitchKey: "auto"}}, time.Time{}, false},
		{"empty: removed", &corev1.ConfigMap{Data: map[string]string{GraceKey: ""}}, time.Time{}, false},
		{"UTC", &corev1.ConfigMap{Data: map[string]string{GraceKey: "2026-03-01T03:04:05Z"}}, at, false},
		{"offset", &corev1.ConfigMap{Data: map[string]string{GraceKey: "2026-03-01T04:04:05+01:00"}}, at, false},
		{"a verb", &corev1.ConfigMap{Data: map[string]string{GraceKey: "end"}}, time.Time{}, true},
		{"a duration", &corev1.ConfigMap{Data: map[string]string{GraceKey: "10m"}}, time.Time{}, true},
	} {
		got, err := graceOverride(tc.cm)
		if !got.Equal(tc.want) || (err != nil) != tc.fails {
			t.Errorf("%s: %v, %v; want %v (error: %t)", tc.name, got, err, tc.want, tc.fails)
		}
	}
}

// Every change of a switch key is logged and counted, a removal and a
// deleted ConfigMap too; the first read (a restart) is logged only, and a
// write that changes no key skewgate reads is neither.
func TestSwitchChangesCounted(t *testing.T) {
	var s SteeringSwitch
	reg := prometheus.NewPedanticRegistry()
	s.register(reg)
	var logged bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logged, nil))
	cm := func(data map[string]string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: SwitchConfigMap, ResourceVersion: "7",
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl-patch", Time: &metav1.Time{Time: time.Now()}}}}, Data: data}
	}
	for _, step := range []struct {
		cm              *corev1.ConfigMap
		steering, grace float64
		logs            int
	}{
		{cm(map[string]string{SwitchKey: "always"}), 0, 0, 1}, // the first read
		{cm(map[string]string{SwitchKey: "always", "note": "x"}), 0, 0, 1},
		{cm(map[string]string{SwitchKey: "off"}), 1, 0, 2},
		{cm(map[string]string{SwitchKey: "off", GraceKey: "2026-03-01T03:04:05Z"}), 1, 1, 3},
		{cm(map[string]string{SwitchKey: "off", GraceKey: ""}), 1, 2, 4},
		{nil, 2, 3, 6},
	} {
		s.note(step.cm, log)
		if got := counterValue(t, s.changes.WithLabelValues(SwitchKey)); got != step.steering {
			t.Errorf("after %v: steering changes %v, want %v", step.cm, got, step.steering)
		}
		if got := counterValue(t, s.changes.WithLabelValues(GraceKey)); got != step.grace {
			t.Errorf("after %v: grace changes %v, want %v", step.cm, got, step.grace)
		}
		if got := strings.Count(logged.String(), "\n"); got != step.logs {
			t.Errorf("after %v: %d lines logged, want %d:\n%s", step.cm, got, step.logs, logged.String())
		}
	}
	if !strings.Contains(logged.String(), `manager=kubectl-patch`) || !strings.Contains(logged.String(), `from="\"always\"" to="\"off\""`) {
		t.Errorf("the log does not say who changed what:\n%s", logged.String())
	}
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}
