package proxy

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// Issue 44: on a fresh lab skewgate_handback_connections_total was absent
// until the first hand-back, so its panel and an alert's rate() had
// nothing to show. Every known label value is there from start-up, at 0.
func TestSeriesFromTheStart(t *testing.T) {
	reg := prometheus.NewRegistry()
	NewMetrics(reg)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]map[string]bool{}
	for _, f := range fams {
		got[f.GetName()] = map[string]bool{}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				got[f.GetName()][l.GetValue()] = m.GetCounter().GetValue() == 0
			}
		}
	}
	for name, values := range map[string][]string{
		"skewgate_handback_connections_total":      {"connection_close", "watch_end"},
		"skewgate_merged_discovery_requests_total": {"hit", "miss"},
	} {
		for _, v := range values {
			if zero, ok := got[name][v]; !ok || !zero {
				t.Errorf("%s{%q} at start-up: present %t, want present at 0", name, v, ok)
			}
		}
	}
}
