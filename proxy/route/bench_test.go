package route_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"testing"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"

	"github.com/skewgate/skewgate/proxy/discovery"
	"github.com/skewgate/skewgate/proxy/route"
)

// realCaps are the capabilities of a real kube-apiserver of version v, from
// the discovery documents the lab's servers answered (proxy/discovery's
// testdata).
func realCaps(b testing.TB, v string) *discovery.Capabilities {
	b.Helper()
	read := func(name string) discovery.Endpoint {
		data, err := os.ReadFile(filepath.Join("..", "discovery", "testdata", v+"-"+name+"-v2.json"))
		if err != nil {
			b.Fatal(err)
		}
		var list apidiscoveryv2.APIGroupDiscoveryList
		if err := json.Unmarshal(data, &list); err != nil {
			b.Fatal(err)
		}
		return discovery.Endpoint{Items: list.Items, Format: discovery.FormatV2}
	}
	return discovery.NewCapabilities(&discovery.Doc{API: read("api"), APIs: read("apis")})
}

// BenchmarkClassifyDecide is routing's cost per request, with the real
// discovery of a v1.35.4 local server and a v1.36.3 peer: a core list the
// local server serves, and a list of a resource only the peer serves.
// decide-local is routing's own share: what remains is apiserver's
// RequestInfoFactory (its allocations are its own).
func BenchmarkClassifyDecide(b *testing.B) {
	table := &route.Table{Peers: []route.Server{{ID: "198.18.0.2:6443", Healthy: true, Caps: realCaps(b, "v1.36.3")}}}
	table.SetLocal(route.Server{ID: "198.18.0.1:6443", Healthy: true, Caps: realCaps(b, "v1.35.4")})
	c := route.NewClassifier()
	b.Run("decide-local", func(b *testing.B) {
		req, _ := c.Classify(&http.Request{Method: http.MethodGet, URL: &url.URL{Path: "/api/v1/namespaces/default/configmaps"}})
		b.ReportAllocs()
		for b.Loop() {
			if d := route.Decide(req, table, false, "user:admin"); d.Route != route.Local {
				b.Fatalf("routed %s", d.Route)
			}
		}
	})
	for _, bc := range []struct{ name, path string }{
		{"local", "/api/v1/namespaces/default/configmaps"},
		{"peer", "/apis/scheduling.k8s.io/v1alpha2/namespaces/default/workloads"},
	} {
		r := &http.Request{Method: http.MethodGet, URL: &url.URL{Path: bc.path}}
		want := route.Local
		if bc.name == "peer" {
			want = route.Peer
		}
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				req, err := c.Classify(r)
				if err != nil {
					b.Fatal(err)
				}
				if d := route.Decide(req, table, false, "user:admin"); d.Route != want {
					b.Fatalf("%s routed %s, want %s", bc.path, d.Route, want)
				}
			}
		})
	}
}
