package membership

import (
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/skewgate/skewgate/proxy/discovery"
	"github.com/skewgate/skewgate/proxy/route"
)

var (
	healthyDesc = prometheus.NewDesc("skewgate_server_healthy",
		"Whether the apiserver passes skewgate's /readyz probes and is routed to (1) or not (0).",
		[]string{"server", "local"}, nil)
	latencyDesc = prometheus.NewDesc("skewgate_server_probe_latency_seconds",
		"Moving average of the apiserver's /readyz round trip; peers with less are preferred.",
		[]string{"server"}, nil)
	ageDesc = prometheus.NewDesc("skewgate_server_discovery_age_seconds",
		"Time since the apiserver's discovery was last confirmed (200 or 304); absent before the first fetch.",
		[]string{"server"}, nil)
	infoDesc = prometheus.NewDesc("skewgate_server_info",
		"Always 1; the version label is the apiserver's /version gitVersion, as last read.",
		[]string{"server", "version"}, nil)
	gvServersDesc = prometheus.NewDesc("skewgate_group_version_servers",
		"How many members (not departed, discovery known) serve the group/version; below skewgate_members it is unevenly served.",
		[]string{"group_version"}, nil)
	membersDesc = prometheus.NewDesc("skewgate_members",
		"Members (not departed) whose discovery is known.", nil, nil)
	graceEndDesc = prometheus.NewDesc("skewgate_rollback_grace_end_timestamp_seconds",
		"When the rollback grace of a resource type ends (Unix time): until then rule 5 answers it 503 with Retry-After, after it the local server's 404. Merged discovery stops listing it one discovery settle (60 s) earlier. Only types the grace holds now; `skewgate routes` lists them.",
		[]string{"group", "version", "resource"}, nil)
	graceOverrideDesc = prometheus.NewDesc("skewgate_rollback_grace_override_timestamp_seconds",
		"The cluster's override of the rollback grace (kube-system/skewgate, rollback-grace-until; Unix time): every grace that began before it ends then (in discovery; its 503s one discovery settle later). Absent when not set.",
		nil, nil)
	windowCauseDesc = prometheus.NewDesc("skewgate_skew_window_cause",
		"1 for each cause that keeps the skew window open now: upgrade_signal (a node's apiserver upgrade has begun), versions (the members' versions differ), built_in_types (what their binaries serve differs), hold (the hold time after the last of those), grace (a rollback grace that outlasts the hold); 0 for the others. Every cause 0: the window is closed.",
		[]string{"cause"}, nil)
	windowSinceDesc = prometheus.NewDesc("skewgate_skew_window_opened_timestamp_seconds",
		"When the open skew window opened (Unix time); 0 while it is closed.",
		nil, nil)
	windowUntilDesc = prometheus.NewDesc("skewgate_skew_window_until_timestamp_seconds",
		"When the open skew window closes if the members keep agreeing (Unix time: the hold's end, or a rollback grace's); 0 while they differ or the window is closed.",
		nil, nil)
	discoveryOKDesc = prometheus.NewDesc("skewgate_server_discovery_ok",
		"Whether the last discovery fetch from the apiserver succeeded (1) or failed, last-known-good kept (0).",
		[]string{"server"}, nil)
)

// Describe implements prometheus.Collector.
func (m *Members) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{healthyDesc, latencyDesc, ageDesc, discoveryOKDesc, infoDesc, gvServersDesc, membersDesc, graceEndDesc, graceOverrideDesc, windowCauseDesc, windowSinceDesc, windowUntilDesc} {
		ch <- d
	}
}

// Collect implements prometheus.Collector, reading state at scrape time.
func (m *Members) Collect(ch chan<- prometheus.Metric) {
	snap := m.Discovery()
	for _, st := range m.Statuses() {
		local := "false"
		if st.Local {
			local = "true"
		}
		ch <- prometheus.MustNewConstMetric(healthyDesc, prometheus.GaugeValue, boolValue(st.Healthy), st.ID, local)
		ch <- prometheus.MustNewConstMetric(latencyDesc, prometheus.GaugeValue, st.Latency.Seconds(), st.ID)
		ds := snap.Servers[st.ID]
		if !ds.FetchedAt.IsZero() {
			ch <- prometheus.MustNewConstMetric(ageDesc, prometheus.GaugeValue, time.Since(ds.FetchedAt).Seconds(), st.ID)
		}
		ch <- prometheus.MustNewConstMetric(discoveryOKDesc, prometheus.GaugeValue, boolValue(ds.Err == nil && ds.Doc != nil), st.ID)
		if st.Version != "" {
			ch <- prometheus.MustNewConstMetric(infoDesc, prometheus.GaugeValue, 1, st.ID, st.Version)
		}
	}
	m.collectSkew(ch)
	m.collectWindow(ch)
	m.collectGrace(ch)
}

// collectWindow exports the window's causes, each from start-up (a panel
// and an alert read them before the first upgrade), and its bounds.
func (m *Members) collectWindow(ch chan<- prometheus.Metric) {
	w := m.Window()
	for _, c := range WindowCauses {
		ch <- prometheus.MustNewConstMetric(windowCauseDesc, prometheus.GaugeValue, boolValue(slices.Contains(w.Causes, c)), c)
	}
	ch <- prometheus.MustNewConstMetric(windowSinceDesc, prometheus.GaugeValue, unixOrZero(w.Since))
	ch <- prometheus.MustNewConstMetric(windowUntilDesc, prometheus.GaugeValue, unixOrZero(w.Until))
}

func unixOrZero(t time.Time) float64 {
	if t.IsZero() {
		return 0
	}
	return float64(t.Unix())
}

// collectGrace exports each type the rollback grace holds, labelled from
// discovery only, with its end.
func (m *Members) collectGrace(ch chan<- prometheus.Metric) {
	for _, g := range m.InGrace() {
		ch <- prometheus.MustNewConstMetric(graceEndDesc, prometheus.GaugeValue, float64(g.Until.Unix()), g.GVR.Group, g.GVR.Version, g.GVR.Resource)
	}
	if until, ok := m.GraceUntil(); ok {
		ch <- prometheus.MustNewConstMetric(graceOverrideDesc, prometheus.GaugeValue, float64(until.Unix()))
	}
}

// collectSkew counts, per group/version, the members serving it: during
// an upgrade the ones below the member count are the skew skewgate covers.
func (m *Members) collectSkew(ch chan<- prometheus.Metric) {
	t := m.Table()
	counts := map[string]int{}
	members := 0
	for _, s := range append([]route.Server{t.Local}, t.Peers...) {
		caps, ok := s.Caps.(*discovery.Capabilities)
		if s.Departed || !ok || caps == nil {
			continue
		}
		members++
		for _, gv := range caps.GroupVersions() {
			counts[gv.String()]++
		}
	}
	ch <- prometheus.MustNewConstMetric(membersDesc, prometheus.GaugeValue, float64(members))
	for gv, n := range counts {
		ch <- prometheus.MustNewConstMetric(gvServersDesc, prometheus.GaugeValue, float64(n), gv)
	}
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
