package plan

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/skewgate/skewgate/proxy/admin"
	"github.com/skewgate/skewgate/proxy/membership"
)

// routesServer is a node's admin listener answering /debug/routes with v.
func routesServer(t *testing.T, v admin.RoutesView) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/debug/routes" {
			http.NotFound(w, r)
			return
		}
		json.NewEncoder(w).Encode(v)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// nodeView is /debug/routes as agent.Node.Status and membership fill it.
func nodeView(steering string, targets []netip.AddrPort, sf *membership.StateFileStatus) admin.RoutesView {
	st := &admin.SteeringView{Layout: admin.SteeringLayout, State: steering, Mode: "auto", Sweep: "ok"}
	for _, t := range targets {
		st.Targets = append(st.Targets, t.String())
	}
	return admin.RoutesView{
		Version: "v0.1.0",
		Local:   "127.0.0.1:6443",
		Servers: []admin.ServerView{
			{Status: membership.Status{ID: "127.0.0.1:6443", Local: true, Healthy: true, Version: "v1.35.4"}},
			{Status: membership.Status{ID: "198.18.0.2:6443", Healthy: true, Version: "v1.35.4"}},
		},
		StateFile: sf,
		Window:    &admin.WindowView{Reason: "no upgrade under way"},
		Steering:  st,
	}
}

func kubeadmCluster(t *testing.T, endpoint string, monitors ...runtime.Object) *Cluster {
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "kubernetes", Namespace: "default", Labels: map[string]string{discoveryv1.LabelServiceName: "kubernetes"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"198.18.0.2"}}, {Addresses: []string{"198.18.0.1"}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To[int32](6443)}},
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kubeadm-config", Namespace: "kube-system"},
		Data: map[string]string{"ClusterConfiguration": "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\ncontrolPlaneEndpoint: " + endpoint + "\nkubernetesVersion: v1.35.4\n"}}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{serviceMonitorsGVR: "ServiceMonitorList"}, monitors...)
	return &Cluster{Kube: fake.NewClientset(slice, cm), Dynamic: dyn, Admin: http.DefaultClient}
}

func serviceMonitor() *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
		"metadata": map[string]any{"name": "skewgate", "namespace": "kube-system", "labels": map[string]any{"app.kubernetes.io/name": "skewgate"}},
	}}
}

// promServer answers the up query with one sample per instance.
func promServer(t *testing.T, up map[string]int) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/query" || r.URL.Query().Get("query") != `up{job=~".*skewgate.*"}` {
			http.Error(w, "unexpected query "+r.URL.String(), http.StatusBadRequest)
			return
		}
		var result []string
		for inst, v := range up {
			result = append(result, fmt.Sprintf(`{"metric":{"__name__":"up","job":"skewgate","instance":%q},"value":[1700000000.0,"%d"]}`, inst, v))
		}
		fmt.Fprintf(w, `{"status":"success","data":{"resultType":"vector","result":[%s]}}`, strings.Join(result, ","))
	}))
	t.Cleanup(srv.Close)
	return srv
}

func verdicts(checks []Check) map[string]Result {
	out := map[string]Result{}
	for _, c := range checks {
		out[c.Node+"/"+c.Name] = c.Result
	}
	return out
}

var (
	nodeA = netip.MustParseAddrPort("198.18.0.1:6443")
	nodeB = netip.MustParseAddrPort("198.18.0.2:6443")
	vip   = netip.MustParseAddrPort("198.18.0.10:6443")
)

