package agent

import (
	"net/netip"
	"testing"
)

// BenchmarkSteeredConnection opens steered connections with connstat
// attached and reports the kernel's run time per program run from bpf stats
// (the same counters skewgate_bpf_program_run_seconds_total exports). One
// steered connection runs steer once and connstat for the client's connect
// and established callbacks, the accepted socket's established callback,
// and state changes of sockets with the state callback enabled.
func BenchmarkSteeredConnection(b *testing.B) {
	n := newNode(b)
	ln := listenIn(b, n.ns, proxyAddr)
	serveGreeter(b, "proxy", ln)
	s, err := StartSteering(b.Context(), n.steeringConfig(), ln)
	if err != nil || s.Status().State == StateDisabled {
		b.Fatal(err, s.Status())
	}
	b.Cleanup(func() { s.Close() })
	c, err := StartConnStat(ConnStatConfig{PinPath: n.pins, NetNSPath: n.ns.path, ProxyPort: 16443,
		Clients: []netip.Prefix{netip.PrefixFrom(nodeAddr, 32)}})
	if err != nil || c.Status().State == StateDisabled {
		b.Fatal(err, c.Status())
	}
	b.Cleanup(func() { c.Close() })

	steer0, _ := s.objs.Steer.Stats()
	conn0, _ := c.objs.Connstat.Stats()
	for b.Loop() {
		if got := n.dial.who(b, targetAddr); got != "proxy" {
			b.Fatalf("%s answered", got)
		}
		if got := n.dial.who(b, "127.0.0.1:6443"); got != "origin" {
			b.Fatalf("%s answered", got)
		}
	}
	steer1, _ := s.objs.Steer.Stats()
	conn1, _ := c.objs.Connstat.Stats()
	if runs := steer1.RunCount - steer0.RunCount; runs > 0 {
		b.ReportMetric(float64(steer1.Runtime-steer0.Runtime)/float64(runs), "steer-ns/run")
	}
	if runs := conn1.RunCount - conn0.RunCount; runs > 0 {
		b.ReportMetric(float64(conn1.Runtime-conn0.Runtime)/float64(runs), "connstat-ns/run")
		b.ReportMetric(float64(runs)/float64(b.N), "connstat-runs/op")
	}
}
