package e2e

import (
	"net/http"
	"slices"
	"testing"
	"time"
)

// BenchmarkSequentialGET measures b.N sequential GETs (keep-alive, one
// client) on four paths in one run and reports p50/p99 per path and the
// ratios of skewgate's paths to the direct ones:
//
//	direct-a   node-a's apiserver, a core list it serves
//	local      the same list through skewgate in front of node-a
//	direct-b   node-b's apiserver, a workloads list only it serves
//	peer       the same workloads list through skewgate, forwarded to node-b
//
// Run with `make bench` (-benchtime 200x: 200 GETs per path).
func BenchmarkSequentialGET(b *testing.B) {
	admin := client(b, plane.PKI.Admin)
	a, nb, sg := node(b, "node-a").URL(), node(b, "node-b").URL(), via(b)
	core := "/api/v1/namespaces/default/configmaps"
	paths := []struct{ name, url, route string }{
		{"direct-a", a + core, ""},
		{"local", sg + core, "local"},
		{"direct-b", nb + workloadsPath, ""},
		{"peer", sg + workloadsPath, "peer"},
	}
	p50 := map[string]float64{}
	b.ResetTimer()
	for _, p := range paths {
		lat := make([]time.Duration, 0, b.N)
		for i := 0; i < b.N; i++ {
			start := time.Now()
			r := do(b, admin, http.MethodGet, p.url, nil)
			lat = append(lat, time.Since(start))
			if r.Code != http.StatusOK || r.Header.Get("X-Skewgate-Route") != p.route {
				b.Fatalf("%s: %d route %q, want 200 route %q", p.name, r.Code, r.Header.Get("X-Skewgate-Route"), p.route)
			}
		}
		slices.Sort(lat)
		p50[p.name] = micros(lat[len(lat)/2])
		b.ReportMetric(p50[p.name], p.name+"-p50-µs")
		b.ReportMetric(micros(lat[len(lat)*99/100]), p.name+"-p99-µs")
	}
	b.ReportMetric(p50["local"]/p50["direct-a"], "local/direct-a-p50")
	b.ReportMetric(p50["peer"]/p50["direct-b"], "peer/direct-b-p50")
}

func micros(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
