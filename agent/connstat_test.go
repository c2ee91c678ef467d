package agent

import (
	"io"
	"math"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// steeredProxyWithConnStat serves a greeting proxy in n on LoopbackBoth, as
// skewgate run --steering listens (its accepted IPv4 connections are
// AF_INET6 sockets with v4-mapped addresses: still each hop's), steers the
// node address into it and counts its connections.
func (n *node) steeredProxyWithConnStat(t *testing.T) *ConnStat {
	t.Helper()
	ln := listenIn(t, n.ns, "["+LoopbackBoth+"]:16443")
	serveGreeter(t, "proxy", ln)
	waitState(t, startSteering(t, n.steeringConfig(), ln), StateSteering)
	return startConnStat(t, ConnStatConfig{
		PinPath:   n.pins,
		NetNSPath: n.ns.path,
		ProxyPort: 16443,
		ProxyTGID: OwnTGID(), // this test process plays the proxy
		Clients:   []netip.Prefix{netip.PrefixFrom(nodeAddr, 32)},
	})
}

func startConnStat(t *testing.T, cfg ConnStatConfig) *ConnStat {
	t.Helper()
	c, err := StartConnStat(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if st := c.Status(); st.State == StateDisabled {
		t.Fatal(st)
	}
	return c
}

func hopsByKey(t *testing.T, c *ConnStat) map[string]HopStats {
	t.Helper()
	hops, err := c.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]HopStats{}
	for _, h := range hops {
		out[h.Hop+" "+h.Server.String()] = h
	}
	return out
}

// TestConnStatHops makes connections of every hop in one node namespace and
// checks they land on the right hop and server, and that sockets of another
// namespace and the apiserver's own accepted connections are not counted.
func TestConnStatHops(t *testing.T) {
	peer := netip.MustParseAddr("198.18.1.2")
	n := newNode(t)
	// The "peer apiserver" is the node's origin listener on a second address.
	n.ns.do(t, func() error { return setupLo([]netip.Prefix{netip.PrefixFrom(peer, 32)}) })
	c := n.steeredProxyWithConnStat(t)

	other := newTestNetNS(t)
	serveGreeter(t, "other", listenIn(t, other, "127.0.0.1:6443"))
	otherDial := newDialer(t, other)

	dials := []struct {
		addr  string
		times int
		want  string
	}{
		{targetAddr, 5, "proxy"},
		{proxyAddr, 1, "proxy"},
		{"127.0.0.1:6443", 3, "origin"},
		{"198.18.1.2:6443", 4, "origin"},
	}
	for _, d := range dials {
		for i := 0; i < d.times; i++ {
			if got := n.dial.who(t, d.addr); got != d.want {
				t.Fatalf("%s answered %s", d.addr, got)
			}
		}
	}
	for i := 0; i < 3; i++ {
		otherDial.who(t, "127.0.0.1:6443")
	}

	want := map[string]uint64{
		HopClientProxy + " 198.18.1.1:6443": 5,
		HopClientProxy + " 127.0.0.1:16443": 1,
		HopProxyLocal + " 127.0.0.1:6443":   3,
		HopProxyPeer + " 198.18.1.2:6443":   4,
	}
	var hops map[string]HopStats
	deadline := time.Now().Add(5 * time.Second)
	for {
		hops = hopsByKey(t, c)
		if closedAll(hops, want) || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(hops) != len(want) {
		t.Errorf("hops %v, want exactly %v", keys(hops), want)
	}
	for k, n := range want {
		h := hops[k]
		if h.Opens != n || h.Closes != n || h.Failed != 0 {
			t.Errorf("%s: opens %d closes %d failed %d, want %d %d 0", k, h.Opens, h.Closes, h.Failed, n, n)
		}
		if strings.HasPrefix(k, HopProxyLocal) || strings.HasPrefix(k, HopProxyPeer) || strings.Contains(k, ":6443") {
			if got := h.Handshake.Count(); got != n {
				t.Errorf("%s: %d handshakes timed, want %d", k, got, n)
			}
			if q := h.Handshake.Quantile(1); q > 1024 {
				t.Errorf("%s: loopback handshake up to %.0fµs", k, q)
			}
		}
		if h.MinRTT.Count() != n {
			t.Errorf("%s: %d min RTTs, want %d", k, h.MinRTT.Count(), n)
		}
	}
	checkExposition(t, c)
}

func closedAll(hops map[string]HopStats, want map[string]uint64) bool {
	for k, n := range want {
		if hops[k].Closes < n {
			return false
		}
	}
	return true
}

func keys(m map[string]HopStats) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// checkExposition registers c and checks the histogram buckets are
// cumulative with le = 2^(b+1) µs.
func checkExposition(t *testing.T, c *ConnStat) {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, mf := range mfs {
		seen[mf.GetName()] = true
		if mf.GetName() == "skewgate_bpf_map_entries" {
			for _, m := range mf.GetMetric() {
				if v := m.GetGauge().GetValue(); v < 1 || v > 1024*2*histBuckets {
					t.Errorf("%s has %g entries after traffic", m.GetLabel()[0].GetValue(), v)
				}
			}
		}
		if mf.GetName() != "skewgate_tcp_handshake_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			h := m.GetHistogram()
			var prev uint64
			for i, b := range h.GetBucket() {
				if want := math.Ldexp(1, i+1) / 1e6; b.GetUpperBound() != want {
					t.Errorf("bucket %d le %g, want %g", i, b.GetUpperBound(), want)
				}
				if b.GetCumulativeCount() < prev {
					t.Errorf("bucket %d not cumulative", i)
				}
				prev = b.GetCumulativeCount()
			}
			if prev != h.GetSampleCount() {
				t.Errorf("last finite bucket %d != count %d (nothing should exceed 33 s here)", prev, h.GetSampleCount())
			}
		}
	}
	for _, name := range []string{"skewgate_tcp_connections_opened_total", "skewgate_tcp_handshake_seconds",
		"skewgate_tcp_min_rtt_seconds", "skewgate_tcp_srtt_seconds", "skewgate_bpf_program_run_seconds_total", "skewgate_bpf_collection_errors_total",
		"skewgate_bpf_map_entries", "skewgate_bpf_map_max_entries"} {
		if !seen[name] {
			t.Errorf("metric %s missing", name)
		}
	}
}

// A long-lived connection (an HTTP/2 connection to a peer, say) shows its
// RTT while open, at most once a second, not only at close.
func TestConnStatSamplesOpenConnections(t *testing.T) {
	peer := netip.MustParseAddr("198.18.1.2")
	n := newNode(t)
	n.ns.do(t, func() error { return setupLo([]netip.Prefix{netip.PrefixFrom(peer, 32)}) })
	c := n.steeredProxyWithConnStat(t)
	r := n.dial.dial("198.18.1.2:6443")
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer r.conn.Close()
	buf := make([]byte, 4)
	start := time.Now()
	for time.Since(start) < 2500*time.Millisecond {
		if _, err := r.conn.Write([]byte("ping")); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(r.conn, buf); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	h := hopsByKey(t, c)[HopProxyPeer+" 198.18.1.2:6443"]
	if h.Closes != 0 || h.Opens != 1 {
		t.Fatalf("opens %d closes %d, want the one connection open", h.Opens, h.Closes)
	}
	if n := h.SRTT.Count(); n < 2 || n > 4 {
		t.Errorf("%d srtt samples over 2.5 s of traffic, want one a second (2-4)", n)
	}
	if q := h.SRTT.Quantile(1); q > 1024 {
		t.Errorf("loopback srtt up to %.0fµs", q)
	}
	if h.MinRTT.Count() != 0 {
		t.Errorf("%d min RTTs before the close", h.MinRTT.Count())
	}
}

// Only the proxy's own connects are proxy hops: another process of the
// node dialling the apiserver port (a kubelet, a controller-manager) is not.
func TestConnStatCountsOnlyTheProxysConnections(t *testing.T) {
	if OwnTGID() == 0 {
		t.Fatal("the tests run in the initial PID namespace, where OwnTGID knows this process")
	}
	n := newNode(t)
	c := n.steeredProxyWithConnStat(t)
	for range 3 {
		cmd := exec.Command("nsenter", "--net="+n.ns.path, "bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/6443 && head -1 <&3")
		if out, err := cmd.CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "origin" {
			t.Fatalf("another process dialling 127.0.0.1:6443: %v %q", err, out)
		}
	}
	if got := n.dial.who(t, "127.0.0.1:6443"); got != "origin" {
		t.Fatalf("127.0.0.1:6443 answered %s", got)
	}
	var h HopStats
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if h = hopsByKey(t, c)[HopProxyLocal+" 127.0.0.1:6443"]; h.Closes >= 1 {
			break
		}
	}
	if h.Opens != 1 || h.Closes != 1 {
		t.Errorf("proxy_to_local opens %d closes %d, want the proxy's one connection, not the other process's three", h.Opens, h.Closes)
	}
}
