package route_test

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/skewgate/skewgate/proxy/route"
)

// The next upgrade, 1.36 → 1.37, with both servers' real discovery: the
// types a default 1.37.2 serves and a 1.36.3 does not go to the 1.37
// peer (a 1.36 server answers them with a false 404), the shared ones
// stay local, and they are built in even by the compiled fallback (the
// window and rule 5 count them).
func TestNextUpgradeRoutes(t *testing.T) {
	const local, peer = "198.18.0.1:6443", "198.18.0.2:6443"
	table := &route.Table{Peers: []route.Server{{ID: peer, Healthy: true, Caps: realCaps(t, "v1.37.2")}}}
	table.SetLocal(route.Server{ID: local, Healthy: true, Caps: realCaps(t, "v1.36.3")})
	c := route.NewClassifier()
	for _, tc := range []struct {
		path string
		want string
	}{
		{"/apis/storagemigration.k8s.io/v1/storageversionmigrations", peer},
		{"/apis/certificates.k8s.io/v1/namespaces/default/podcertificaterequests", peer},
		{"/apis/certificates.k8s.io/v1/clustertrustbundles", peer},
		{"/apis/resource.k8s.io/v1/devicetaintrules", peer},
		{"/apis/certificates.k8s.io/v1/certificatesigningrequests", local},
		{"/api/v1/namespaces/default/configmaps", local},
	} {
		r := &http.Request{Method: http.MethodGet, URL: &url.URL{Path: tc.path}}
		req, err := c.Classify(r)
		if err != nil {
			t.Fatalf("%s: %v", tc.path, err)
		}
		d := route.Decide(req, table, false, "")
		if len(d.Servers) == 0 || d.Servers[0] != tc.want {
			t.Errorf("%s: %s %v (%s), want %s", tc.path, d.Route, d.Servers, d.Reason, tc.want)
		}
	}
	for _, g := range []string{"storagemigration.k8s.io", "certificates.k8s.io", "resource.k8s.io"} {
		if !route.CompiledBuiltIn(g) {
			t.Errorf("%s not built in", g)
		}
	}
}
