package plan

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/skewgate/skewgate/proxy/admin"
)

// addSkewgatePods adds a skewgate pod per address (its node named as
// addMirrorPods names it), with a memory limit ("" none) and hostPID.
func addSkewgatePods(t *testing.T, c *Cluster, limits map[string]string, hostPID bool) {
	t.Helper()
	for addr, limit := range limits {
		ctr := corev1.Container{Name: "skewgate"}
		if limit != "" {
			ctr.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(limit)}
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "skewgate-" + addr, Namespace: "kube-system", Labels: map[string]string{"app.kubernetes.io/name": "skewgate"}},
			Spec:       corev1.PodSpec{NodeName: "node-" + addr, HostPID: hostPID, Containers: []corev1.Container{ctr}},
		}
		if err := c.Kube.(*fake.Clientset).Tracker().Add(pod); err != nil {
			t.Fatal(err)
		}
	}
}

func fixedWatches(n int) func(context.Context, netip.AddrPort) (int, error) {
	return func(context.Context, netip.AddrPort) (int, error) { return n, nil }
}

// TestVersionsAcrossNodes: one version is ok; two of adjacent minors (a
// rollout of skewgate) warn; further apart fails; a node that does not
// say, or a build that is not a release, warns.
func TestVersionsAcrossNodes(t *testing.T) {
	for _, tc := range []struct {
		versions map[string]string
		want     Result
	}{
		{map[string]string{"a": "v0.2.1", "b": "v0.2.1"}, OK},
		{map[string]string{"a": "v0.2.1", "b": "v0.2.0"}, Warn},
		{map[string]string{"a": "v0.3.0", "b": "v0.2.4"}, Warn},
		{map[string]string{"a": "v0.4.0", "b": "v0.2.4"}, Fail},
		{map[string]string{"a": "v1.0.0", "b": "v0.9.0"}, Fail},
		{map[string]string{"a": "v0.2.0", "b": ""}, Warn},
		{map[string]string{"a": "v0.2.0", "b": "dev"}, Warn},
	} {
		if got := checkVersions(tc.versions); got.Result != tc.want {
			t.Errorf("%v: %s (%s), want %s", tc.versions, got.Result, got.Reason, tc.want)
		}
	}
}

// TestPreflightFleet: a pod without hostPID warns; memory for the watches
// its apiserver carries is ok at 1,000 watches on 1Gi, warns at 10,000
// (below twice the live memory) and fails at 15,000 (skewgate would shed
// in the window); no limit warns; a kernel without SOCK_DESTROY warns.
func TestPreflightFleet(t *testing.T) {
	ctx := context.Background()
	pod := func(limit string, hostPID bool) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "skewgate-x"}, Spec: corev1.PodSpec{HostPID: hostPID, Containers: []corev1.Container{{Name: "skewgate"}}}}
		if limit != "" {
			p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(limit)}
		}
		return p
	}
	if got := checkHostPID("n", pod("1Gi", false)); got.Result != Warn || !strings.Contains(got.Reason, "skips the sweep") {
		t.Errorf("no hostPID: %+v", got)
	}
	if got := checkHostPID("n", pod("1Gi", true)); got.Result != OK {
		t.Errorf("hostPID: %+v", got)
	}
	for _, tc := range []struct {
		limit   string
		watches int
		want    Result
	}{{"1Gi", 1000, OK}, {"1Gi", 6000, OK}, {"1Gi", 10000, Warn}, {"1Gi", 15000, Fail}, {"1536Mi", 10000, OK}, {"", 10, Warn}} {
		got := checkMemory(ctx, "n", pod(tc.limit, true), nodeA, fixedWatches(tc.watches))
		if got.Result != tc.want {
			t.Errorf("limit %q, %d watches: %s (%s), want %s", tc.limit, tc.watches, got.Result, got.Reason, tc.want)
		}
	}
	if got := checkMemory(ctx, "n", pod("1Gi", true), netip.AddrPort{}, fixedWatches(1)); got.Result != Warn {
		t.Errorf("no apiserver found: %+v", got)
	}
	unsupported := admin.SteeringView{Mode: "auto", Sweep: "unsupported: not supported by this kernel: SOCK_DESTROY (CONFIG_INET_DIAG_DESTROY): operation not supported"}
	if got := checkSweep("n", unsupported); got == nil || got.Result != Warn || !strings.Contains(got.Reason, "CONFIG_INET_DIAG_DESTROY") {
		t.Errorf("sweep unsupported: %+v", got)
	}
	if got := checkSweep("n", admin.SteeringView{}); got != nil {
		t.Errorf("no steering configured: %+v, want no check", got)
	}

	c := kubeadmCluster(t, "")
	addMirrorPods(t, c, map[string]string{"198.18.0.1": "", "198.18.0.2": ""})
	addSkewgatePods(t, c, map[string]string{"198.18.0.1": "1Gi"}, false)
	addSkewgatePods(t, c, map[string]string{"198.18.0.2": "256Mi"}, true)
	v := verdicts(checkPods(ctx, c, PreflightOptions{Watches: fixedWatches(4000)}))
	for k, want := range map[string]Result{
		"node-198.18.0.1/hostPID": Warn, "node-198.18.0.1/memory": OK,
		"node-198.18.0.2/hostPID": OK, "node-198.18.0.2/memory": Fail,
	} {
		if v[k] != want {
			t.Errorf("%s = %q, want %q (all: %v)", k, v[k], want, v)
		}
	}
}

// TestWatchesFromTheAPIServer: the watch count is the sum of
// apiserver_longrunning_requests{verb="WATCH"} on the apiserver's
// /metrics, read with the cluster's client.
func TestWatchesFromTheAPIServer(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		w.Write([]byte(`# HELP apiserver_longrunning_requests [STABLE] Gauge of all active long-running apiserver requests broken out by verb, group, version, resource, scope and component. Not all requests are tracked this way.
# TYPE apiserver_longrunning_requests gauge
apiserver_longrunning_requests{component="apiserver",group="",resource="pods",scope="cluster",subresource="",verb="WATCH",version="v1"} 120
apiserver_longrunning_requests{component="apiserver",group="",resource="configmaps",scope="namespace",subresource="",verb="WATCH",version="v1"} 30
apiserver_longrunning_requests{component="apiserver",group="",resource="pods",scope="namespace",subresource="exec",verb="CONNECT",version="v1"} 2
`))
	}))
	defer srv.Close()
	n, err := scrapeWatches(context.Background(), srv.Client(), netip.MustParseAddrPort(srv.Listener.Addr().String()))
	if err != nil || n != 150 {
		t.Errorf("watches %d, %v; want 150", n, err)
	}
	if _, err := watchesOf([]byte("# TYPE other gauge\nother 1\n")); err == nil {
		t.Error("metrics without the gauge gave a count")
	}
}

// TestSizingIsTheDocumented: the memory check's figures are
// docs/deploy.md's formula.
func TestSizingIsTheDocumented(t *testing.T) {
	page, err := os.ReadFile("../../docs/deploy.md")
	if err != nil {
		t.Fatal(err)
	}
	if idleBytes != 62<<20 || perWatchBytes != 50<<10 || softLimit != 0.75 ||
		!strings.Contains(string(page), "limit ≥ (62 MiB + 50 KiB × watches + 55 KiB × client connections) × 2 / 0.75") {
		t.Error("preflight's memory figures and docs/deploy.md's formula differ")
	}
}
