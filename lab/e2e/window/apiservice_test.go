package window

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/skewgate/skewgate/lab"
)

// The aggregated API one server reaches and its peers do not (a
// metrics-server behind a Service whose backend one apiserver cannot
// route to): the Service's cluster IP is an address of on's own
// namespace, where a stand-in answers discovery; every other node has no
// route to it.
const (
	aggGroup     = "metrics.routine.skewgate.test"
	aggClusterIP = "10.96.200.1"
)

// apiServiceOnOne registers an aggregated API that only node on's
// apiserver can reach, waits until the servers' discovery documents
// differ on it (node on lists it, a peer does not), and returns how to
// remove it all. Without that difference seen the event did not happen,
// and the test fails.
func apiServiceOnOne(t *testing.T, on string) (remove func()) {
	t.Helper()
	backend := aggregatedStandIn(t, on)
	var unroute []func()
	for _, n := range plane.Spec.Nodes {
		if n.Name != on {
			unroute = append(unroute, unreachable(t, n.Name, aggClusterIP))
		}
	}
	object(t, on, "/api/v1/namespaces/kube-system/services", "routine-metrics", true,
		`{"apiVersion":"v1","kind":"Service","metadata":{"name":"routine-metrics","namespace":"kube-system"},
"spec":{"clusterIP":"`+aggClusterIP+`","ports":[{"port":443,"targetPort":443}]}}`)
	// The aggregator's availability check wants a ready endpoint (no
	// controller here makes slices: written by hand, as a selectorless
	// Service's owner would); it then dials the cluster IP.
	object(t, on, "/apis/discovery.k8s.io/v1/namespaces/kube-system/endpointslices", "routine-metrics-1", true,
		`{"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice","metadata":{"name":"routine-metrics-1","namespace":"kube-system",
"labels":{"kubernetes.io/service-name":"routine-metrics"}},"addressType":"IPv4",
"endpoints":[{"addresses":["198.18.0.250"],"conditions":{"ready":true}}],"ports":[{"name":"","port":443,"protocol":"TCP"}]}`)
	object(t, on, "/apis/apiregistration.k8s.io/v1/apiservices", "v1beta1."+aggGroup, true,
		`{"apiVersion":"apiregistration.k8s.io/v1","kind":"APIService","metadata":{"name":"v1beta1.`+aggGroup+`"},
"spec":{"group":"`+aggGroup+`","version":"v1beta1","groupPriorityMinimum":100,"versionPriority":100,
"insecureSkipTLSVerify":true,"service":{"namespace":"kube-system","name":"routine-metrics","port":443}}}`)
	remove = func() {
		object(t, on, "/apis/apiregistration.k8s.io/v1/apiservices", "v1beta1."+aggGroup, false, "")
		object(t, on, "/apis/discovery.k8s.io/v1/namespaces/kube-system/endpointslices", "routine-metrics-1", false, "")
		object(t, on, "/api/v1/namespaces/kube-system/services", "routine-metrics", false, "")
		for _, f := range unroute {
			f()
		}
		backend()
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		lists := map[string]bool{}
		for _, n := range plane.Spec.Nodes {
			lists[n.Name] = discoveryLists(t, n.Name, aggGroup)
		}
		differ := false
		for _, l := range lists {
			differ = differ || l != lists[on]
		}
		if differ {
			t.Logf("%s registered: served in the discovery of %v", aggGroup, lists)
			return remove
		}
		if time.Now().After(deadline) {
			status := apiServiceStatus(t, on)
			remove()
			t.Fatalf("%s: the servers' discovery never differed on it within 90 s (%v; status %s): the event did not happen", aggGroup, lists, status)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// apiServiceStatus is the aggregated API's APIService status as node
// name reads it.
func apiServiceStatus(t *testing.T, name string) string {
	t.Helper()
	n, _ := plane.Node(name)
	c, err := plane.AdminHTTPClient()
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Get(n.URL() + "/apis/apiregistration.k8s.io/v1/apiservices/v1beta1." + aggGroup)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	var o struct {
		Status json.RawMessage `json:"status"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&o); err != nil {
		return err.Error()
	}
	return string(o.Status)
}

// discoveryLists reports whether node name's aggregated discovery lists
// group with a version that is not stale.
func discoveryLists(t *testing.T, name, group string) bool {
	t.Helper()
	n, _ := plane.Node(name)
	c, err := plane.AdminHTTPClient()
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodGet, n.URL()+"/apis", nil)
	req.Header.Set("Accept", "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList")
	resp, err := c.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var doc struct {
		Items []struct {
			Metadata struct{ Name string } `json:"metadata"`
			Versions []struct {
				Freshness string `json:"freshness"`
			} `json:"versions"`
		} `json:"items"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&doc) != nil {
		return false
	}
	for _, g := range doc.Items {
		if g.Metadata.Name != group {
			continue
		}
		for _, v := range g.Versions {
			if v.Freshness != "Stale" {
				return true
			}
		}
	}
	return false
}

// aggregatedStandIn serves the aggregated group's discovery on
// aggClusterIP:443 inside node name's network namespace (the address on
// its lo); it returns how to stop it.
func aggregatedStandIn(t *testing.T, name string) (stop func()) {
	t.Helper()
	h, lo, err := nodeLink(name, "lo")
	if err != nil {
		t.Fatal(err)
	}
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: net.ParseIP(aggClusterIP), Mask: net.CIDRMask(32, 32)}}
	if err = h.AddrAdd(lo, addr); err != nil {
		h.Close()
		t.Fatal(err)
	}
	var ln net.Listener
	err = lab.InNode(name, func() (err error) {
		ln, err = net.Listen("tcp", net.JoinHostPort(aggClusterIP, "443"))
		return err
	})
	if err != nil {
		h.AddrDel(lo, addr)
		h.Close()
		t.Fatal(err)
	}
	gv := aggGroup + "/v1beta1"
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/apis":
			fmt.Fprintf(w, `{"kind":"APIGroupList","apiVersion":"v1","groups":[{"name":%q,"versions":[{"groupVersion":%q,"version":"v1beta1"}],"preferredVersion":{"groupVersion":%q,"version":"v1beta1"}}]}`, aggGroup, gv, gv)
		case "/apis/" + gv:
			fmt.Fprintf(w, `{"kind":"APIResourceList","apiVersion":"v1","groupVersion":%q,"resources":[{"name":"nodes","singularName":"","namespaced":false,"kind":"NodeMetrics","verbs":["get","list"]}]}`, gv)
		default:
			http.NotFound(w, r)
		}
	}))
	srv.Listener.Close()
	srv.Listener = ln
	srv.StartTLS()
	return func() {
		srv.Close()
		h.AddrDel(lo, addr)
		h.Close()
	}
}

// unreachable makes dst unreachable from node name (no packet leaves for
// it) and returns how to undo that.
func unreachable(t *testing.T, name, dst string) (undo func()) {
	t.Helper()
	h, _, err := nodeLink(name, "eth0")
	if err != nil {
		t.Fatal(err)
	}
	r := &netlink.Route{Dst: &net.IPNet{IP: net.ParseIP(dst), Mask: net.CIDRMask(32, 32)}, Type: unix.RTN_UNREACHABLE}
	if err := h.RouteAdd(r); err != nil {
		h.Close()
		t.Fatal(err)
	}
	return func() {
		h.RouteDel(r)
		h.Close()
	}
}
