package proxy

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the proxy's request metrics. GVR labels come only from the
// discovery table (a resource no server serves is counted as "unknown"), so
// clients cannot blow up their cardinality.
type Metrics struct {
	requests  *prometheus.CounterVec
	duration  *prometheus.HistogramVec
	fwdErrors *prometheus.CounterVec
	merged    *prometheus.CounterVec
	handBack  *prometheus.CounterVec
	throttled *prometheus.CounterVec
}

// NewMetrics registers the proxy metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "skewgate_requests_total",
			Help: "Requests answered, by route (who answered: local, peer, or skewgate itself), routing rule (docs/routing.md; none where no rule ran), verb, group/version/resource and HTTP code.",
		}, []string{"route", "rule", "verb", "group", "version", "resource", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "skewgate_request_duration_seconds",
			Help:    "Time to answer a request (to the end of the body; watches excluded), by route and by the server that answered (host:port, or skewgate).",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"route", "server"}),
		fwdErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "skewgate_forward_errors_total",
			Help: "Failed exchanges with apiservers, by server and kind: connect (no connection, nothing sent; failover possible) or request (broke after bytes were sent; never retried).",
		}, []string{"server", "kind"}),
		merged: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "skewgate_merged_discovery_requests_total",
			Help: "Peer-aggregated discovery requests, by result: hit (If-None-Match matched, 304) or miss (body sent).",
		}, []string{"result"}),
		handBack: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "skewgate_handback_connections_total",
			Help: "Steered client connections asked to leave once steering was no longer wanted (a skew window closed, steering turned off), by how: connection_close (Connection: close or GOAWAY with an answer) or watch_end (a watch ended cleanly).",
		}, []string{"how"}),
		throttled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "skewgate_requests_throttled_total",
			Help: "Requests skewgate answered 429 itself because the server chosen for them had as many short requests in flight as skewgate sends it (--local-max-requests-inflight, a peer's 400), by that server. Requests API Priority and Fairness isolates are never held.",
		}, []string{"server"}),
	}
	// Every known label value exists from start-up at 0, so a panel or
	// an alert's rate() has a series before the first event (Prometheus'
	// instrumentation guide: avoid missing metrics).
	for _, how := range []string{handBackClose, handBackWatchEnd} {
		m.handBack.WithLabelValues(how)
	}
	for _, result := range []string{mergedHit, mergedMiss} {
		m.merged.WithLabelValues(result)
	}
	reg.MustRegister(m.requests, m.duration, m.fwdErrors, m.merged, m.handBack, m.throttled)
	return m
}

// register registers every metric the proxy exports with reg, in one
// place (docs/metrics.md lists them; TestMetricsDocumented holds the two
// together): membership's and the certificates' collectors, the switch's
// changes, what skewgate carries against its bounds (Load) and the
// connections admission has not counted yet, and the request metrics,
// which it returns.
func register(reg prometheus.Registerer, members, certs prometheus.Collector, l *Load, a *Admission, sw *SteeringSwitch) *Metrics {
	sw.register(reg)
	reg.MustRegister(members, certs,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "skewgate_client_connections", Help: "Client connections open to skewgate's listener whose caller proved who it is (a verified client certificate, or a token an apiserver accepted): what --max-connections bounds."},
			func() float64 { return float64(l.Conns()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "skewgate_client_connections_pending", Help: "Client connections open to skewgate's listener whose caller has not proved who it is yet (TLS handshake under way, anonymous, or no request yet); bounded per source address and in total, never counted toward shedding."},
			func() float64 { return float64(a.Pending()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "skewgate_client_connections_dropped_total", Help: "Pending client connections closed to make room for a newer one, the oldest first, at the bound reached: source (256 from one address) or total (a quarter of the soft memory limit at 64 KiB each).", ConstLabels: prometheus.Labels{"bound": "source"}},
			func() float64 { return float64(a.dropped[boundSource].Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "skewgate_client_connections_dropped_total", Help: "Pending client connections closed to make room for a newer one, the oldest first, at the bound reached: source (256 from one address) or total (a quarter of the soft memory limit at 64 KiB each).", ConstLabels: prometheus.Labels{"bound": "total"}},
			func() float64 { return float64(a.dropped[boundTotal].Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "skewgate_shedding", Help: "1 while skewgate sheds load by failing open (steering withdrawn, steered connections handed back): near --max-connections or its soft memory limit."},
			func() float64 {
				if l.shedding.Load() {
					return 1
				}
				return 0
			}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "skewgate_shedding_episodes_total", Help: "Times skewgate began shedding load: an episode shorter than a scrape interval shows here, not in skewgate_shedding."},
			func() float64 { return float64(l.Episodes()) }))
	return NewMetrics(reg)
}

// Label values of skewgate_handback_connections_total (how) and
// skewgate_merged_discovery_requests_total (result).
const (
	handBackClose    = "connection_close"
	handBackWatchEnd = "watch_end"
	mergedHit        = "hit"
	mergedMiss       = "miss"
)
