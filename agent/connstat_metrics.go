package agent

import (
	"github.com/cilium/ebpf"
	"github.com/prometheus/client_golang/prometheus"
)

var (
	hopLabels     = []string{"hop", "server"}
	descTCPOpened = prometheus.NewDesc("skewgate_tcp_connections_opened_total",
		"TCP handshakes completed per hop (client_to_proxy, proxy_to_local, proxy_to_peer) and server.", hopLabels, nil)
	descTCPClosed = prometheus.NewDesc("skewgate_tcp_connections_closed_total",
		"Established TCP connections closed per hop and server.", hopLabels, nil)
	descTCPFailed = prometheus.NewDesc("skewgate_tcp_connect_failures_total",
		"Outgoing TCP connects that closed before the handshake completed, per hop and server.", hopLabels, nil)
	descTCPRetrans = prometheus.NewDesc("skewgate_tcp_retransmits_total",
		"Segments retransmitted on closed connections, per hop and server.", hopLabels, nil)
	descTCPHandshake = prometheus.NewDesc("skewgate_tcp_handshake_seconds",
		"TCP handshake time: connect (SYN sent, or SYN steered) until established, per hop and server.", hopLabels, nil)
	descTCPMinRTT = prometheus.NewDesc("skewgate_tcp_min_rtt_seconds",
		"Minimum RTT the kernel measured over a connection's life, observed at close, per hop and server.", hopLabels, nil)
	descTCPSRTT = prometheus.NewDesc("skewgate_tcp_srtt_seconds",
		"Smoothed RTT of open connections, sampled at most once a second per connection, per hop and server: what long-lived HTTP/2 connections cost while open (inflated by delayed ACKs; the sum is estimated from the log2 buckets).", hopLabels, nil)
	connstatRunSeconds = descProgRunSeconds("connstat")
	connstatRuns       = descProgRuns("connstat")
	connstatErrors     = descCollectionErrors("connstat")
)

// Describe implements prometheus.Collector.
func (c *ConnStat) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descTCPOpened, descTCPClosed, descTCPFailed, descTCPRetrans,
		descTCPHandshake, descTCPMinRTT, descTCPSRTT, connstatRunSeconds, connstatRuns, connstatErrors, descMapEntries, descMapMaxEntries} {
		ch <- d
	}
}

// Collect implements prometheus.Collector; it reads the maps at scrape time.
func (c *ConnStat) Collect(ch chan<- prometheus.Metric) {
	if c.Status().State != StateDisabled {
		c.collectKernel(ch)
	}
	ch <- prometheus.MustNewConstMetric(connstatErrors, prometheus.CounterValue, c.errs.load())
}

func (c *ConnStat) collectKernel(ch chan<- prometheus.Metric) {
	hops, err := c.Snapshot()
	if err != nil {
		c.errs.inc()
	}
	for _, h := range hops {
		labels := []string{h.Hop, h.Server.String()}
		counter := func(d *prometheus.Desc, v uint64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
		}
		counter(descTCPOpened, h.Opens)
		counter(descTCPClosed, h.Closes)
		counter(descTCPFailed, h.Failed)
		counter(descTCPRetrans, h.Retransmits)
		hist := func(d *prometheus.Desc, l Log2Histogram) {
			ch <- prometheus.MustNewConstHistogram(d, l.Count(), float64(l.SumMicros)/1e6, l.Cumulative(), labels...)
		}
		hist(descTCPHandshake, h.Handshake)
		hist(descTCPMinRTT, h.MinRTT)
		hist(descTCPSRTT, h.SRTT)
	}
	if err := progStats(ch, c.objs.Connstat, connstatRunSeconds, connstatRuns); err != nil {
		c.errs.inc()
	}
	for name, m := range map[string]*ebpf.Map{"connstat_counters": c.objs.ConnstatCounters, "connstat_hist": c.objs.ConnstatHist} {
		if err := mapPressure(ch, name, m); err != nil {
			c.errs.inc()
		}
	}
}
