package agent

import (
	"net/netip"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/skewgate/skewgate/bpf/steer"
	"github.com/skewgate/skewgate/docs"
)

// startedNode registers the agent's collectors as Listen does —
// connection stats and the node's collector, which exports steering once
// Engage installed it — with real BPF programs in a throwaway namespace,
// steering in standby (mode auto outside a window), and gathers them: what
// a node exports from start-up, before any upgrade.
func startedNode(t *testing.T) (*docs.Recorder, []*dto.MetricFamily) {
	t.Helper()
	n := newNode(t)
	ln := listenIn(t, n.ns, proxyAddr)
	cfg := n.steeringConfig()
	cfg.Want = func() (bool, string) { return false, "mode auto, no skew window" }
	st := startSteering(t, cfg, ln)
	waitState(t, st, StateStandby)
	cs := startConnStat(t, ConnStatConfig{PinPath: n.pins, NetNSPath: n.ns.path, ProxyPort: 16443, ProxyTGID: OwnTGID(),
		Clients: []netip.Prefix{netip.PrefixFrom(nodeAddr, 32)}})
	node := &Node{cfg: NodeConfig{Mode: func() Mode { return ModeAuto }, Window: func() Window { return Window{} }}, st: st}
	reg := docs.NewRecorder()
	reg.MustRegister(cs, modeCollector{node})
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	return reg, fams
}

// Before Engage installs steering (the proxy not ready yet), every
// steering state is there at 0, and the lease: an alert that reads them
// has a series from the first scrape.
func TestSteeringSeriesBeforeInstalled(t *testing.T) {
	reg := docs.NewRecorder()
	reg.MustRegister(modeCollector{&Node{cfg: NodeConfig{Mode: func() Mode { return ModeAuto }, Window: func() Window { return Window{} }}}})
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	states := map[string]float64{}
	lease := false
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			switch f.GetName() {
			case "skewgate_steering_state":
				states[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
			case "skewgate_steering_lease_remaining_seconds":
				lease = true
			}
		}
	}
	for _, s := range allStates {
		if v, ok := states[string(s)]; !ok || v != 0 {
			t.Errorf("skewgate_steering_state{state=%q} before steering is installed: present %t, value %g; want present at 0", s, ok, v)
		}
	}
	if !lease {
		t.Error("skewgate_steering_lease_remaining_seconds absent before steering is installed")
	}
}

// Issue 44: every metric the agent registers has its row in
// docs/metrics.md, with its type and labels, and every row under agent a
// metric.
func TestMetricsDocumented(t *testing.T) {
	reg, fams := startedNode(t)
	ms, err := docs.Described("agent", reg.Collectors, fams)
	if err != nil {
		t.Fatal(err)
	}
	problems, err := docs.Undocumented("agent", ms)
	if err != nil {
		t.Fatal(err)
	}
	if len(problems) > 0 {
		t.Errorf("docs/metrics.md and agent disagree:\n%s", strings.Join(problems, "\n"))
	}
}

// Issue 44, as proxy's TestSeriesFromTheStart: every series a panel or an
// alert reads exists from start-up, at 0 (Prometheus' instrumentation
// guide: avoid missing metrics) — the steering lookups by every reason the
// kernel counts (held included), the resets, every steering state and
// mode.
func TestSeriesFromTheStart(t *testing.T) {
	_, fams := startedNode(t)
	series := map[string]map[string]float64{} // name → label values → value
	for _, f := range fams {
		series[f.GetName()] = map[string]float64{}
		for _, m := range f.GetMetric() {
			var values []string
			for _, l := range m.GetLabel() {
				values = append(values, l.GetValue())
			}
			series[f.GetName()][strings.Join(values, ",")] = m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	want := map[string][]string{
		"skewgate_steering_reset_connections_total": {""},
		"skewgate_skew_window":                      {""},
		"skewgate_steering_mode":                    {string(ModeAlways), string(ModeAuto), string(ModeOff)},
		"skewgate_steering_state":                   {string(StateDisabled), string(StateOff), string(StateStandby), string(StateLapsed), string(StateSteering)},
	}
	for r := steer.SteerReason(0); r < steer.SteerReasonREASON_MAX; r++ {
		want["skewgate_steering_lookups_total"] = append(want["skewgate_steering_lookups_total"], reasonName(r))
	}
	for name, values := range want {
		for _, v := range values {
			if _, ok := series[name][v]; !ok {
				t.Errorf("%s{%q} is absent at start-up: a panel or rate() has no series until it first changes", name, v)
			}
		}
	}
	for _, reason := range []string{"held", "steered", "lease_expired", "off"} {
		if n := series["skewgate_steering_lookups_total"][reason]; n != 0 {
			t.Errorf("skewgate_steering_lookups_total{reason=%q} = %g in a fresh namespace, want 0", reason, n)
		}
	}
}
