package route

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestClassify(t *testing.T) {
	c := NewClassifier()
	workloads := schema.GroupVersionResource{Group: "scheduling.k8s.io", Version: "v1alpha2", Resource: "workloads"}
	pods := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	cases := []struct {
		method, path string
		want         Request
	}{
		{"GET", "/apis/scheduling.k8s.io/v1alpha2/namespaces/default/workloads", Request{Kind: Resource, Verb: "list", GVR: workloads, Namespace: "default"}},
		{"GET", "/apis/scheduling.k8s.io/v1alpha2/namespaces/default/workloads?watch=true", Request{Kind: Resource, Verb: "watch", GVR: workloads, Namespace: "default", longRunning: true}},
		{"GET", "/apis/scheduling.k8s.io/v1alpha2/workloads", Request{Kind: Resource, Verb: "list", GVR: workloads}},
		{"POST", "/apis/scheduling.k8s.io/v1alpha2/namespaces/default/workloads", Request{Kind: Resource, Verb: "create", GVR: workloads, Namespace: "default"}},
		{"DELETE", "/apis/scheduling.k8s.io/v1alpha2/namespaces/default/workloads/w", Request{Kind: Resource, Verb: "delete", GVR: workloads, Namespace: "default", Name: "w"}},
		{"GET", "/api/v1/namespaces/default/pods/p/log", Request{Kind: Resource, Verb: "get", GVR: pods, Subresource: "log", Namespace: "default", Name: "p", longRunning: true}},
		{"GET", "/api/v1/namespaces/default/pods/p/proxy/x", Request{Kind: Resource, Verb: "get", GVR: pods, Subresource: "proxy", Namespace: "default", Name: "p", longRunning: true}},
		{"GET", "/api/v1/pods/foo", Request{Kind: Resource, Verb: "get", GVR: pods, Name: "foo"}},
		{"PATCH", "/api/v1/namespaces/default/configmaps/c", Request{Kind: Resource, Verb: "patch", GVR: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, Namespace: "default", Name: "c"}},
		{"POST", "/api/v1/namespaces/default/pods/p/exec", Request{Kind: Resource, Verb: "create", GVR: pods, Subresource: "exec", Namespace: "default", Name: "p", longRunning: true}},
		{"GET", "/api/v1/namespaces", Request{Kind: Resource, Verb: "list", GVR: schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}}},
		{"GET", "/api", Request{Kind: DiscoveryRoot, Verb: "get"}},
		{"GET", "/apis", Request{Kind: DiscoveryRoot, Verb: "get"}},
		{"GET", "/api/v1", Request{Kind: DiscoveryGroup, Verb: "get", GV: schema.GroupVersion{Version: "v1"}}},
		{"GET", "/apis/scheduling.k8s.io", Request{Kind: DiscoveryGroup, Verb: "get", GV: schema.GroupVersion{Group: "scheduling.k8s.io"}}},
		{"GET", "/apis/scheduling.k8s.io/v1alpha2", Request{Kind: DiscoveryGroup, Verb: "get", GV: workloads.GroupVersion()}},
		{"GET", "/openapi/v3/apis/scheduling.k8s.io/v1alpha2", Request{Kind: OpenAPIGroupVersion, Verb: "get", GV: workloads.GroupVersion()}},
		{"GET", "/openapi/v3/api/v1", Request{Kind: OpenAPIGroupVersion, Verb: "get", GV: schema.GroupVersion{Version: "v1"}}},
		{"GET", "/version", Request{Kind: Other, Verb: "get"}},
		{"GET", "/healthz", Request{Kind: Other, Verb: "get"}},
		{"GET", "/openapi/v3", Request{Kind: OpenAPIRoot, Verb: "get"}},
		{"GET", "/openapi/v2", Request{Kind: Other, Verb: "get"}},
	}
	for _, tc := range cases {
		got, err := c.Classify(httptest.NewRequest(tc.method, tc.path, nil))
		if err != nil {
			t.Errorf("%s %s: %v", tc.method, tc.path, err)
			continue
		}
		got.Path = ""
		if got != tc.want {
			t.Errorf("%s %s = %+v, want %+v", tc.method, tc.path, got, tc.want)
		}
	}
}

