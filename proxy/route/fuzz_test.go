package route

import (
	"net/http"
	"net/url"
	"testing"
)

// FuzzClassifyDecide: any method, path and query a client sends is either
// refused by the classifier or routed by a rule of the contract; a marked
// request is always local, and a request only goes to a peer that is
// healthy and serves it.
func FuzzClassifyDecide(f *testing.F) {
	for _, seed := range []struct{ method, path, query string }{
		{"GET", "/apis/scheduling.k8s.io/v1alpha2/namespaces/default/workloads", ""},
		{"GET", "/apis/scheduling.k8s.io/v1alpha2/workloads", "watch=true&resourceVersion=1"},
		{"POST", "/api/v1/namespaces/default/pods/p1/exec", "command=ls&container=c&stdout=true"},
		{"PATCH", "/apis/apps/v1/namespaces/kube-system/deployments/d/scale", ""},
		{"GET", "/apis/scheduling.k8s.io", ""},
		{"GET", "/openapi/v3/apis/scheduling.k8s.io/v1alpha2", ""},
		{"DELETE", "/api/v1/namespaces/x", ""},
		{"GET", "/apis/../api//v1/./pods", ""},
		{"GET", "/healthz", "verbose"},
	} {
		f.Add(seed.method, seed.path, seed.query, false)
	}
	c := NewClassifier()
	table := fuzzTable()
	f.Fuzz(func(t *testing.T, method, path, query string, marked bool) {
		u := &url.URL{Path: path, RawQuery: query}
		req, err := c.Classify(&http.Request{Method: method, URL: u})
		if err != nil {
			return
		}
		d := Decide(req, table, marked, "client")
		switch {
		case marked && d.Route != Local:
			t.Fatalf("marked %s %s went %s", method, path, d.Route)
		case !validRules[d.Rule]:
			t.Fatalf("rule %q", d.Rule)
		case d.Route == Peer:
			for _, id := range d.Servers {
				if id != "peer:6443" {
					t.Fatalf("routed to %s, not the healthy capable peer", id)
				}
			}
		case d.Route != Local && d.Route != Unavailable:
			t.Fatalf("route %q", d.Route)
		}
	})
}

var validRules = map[Rule]bool{RuleNotResource: true, RuleMarked: true, RuleLocal: true, RuleLocalAway: true,
	RulePeer: true, RuleUnavailable: true, RuleNobody: true}

// fuzzTable has a local server without scheduling.k8s.io/v1alpha2, a
// healthy peer with it, and a departed one.
func fuzzTable() *Table {
	local := caps{"/v1/pods": true, "/v1/pods/exec": true, "/v1/namespaces": true, "apps/v1/deployments": true, "apps/v1/deployments/scale": true}
	capable := caps{"scheduling.k8s.io/v1alpha2/workloads": true, "scheduling.k8s.io/v1alpha2/podgroups": true}
	for k := range local {
		capable[k] = true
	}
	return &Table{
		Local: Server{ID: "local:6443", Healthy: true, Caps: local},
		Peers: []Server{{ID: "peer:6443", Healthy: true, Caps: capable}, {ID: "gone:6443", Departed: true, Caps: capable}},
	}
}