// TestPreflightHealthy: two nodes whose skewgate steers its advertise
// address (node A also the VIP it holds), with a written state file, a
// control-plane endpoint whose name resolves to the VIP, and both
// targets up in Prometheus: every check ok, nothing failed.
func TestPreflightHealthy(t *testing.T) {
	saved := &membership.StateFileStatus{Path: "/var/lib/skewgate/state.json", Saved: time.Now().Add(-5 * time.Second)}
	a := routesServer(t, nodeView("steering standby: no skew window", []netip.AddrPort{nodeA, vip}, saved))
	b := routesServer(t, nodeView("steering standby: no skew window", []netip.AddrPort{nodeB}, saved))
	c := kubeadmCluster(t, "cp.example.test:6443", serviceMonitor())
	addMirrorPods(t, c, map[string]string{"198.18.0.1": "--goaway-chance=0.02", "198.18.0.2": "--goaway-chance=0.02"})
	addSkewgatePods(t, c, map[string]string{"198.18.0.1": "1Gi", "198.18.0.2": "1Gi"}, true)
	prom := promServer(t, map[string]int{"node-a": 1, "node-b": 1})
	checks, err := Preflight(context.Background(), c, PreflightOptions{
		AdminURLs: []string{a.URL, b.URL}, Prometheus: prom.URL, Watches: fixedWatches(1000),
		LookupHost: func(_ context.Context, host string) ([]string, error) {
			if host != "cp.example.test" {
				return nil, fmt.Errorf("no such host %q", host)
			}
			return []string{"198.18.0.10"}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, ck := range checks {
		if ck.Result != OK {
			t.Errorf("%s %s: %s: %s", ck.Node, ck.Name, ck.Result, ck.Reason)
		}
	}
	v := verdicts(checks)
	for _, k := range []string{a.URL + "/steering", a.URL + "/targets", b.URL + "/state file", b.URL + "/mode", "cluster/control-plane endpoint", "cluster/prometheus",
		"198.18.0.1/goaway-chance", "198.18.0.2/goaway-chance", a.URL + "/sweep", "cluster/skewgate versions",
		"node-198.18.0.1/hostPID", "node-198.18.0.2/memory"} {
		if _, ok := v[k]; !ok {
			t.Errorf("no check %s in %v", k, v)
		}
	}
	if Failed(checks) {
		t.Error("Failed = true")
	}
}

// TestPreflightFailures: each thing that would leave clients unprotected
// in the upgrade fails with its reason — steering not permitted, a state
// file that cannot be written, an unreachable skewgate, a Prometheus
// target down — and what is merely doubtful warns.
func TestPreflightFailures(t *testing.T) {
	good := &membership.StateFileStatus{Path: "/var/lib/skewgate/state.json", Saved: time.Now()}
	bad := &membership.StateFileStatus{Path: "/var/lib/skewgate/state.json", Error: "open /var/lib/skewgate/.state.json.1: read-only file system"}
	a := routesServer(t, nodeView("steering disabled: not permitted: operation not permitted", nil, bad))
	vb := nodeView("steering off (kill switch)", []netip.AddrPort{netip.MustParseAddrPort("10.0.0.9:6443")}, good)
	vb.Window = &admin.WindowView{Open: true, Reason: "members' versions differ"}
	b := routesServer(t, vb)
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()
	c := kubeadmCluster(t, "198.18.0.10:6443") // a VIP nobody steers, no ServiceMonitor
	prom := promServer(t, map[string]int{"node-a": 1, "node-b": 0})
	checks, err := Preflight(context.Background(), c, PreflightOptions{AdminURLs: []string{a.URL, b.URL, gone.URL}, Prometheus: prom.URL})
	if err != nil {
		t.Fatal(err)
	}
	v := verdicts(checks)
	want := map[string]Result{
		a.URL + "/steering":              Fail,
		a.URL + "/state file":            Fail,
		a.URL + "/targets":               Warn,
		b.URL + "/steering":              Warn,
		b.URL + "/mode":                  Warn,
		b.URL + "/targets":               Fail,
		b.URL + "/state file":            OK,
		gone.URL + "/skewgate":           Fail,
		"cluster/control-plane endpoint": Warn,
		"cluster/prometheus":             Fail,
		"cluster/goaway-chance":          Warn, // no mirror pods
	}
	for k, r := range want {
		if v[k] != r {
			t.Errorf("%s = %q, want %q", k, v[k], r)
		}
	}
	if !Failed(checks) {
		t.Error("Failed = false")
	}
	var out strings.Builder
	WriteChecks(&out, checks)
	for _, s := range []string{"read-only file system", "not permitted", "down [node-b]", "steers no advertised address"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("output lacks %q:\n%s", s, out.String())
		}
	}
}

// TestPreflightPrometheusWithoutURL: a ServiceMonitor alone is ok (and
// says scraping is unverified); neither is a warning, not a failure.
func TestPreflightPrometheusWithoutURL(t *testing.T) {
	with := checkPrometheus(context.Background(), kubeadmCluster(t, "", serviceMonitor()), PreflightOptions{}, 2)
	without := checkPrometheus(context.Background(), kubeadmCluster(t, ""), PreflightOptions{}, 2)
	if with.Result != OK || !strings.Contains(with.Reason, "kube-system/skewgate") || without.Result != Warn {
		t.Errorf("with a ServiceMonitor %+v; without %+v", with, without)
	}
}

// TestNodes: without URLs every advertised address gets its admin
// listener on the port; a given URL on an advertised address is that node.
func TestNodes(t *testing.T) {
	adv := []netip.AddrPort{nodeA, nodeB}
	got := Nodes(adv, nil, DefaultAdminPort)
	if len(got) != 2 || got[0].Admin != "https://198.18.0.1:16444" || got[1].Address != nodeB {
		t.Errorf("derived: %+v", got)
	}
	got = Nodes(adv, []string{"https://198.18.0.2:16444/", "http://127.0.0.1:16444"}, DefaultAdminPort)
	if got[0].Address != nodeB || got[0].Admin != "https://198.18.0.2:16444" || got[1].Address.IsValid() || got[1].Name() != "http://127.0.0.1:16444" {
		t.Errorf("given: %+v", got)
	}
	if ts := parseTargets([]string{nodeA.String(), "[fd00::1]:6443", "not an address"}); !slices.Equal(ts, []netip.AddrPort{nodeA, netip.MustParseAddrPort("[fd00::1]:6443")}) {
		t.Errorf("parseTargets = %v", ts)
	}
}

// TestPreflightUnsteered: a node whose apiserver serves addresses skewgate
// does not steer (--steer-address naming the node IP alone, while kube-vip
// holds the VIP on lo) warns, naming them; steering the advertise address
// stays the difference between ok and fail.
func TestPreflightUnsteered(t *testing.T) {
	loVIP := netip.MustParseAddrPort("10.0.0.100:6443")
	st := admin.SteeringView{State: "steering standby: no skew window", Unsteered: []string{loVIP.String()}}
	n := Node{Address: nodeA}
	if c := checkTargets("node-a", n, st, []netip.AddrPort{nodeA}, parseTargets(st.Unsteered), nil); c.Result != Warn ||
		!strings.Contains(c.Reason, "10.0.0.100:6443") || !strings.Contains(c.Reason, "does not steer") {
		t.Errorf("advertise address steered, a VIP not: %+v, want a warning naming the VIP", c)
	}
	if c := checkTargets("node-a", n, st, []netip.AddrPort{loVIP}, []netip.AddrPort{nodeA}, nil); c.Result != Fail || !strings.Contains(c.Reason, "198.18.0.1:6443") {
		t.Errorf("advertise address not steered: %+v, want a failure", c)
	}
	if c := checkTargets("node-a", n, st, []netip.AddrPort{nodeA, loVIP}, nil, nil); c.Result != OK {
		t.Errorf("everything steered: %+v", c)
	}
}

// addMirrorPods adds to c's clientset one kubeadm kube-apiserver mirror
// pod per advertise address, with its extra flag ("" for none).
func addMirrorPods(t *testing.T, c *Cluster, flags map[string]string) {
	t.Helper()
	for addr, flag := range flags {
		args := []string{"kube-apiserver", "--advertise-address=" + addr, "--secure-port=6443"}
		if flag != "" {
			args = append(args, strings.Fields(flag)...)
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "kube-apiserver-" + addr, Namespace: "kube-system",
				Labels:      map[string]string{"component": "kube-apiserver", "tier": "control-plane"},
				Annotations: map[string]string{advertiseAnnotation: addr + ":6443"}},
			Spec:   corev1.PodSpec{NodeName: "node-" + addr, Containers: []corev1.Container{{Name: "kube-apiserver", Command: args}}},
			Status: corev1.PodStatus{PodIP: addr},
		}
		if err := c.Kube.(*fake.Clientset).Tracker().Add(pod); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPreflightGoawayChance: preflight reads every apiserver's
// --goaway-chance from its mirror pod and warns where it is unset (or 0,
// or not a number), advising 0.02 and saying what it costs; without
// mirror pods it says it cannot tell. A warning, never a failure.
func TestPreflightGoawayChance(t *testing.T) {
	c := kubeadmCluster(t, "")
	addMirrorPods(t, c, map[string]string{
		"198.18.0.1": "--goaway-chance=0.02",
		"198.18.0.2": "",
		"198.18.0.3": "--goaway-chance 0",
		"198.18.0.4": "--goaway-chance=often",
		"198.18.0.5": "--goaway-chance=0.001 --goaway-chance=0.01",
	})
	got := map[string]Check{}
	for _, ck := range checkGoaway(context.Background(), c) {
		got[ck.Node] = ck
	}
	for node, want := range map[string]Result{"198.18.0.1": OK, "198.18.0.2": Warn, "198.18.0.3": Warn, "198.18.0.4": Warn, "198.18.0.5": OK} {
		if ck, ok := got[node]; !ok || ck.Result != want || ck.Name != "goaway-chance" {
			t.Errorf("%s: %+v, want %s", node, ck, want)
		}
	}
	for _, s := range []string{"is not set", "--goaway-chance=0.02 for the upgrade window", "once per 50 requests", "TLS handshake"} {
		if !strings.Contains(got["198.18.0.2"].Reason, s) {
			t.Errorf("the warning does not say %q: %s", s, got["198.18.0.2"].Reason)
		}
	}
	if r := got["198.18.0.5"].Reason; !strings.Contains(r, "=0.01") || !strings.Contains(r, "about 100 requests") {
		t.Errorf("the last flag wins: %s", r)
	}
	none := checkGoaway(context.Background(), kubeadmCluster(t, ""))
	if len(none) != 1 || none[0].Node != "cluster" || none[0].Result != Warn || !strings.Contains(none[0].Reason, "no kube-apiserver mirror pod") {
		t.Errorf("no mirror pods: %+v", none)
	}
}