func FuzzClassify(f *testing.F) {
	for _, p := range []string{"/apis/a/b/namespaces/c/d/e/f", "/api/v1/namespaces//pods", "/apis//", "/openapi/v3/apis/x/y", "/%2e%2e/apis", "/apis/g/v/watch/namespaces/n/r"} {
		f.Add("GET", p, "watch=true")
	}
	c := NewClassifier()
	f.Fuzz(func(t *testing.T, method, path, query string) {
		r := &http.Request{Method: method, URL: &url.URL{Path: path, RawQuery: query}}
		req, err := c.Classify(r.WithContext(t.Context()))
		if err != nil {
			return
		}
		Decide(req, table(caps{}, peer("b", true, 0, caps{})), false, "k")
	})
}

// caps is a set of "group/version/resource[/sub]" strings.
type caps map[string]bool

func (c caps) Serves(gvr schema.GroupVersionResource, sub string) bool {
	k := gvr.Group + "/" + gvr.Version + "/" + gvr.Resource
	if sub != "" {
		k += "/" + sub
	}
	return c[k]
}
func (c caps) ServesGroupVersion(gv schema.GroupVersion) bool {
	for k := range c {
		if _, v := gvOf(k); v == gv.Group+"/"+gv.Version {
			return true
		}
	}
	return false
}

func (c caps) ServesGroup(g string) bool {
	for k := range c {
		if group, _ := gvOf(k); group == g {
			return true
		}
	}
	return false
}

// Namespaced: in these tables every resource but namespaces and nodes is
// namespaced.
func (c caps) Namespaced(gvr schema.GroupVersionResource) (bool, bool) {
	if !c.Serves(gvr, "") {
		return false, false
	}
	return gvr.Resource != "namespaces" && gvr.Resource != "nodes", true
}

func (c caps) Resources(gv schema.GroupVersion) []string {
	var out []string
	for k := range c {
		if _, v := gvOf(k); v == gv.Group+"/"+gv.Version {
			out = append(out, strings.SplitN(k, "/", 3)[2])
		}
	}
	slices.Sort(out)
	return out
}

// gvOf splits a caps key into its group and group/version.
func gvOf(k string) (group, gv string) {
	p := strings.SplitN(k, "/", 3)
	return p[0], p[0] + "/" + p[1]
}

func peer(id string, healthy bool, lat time.Duration, c Capabilities) Server {
	return Server{ID: id, Healthy: healthy, Latency: lat, Caps: c}
}

func table(local Capabilities, peers ...Server) *Table {
	return &Table{Local: Server{ID: "a", Healthy: true, Caps: local}, Peers: peers}
}

