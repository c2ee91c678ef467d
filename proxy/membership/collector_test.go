package membership

import (
	"net/url"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// Issue 44: the dashboard's Window panel and its since and until read the
// window's causes and bounds. Every cause is there from start-up at 0, and
// the bounds at 0, before any upgrade.
func TestWindowSeriesFromTheStart(t *testing.T) {
	local, _ := url.Parse("https://127.0.0.1:6443")
	m, err := New(Config{Local: local})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]map[string]float64{}
	for _, f := range fams {
		got[f.GetName()] = map[string]float64{}
		for _, s := range f.GetMetric() {
			label := ""
			if len(s.GetLabel()) > 0 {
				label = s.GetLabel()[0].GetValue()
			}
			got[f.GetName()][label] = s.GetGauge().GetValue()
		}
	}
	want := map[string][]string{
		"skewgate_skew_window_cause":                    WindowCauses,
		"skewgate_skew_window_opened_timestamp_seconds": {""},
		"skewgate_skew_window_until_timestamp_seconds":  {""},
	}
	for name, labels := range want {
		for _, l := range labels {
			if v, ok := got[name][l]; !ok || v != 0 {
				t.Errorf("%s{%q} at start-up: present %t, value %g; want present at 0", name, l, ok, v)
			}
		}
	}
}
