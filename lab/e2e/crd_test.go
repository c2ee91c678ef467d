package e2e

import (
	"encoding/json"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/skewgate/skewgate/lab"
	"github.com/skewgate/skewgate/proxy/admin"
	"github.com/skewgate/skewgate/proxy/route"
)

const widgetsCRD = `{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition",
"metadata":{"name":"widgets.e2e.skewgate.dev"},
"spec":{"group":"e2e.skewgate.dev","scope":"Namespaced",
"names":{"plural":"widgets","singular":"widget","kind":"Widget"},
"versions":[{"name":"v1","served":true,"storage":true,
"schema":{"openAPIV3Schema":{"type":"object","x-kubernetes-preserve-unknown-fields":true}}}]}}`

// TestNewCRDIsLocal: a CRD is cluster-wide. Created through node-b, it is
// answered by node-a's own apiserver through skewgate, first as a routing
// miss (rule 6, which refreshes discovery) and, once refreshed, because the
// local server lists it (rule 3) — never sent to a peer.
func TestNewCRDIsLocal(t *testing.T) {
	admin := client(t, plane.PKI.Admin)
	crds := node(t, "node-b").URL() + "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
	if r := do(t, admin, http.MethodPost, crds, []byte(widgetsCRD)); r.Code != http.StatusCreated {
		t.Fatalf("create CRD via node-b = %d: %s", r.Code, trim(r.Body))
	}
	t.Cleanup(func() { do(t, admin, http.MethodDelete, crds+"/widgets.e2e.skewgate.dev", nil) })
	path := "/apis/e2e.skewgate.dev/v1/namespaces/default/widgets"
	waitFor(t, 15*time.Second, "node-a serving the new CRD", func() bool {
		return do(t, admin, http.MethodGet, node(t, "node-a").URL()+path, nil).Code == http.StatusOK
	})
	routed(t, "list widgets", do(t, admin, http.MethodGet, via(t)+path, nil), http.StatusOK, "local", "127.0.0.1:6443")
	waitFor(t, 15*time.Second, "skewgate learning the CRD from local discovery", func() bool {
		e := explain(t, "list", path)
		return e.Route == "local" && e.Rule == route.RuleLocal
	})
}

func explain(t *testing.T, verb, path string) admin.Explanation {
	t.Helper()
	var e admin.Explanation
	q := url.Values{"verb": {verb}, "path": {path}}
	r := do(t, http.DefaultClient, http.MethodGet, lab.SkewgateAdminURL(node(t, "node-a"))+"/debug/explain?"+q.Encode(), nil)
	if err := json.Unmarshal(r.Body, &e); err != nil {
		t.Fatalf("explain: %v: %s", err, trim(r.Body))
	}
	return e
}