func TestDecide(t *testing.T) {
	oldCaps := caps{"/v1/pods": true, "/v1/pods/log": true}
	newCaps := caps{"/v1/pods": true, "/v1/pods/log": true, "/v1/pods/resize": true, "scheduling.k8s.io/v1alpha2/workloads": true}
	workloads := Request{Kind: Resource, Verb: "list", GVR: schema.GroupVersionResource{Group: "scheduling.k8s.io", Version: "v1alpha2", Resource: "workloads"}}
	pods := Request{Kind: Resource, Verb: "get", GVR: schema.GroupVersionResource{Version: "v1", Resource: "pods"}}
	resize := pods
	resize.Subresource = "resize"
	widgets := Request{Kind: Resource, Verb: "list", GVR: schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}}
	groupOnly := Request{Kind: DiscoveryGroup, Verb: "get", GV: schema.GroupVersion{Group: "scheduling.k8s.io"}}
	openapi := Request{Kind: OpenAPIGroupVersion, Verb: "get", GV: schema.GroupVersion{Group: "scheduling.k8s.io", Version: "v1alpha2"}}

	departed := peer("c", true, 0, newCaps)
	departed.Departed = true
	unknown := peer("u", false, 0, nil)
	unknown.Unknown = true
	restarting := peer("r", false, 0, oldCaps) // went down: may come back on another version
	restarting.Unknown = true
	returned := peer("ret", true, 0, oldCaps) // back, its discovery not read again yet
	returned.Unknown = true
	rolledBack := peer("rb", true, 0, oldCaps) // came back on the old version, without workloads
	rolledBack.Lost = newCaps
	localRolledBack := table(oldCaps)
	localRolledBack.Local.Lost = newCaps
	// withServed is t where some member served c within the grace.
	withServed := func(c Capabilities, t *Table) *Table {
		t.Served = c
		return t
	}
	monitoring := Request{Kind: Resource, Verb: "get", GVR: schema.GroupVersionResource{Group: "monitoring.coreos.com", Version: "v1", Resource: "prometheuses"}}
	monitoringGroup := Request{Kind: DiscoveryGroup, Verb: "get", GV: schema.GroupVersion{Group: "monitoring.coreos.com", Version: "v1"}}
	workloadsGroup := Request{Kind: DiscoveryGroup, Verb: "get", GV: schema.GroupVersion{Group: "scheduling.k8s.io", Version: "v1alpha2"}}
	away := func(local Capabilities, peers ...Server) *Table {
		t := table(local, peers...)
		t.Local.Healthy = false
		return t
	}
	admission := caps{"admissionregistration.k8s.io/v1/validatingadmissionpolicies": true}
	admissionNew := caps{"admissionregistration.k8s.io/v1/validatingadmissionpolicies": true, "admissionregistration.k8s.io/v1/mutatingadmissionpolicies": true}
	admissionGV := Request{Kind: DiscoveryGroup, Verb: "get", GV: schema.GroupVersion{Group: "admissionregistration.k8s.io", Version: "v1"}}
	admissionOpenAPI := admissionGV
	admissionOpenAPI.Kind = OpenAPIGroupVersion
	create := pods
	create.Verb = "create"
	cases := []struct {
		name     string
		req      Request
		t        *Table
		fromPeer bool
		route    Route
		rule     Rule
		servers  []string
	}{
		{"non-resource", Request{Kind: Other, Verb: "get"}, table(oldCaps, peer("b", true, 0, newCaps)), false, Local, "1", []string{"a"}},
		{"verified peer", workloads, table(oldCaps, peer("b", true, 0, newCaps)), true, Local, "2", []string{"a"}},
		{"local serves", pods, table(oldCaps, peer("b", true, 0, newCaps)), false, Local, "3", []string{"a"}},
		{"local discovery unknown", workloads, table(nil, peer("b", true, 0, newCaps)), false, Local, "3", []string{"a"}},
		{"peer serves", workloads, table(oldCaps, peer("b", true, 0, newCaps)), false, Peer, "4", []string{"b"}},
		{"peer serves subresource", resize, table(oldCaps, peer("b", true, 0, newCaps)), false, Peer, "4", []string{"b"}},
		{"lowest latency first", workloads, table(oldCaps, peer("b", true, 9*time.Millisecond, newCaps), peer("c", true, time.Millisecond, newCaps)), false, Peer, "4", []string{"c", "b"}},
		{"unhealthy peer skipped", workloads, table(oldCaps, peer("b", false, 0, newCaps), peer("c", true, 0, newCaps)), false, Peer, "4", []string{"c"}},
		{"peers down", workloads, table(oldCaps, peer("b", false, 0, newCaps)), false, Unavailable, "5", []string{"b"}},
		{"departed within grace", workloads, table(oldCaps, departed), false, Unavailable, "5", []string{"c"}},
		{"peer discovery unknown past the grace", workloads, table(oldCaps, peer("b", true, 0, nil)), false, Local, "6", []string{"a"}},
		{"peer discovery not known yet, a member served it within the grace", workloads, withServed(newCaps, table(oldCaps, unknown)), false, Unavailable, "5", []string{"u"}},
		{"CRD-presence probe while a peer read before is not known", monitoring, withServed(newCaps, table(oldCaps, restarting)), false, Local, "6", []string{"a"}},
		{"CRD-presence probe while a peer is departed and another read before not known", monitoring, withServed(newCaps, table(oldCaps, departed, restarting)), false, Local, "6", []string{"a"}},
		{"group document never served, a peer read before not known", monitoringGroup, withServed(newCaps, table(oldCaps, restarting)), false, Local, "6", []string{"a"}},
		// A peer never read at all (a first start, or a new apiserver
		// joining, unreachable so far) may serve anything: a new node
		// joining on the new version is how some upgrades go.
		{"peer back from a restart, not re-read yet: it may have come back on the new version", workloads, withServed(oldCaps, table(oldCaps, returned)), false, Unavailable, "5", []string{"ret"}},
		{"peer away, not re-read: its return may be seen late, with the new release's built-in types", workloads, withServed(oldCaps, table(oldCaps, restarting)), false, Unavailable, "5", []string{"r"}},
		{"peer never read, nobody known to serve it", workloads, table(oldCaps, unknown), false, Unavailable, "5", []string{"u"}},
		{"group document served within the grace, a peer read before not known", workloadsGroup, withServed(newCaps, table(oldCaps, restarting)), false, Unavailable, "5", []string{"r"}},
		{"CRD-presence probe while a peer was never read", monitoring, withServed(newCaps, table(oldCaps, unknown)), false, Unavailable, "5", []string{"u"}},
		{"CRD-presence probe while a peer rolled back", monitoring, withServed(newCaps, table(oldCaps, rolledBack)), false, Local, "6", []string{"a"}},
		{"not known yet, another peer serves", workloads, table(oldCaps, unknown, peer("b", true, 0, newCaps)), false, Peer, "4", []string{"b"}},
		{"not known yet, a peer down serves", workloads, table(oldCaps, unknown, peer("b", false, 0, newCaps)), false, Unavailable, "5", []string{"b"}},
		{"not known yet, local serves", pods, table(oldCaps, unknown), false, Local, "3", []string{"a"}},
		{"a peer down may come back serving what a member served", workloads, withServed(newCaps, table(oldCaps, restarting)), false, Unavailable, "5", []string{"r"}},
		{"a peer down, local serves", pods, table(oldCaps, restarting), false, Local, "3", []string{"a"}},
		{"a peer rolled back within the grace", workloads, table(oldCaps, rolledBack), false, Unavailable, "5", []string{"rb"}},
		{"the local server rolled back within the grace", workloads, localRolledBack, false, Unavailable, "5", []string{"a"}},
		{"rolled back, another peer serves", workloads, table(oldCaps, rolledBack, peer("b", true, 0, newCaps)), false, Peer, "4", []string{"b"}},
		{"rolled back, never served it", widgets, table(oldCaps, rolledBack), false, Local, "6", []string{"a"}},
		{"nobody serves", widgets, table(oldCaps, peer("b", true, 0, newCaps)), false, Local, "6", []string{"a"}},
		{"group discovery of peer-only group", groupOnly, table(oldCaps, peer("b", true, 0, newCaps)), false, Peer, "4", []string{"b"}},
		{"openapi of peer-only gv", openapi, table(oldCaps, peer("b", true, 0, newCaps)), false, Peer, "4", []string{"b"}},
		{"openapi of a gv the peer adds a subresource to", Request{Kind: OpenAPIGroupVersion, Verb: "get", GV: schema.GroupVersion{Version: "v1"}}, table(oldCaps, peer("b", true, 0, newCaps)), false, Peer, "4", []string{"b"}},
		{"openapi of a gv both list alike", Request{Kind: OpenAPIGroupVersion, Verb: "get", GV: schema.GroupVersion{Version: "v1"}}, table(oldCaps, peer("b", true, 0, oldCaps)), false, Local, "3", []string{"a"}},
		{"gv document a peer adds to", admissionGV, table(admission, peer("b", true, 0, admissionNew)), false, Peer, "4", []string{"b"}},
		{"openapi document a peer adds to", admissionOpenAPI, table(admission, peer("b", true, 0, admissionNew)), false, Peer, "4", []string{"b"}},
		{"gv document a peer lists less of", admissionGV, table(admissionNew, peer("b", true, 0, admission)), false, Local, "3", []string{"a"}},
		{"gv document, the fuller peer down", admissionGV, table(admission, peer("b", false, 0, admissionNew)), false, Local, "3", []string{"a"}},
		{"local away: a peer serves it", pods, away(oldCaps, peer("b", true, 0, newCaps)), false, Peer, "3a", []string{"b"}},
		{"local away: writes too", create, away(oldCaps, peer("b", true, 0, newCaps)), false, Peer, "3a", []string{"b"}},
		{"local away: no healthy peer serves it", pods, away(oldCaps, peer("b", false, 0, newCaps)), false, Local, "3a", []string{"a"}},
		{"local away, discovery never read", pods, away(nil, peer("b", true, 0, newCaps)), false, Peer, "3a", []string{"b"}},
		{"local away: non-resource stays local", Request{Kind: Other, Verb: "get"}, away(oldCaps, peer("b", true, 0, newCaps)), false, Local, "1", []string{"a"}},
		{"local away: a marked request stays local", pods, away(oldCaps, peer("b", true, 0, newCaps)), true, Local, "2", []string{"a"}},
		{"local away: peer-only type", workloads, away(oldCaps, peer("b", true, 0, newCaps)), false, Peer, "4", []string{"b"}},
		{"local away: nobody serves", widgets, away(oldCaps, peer("b", true, 0, newCaps)), false, Local, "6", []string{"a"}},
	}
	for _, tc := range cases {
		d := Decide(tc.req, tc.t, tc.fromPeer, "client")
		if d.Route != tc.route || d.Rule != tc.rule || !slices.Equal(d.Servers, tc.servers) {
			t.Errorf("%s: got %s rule %s %v (%s), want %s rule %s %v", tc.name, d.Route, d.Rule, d.Servers, d.Reason, tc.route, tc.rule, tc.servers)
		}
		if d.Reason == "" {
			t.Errorf("%s: decision without a reason", tc.name)
		}
	}
}

// A "type not found" 404 means the type is missing only where the request
// takes one of the type's routes, and never through a connect subresource,
// whose answer is a backend's.
func TestAsksForType(t *testing.T) {
	c := caps{"/v1/pods": true, "/v1/pods/proxy": true, "/v1/pods/exec": true, "/v1/pods/log": true, "/v1/namespaces": true, "/v1/nodes": true, "/v1/nodes/proxy": true}
	cl := NewClassifier()
	for _, tc := range []struct {
		path string
		want bool
	}{
		{"/api/v1/namespaces/default/pods", true},
		{"/api/v1/pods", true},
		{"/api/v1/namespaces/default/pods/p", true},
		{"/api/v1/namespaces/default/pods/p/log", true},
		{"/api/v1/pods/foo", false}, // no cluster-scoped route for a namespaced type
		{"/api/v1/nodes/n", true},
		{"/api/v1/namespaces/default/nodes/n", false}, // no namespaced route for a cluster-scoped type
		{"/api/v1/namespaces/default", true},
		{"/api/v1/namespaces/default/pods/p/proxy/healthz", false},
		{"/api/v1/nodes/n/proxy/metrics", false},
		{"/api/v1/namespaces/default/pods/p/exec", false},
		{"/apis/example.com/v1/widgets", false}, // not listed
		{"/healthz", false},
	} {
		req, err := cl.Classify(httptest.NewRequest("GET", tc.path, nil))
		if err != nil {
			t.Fatal(err)
		}
		if got := req.AsksForType(c); got != tc.want {
			t.Errorf("%s: AsksForType = %t, want %t", tc.path, got, tc.want)
		}
	}
}

func TestWatchSticksToOneServer(t *testing.T) {
	newCaps := caps{"scheduling.k8s.io/v1alpha2/workloads": true}
	watch := Request{Kind: Resource, Verb: "watch", GVR: schema.GroupVersionResource{Group: "scheduling.k8s.io", Version: "v1alpha2", Resource: "workloads"}}
	seen := map[string]bool{}
	for i := 0; i < 50; i++ {
		client := string(rune('a' + i%26))
		first := Decide(watch, table(caps{}, peer("b", true, time.Duration(i), newCaps), peer("c", true, time.Duration(50-i), newCaps)), false, client).Servers[0]
		again := Decide(watch, table(caps{}, peer("c", true, 0, newCaps), peer("b", true, 0, newCaps)), false, client).Servers[0]
		if first != again {
			t.Fatalf("client %s: watch went to %s, then %s, while the capable set did not change", client, first, again)
		}
		seen[first] = true
	}
	if len(seen) != 2 {
		t.Errorf("all clients' watches on %v: stickiness must still spread clients", seen)
	}
}
