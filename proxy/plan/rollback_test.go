package plan

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	metadatafake "k8s.io/client-go/metadata/fake"

	"github.com/skewgate/skewgate/proxy/membership"
)

const v2Type = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"

// discoveryServer answers /api and /apis as skewgate's merged view does
// (merged: X-Skewgate-Route: merged) with the recorded documents of
// build, plus extra groups in /apis; it fails a request that does not ask
// for aggregated discovery.
func discoveryServer(t *testing.T, build string, merged bool, extra ...apidiscoveryv2.APIGroupDiscovery) *httptest.Server {
	t.Helper()
	docs := map[string][]byte{}
	for _, ep := range []string{"api", "apis"} {
		data, err := os.ReadFile(filepath.Join("..", "discovery", "testdata", build+"-"+ep+"-v2.json"))
		if err != nil {
			t.Fatal(err)
		}
		if ep == "apis" && len(extra) > 0 {
			var list apidiscoveryv2.APIGroupDiscoveryList
			if err := json.Unmarshal(data, &list); err != nil {
				t.Fatal(err)
			}
			list.Items = append(list.Items, extra...)
			if data, err = json.Marshal(list); err != nil {
				t.Fatal(err)
			}
		}
		docs["/"+ep] = data
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		doc, ok := docs[r.URL.Path]
		if !ok || !strings.Contains(r.Header.Get("Accept"), "v=v2") || strings.Contains(r.Header.Get("Accept"), "nopeer") {
			http.Error(w, "want /api or /apis as aggregated v2, merged", http.StatusNotAcceptable)
			return
		}
		if merged {
			w.Header().Set("X-Skewgate-Route", "merged")
		}
		w.Header().Set("Content-Type", v2Type)
		w.Write(doc)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func group(name, version, resource string, scope apidiscoveryv2.ResourceScope) apidiscoveryv2.APIGroupDiscovery {
	return apidiscoveryv2.APIGroupDiscovery{ObjectMeta: metav1.ObjectMeta{Name: name}, Versions: []apidiscoveryv2.APIVersionDiscovery{{
		Version: version, Freshness: apidiscoveryv2.DiscoveryFreshnessCurrent,
		Resources: []apidiscoveryv2.APIResourceDiscovery{{Resource: resource, Scope: scope, Verbs: []string{"get", "list"}}},
	}}}
}

func partial(apiVersion, kind, ns, name string) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: apiVersion, Kind: kind}, ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
}

func apiService(group, version string, service bool) *unstructured.Unstructured {
	spec := map[string]any{"group": group, "version": version}
	if service {
		spec["service"] = map[string]any{"namespace": "kube-system", "name": "metrics-server"}
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
		"metadata": map[string]any{"name": version + "." + group}, "spec": spec,
	}}
}

// labCluster is a 1.36.3 cluster as skewgate's lab runs it, plus a CRD
// (widgets.example.com) and an aggregated API (metrics.k8s.io), which no
// version "lacks": workloads in two namespaces, a mutating admission
// policy, a namespace already stuck Terminating.
func labCluster(t *testing.T, merged bool) *Cluster {
	srv := discoveryServer(t, "v1.36.3", merged,
		group("example.com", "v1", "widgets", apidiscoveryv2.ScopeNamespace),
		group("metrics.k8s.io", "v1beta1", "nodes", apidiscoveryv2.ScopeCluster))
	mdScheme := metadatafake.NewTestScheme()
	if err := metav1.AddMetaToScheme(mdScheme); err != nil {
		t.Fatal(err)
	}
	md := metadatafake.NewSimpleMetadataClient(mdScheme,
		partial("scheduling.k8s.io/v1alpha2", "Workload", "team-a", "w1"),
		partial("scheduling.k8s.io/v1alpha2", "Workload", "team-a", "w2"),
		partial("scheduling.k8s.io/v1alpha2", "Workload", "team-b", "w3"),
		partial("admissionregistration.k8s.io/v1", "MutatingAdmissionPolicy", "", "add-label"),
		partial("apiextensions.k8s.io/v1", "CustomResourceDefinition", "", "widgets.example.com"),
		partial("example.com/v1", "Widget", "team-c", "gadget"),
	)
	scheme := runtime.NewScheme()
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(scheme, map[schema.GroupVersionResource]string{
		apiServicesGVR: "APIServiceList", serviceMonitorsGVR: "ServiceMonitorList",
	}, apiService("metrics.k8s.io", "v1beta1", true), apiService("scheduling.k8s.io", "v1alpha2", false))
	kube := fake.NewClientset(
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}, Status: corev1.NamespaceStatus{Phase: corev1.NamespaceActive}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-b"}, Status: corev1.NamespaceStatus{Phase: corev1.NamespaceActive}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "old"}, Status: corev1.NamespaceStatus{Phase: corev1.NamespaceTerminating,
			Conditions: []corev1.NamespaceCondition{
				{Type: corev1.NamespaceDeletionDiscoveryFailure, Status: corev1.ConditionTrue, Message: "unable to retrieve the complete list of server APIs"},
				{Type: corev1.NamespaceContentRemaining, Status: corev1.ConditionFalse},
			}}},
	)
	return &Cluster{Kube: kube, Dynamic: dyn, Metadata: md, HTTP: srv.Client(), Host: srv.URL, Admin: http.DefaultClient}
}

// labReleases are what the lab's skewgates record from its servers.
func labReleases(t *testing.T) []membership.Release {
	return []membership.Release{recorded(t, "v1.35.4"), recorded(t, "v1.36.3")}
}

// metricsServer is a node's admin listener serving /metrics.
func metricsServer(t *testing.T, text string) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		fmt.Fprint(w, text)
	}))
	t.Cleanup(srv.Close)
	return srv
}

const nodeMetrics = `# HELP skewgate_requests_total Requests.
# TYPE skewgate_requests_total counter
skewgate_requests_total{code="200",group="scheduling.k8s.io",resource="workloads",route="peer",verb="list",version="v1alpha2"} 40
skewgate_requests_total{code="200",group="scheduling.k8s.io",resource="workloads",route="peer",verb="watch",version="v1alpha2"} 2
skewgate_requests_total{code="200",group="",resource="pods",route="local",verb="list",version="v1"} 900
`

// TestRollbackPlan: a rollback of the lab's 1.36.3 cluster to 1.35 takes
// away exactly the four types 1.36 added (not the CRD's, not the
// aggregated API's), counts their objects per namespace from metadata,
// names the namespaces a deletion would strand and the one already
// stuck, and sums the nodes' request counters (one node unreachable).
func TestRollbackPlan(t *testing.T) {
	c := labCluster(t, true)
	target, err := TargetOf("v1.35", labReleases(t))
	if err != nil {
		t.Fatal(err)
	}
	a, b := metricsServer(t, nodeMetrics), metricsServer(t, nodeMetrics)
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()
	usage, errs := ScrapeUsage(context.Background(), c, []Node{{Admin: a.URL}, {Admin: b.URL}, {Admin: down.URL}})
	if usage == nil || len(errs) != 1 || !strings.Contains(usage.Source(), "2 of 3 nodes") {
		t.Fatalf("ScrapeUsage = %v, %v", usage, errs)
	}
	p, err := Rollback(context.Background(), c, target, usage)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, lt := range p.Lacking {
		got = append(got, lt.Resource)
	}
	want := []string{
		"admissionregistration.k8s.io/v1/mutatingadmissionpolicies",
		"admissionregistration.k8s.io/v1/mutatingadmissionpolicybindings",
		"scheduling.k8s.io/v1alpha2/podgroups",
		"scheduling.k8s.io/v1alpha2/workloads",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("lacking = %v\nwant %v", got, want)
	}
	if !strings.HasPrefix(p.Discovery, "skewgate's merged") || p.To != "v1.35" || p.TargetFrom != "v1.35.4" {
		t.Errorf("plan header: %q %q %q", p.To, p.TargetFrom, p.Discovery)
	}
	mut, wl := p.Lacking[0], p.Lacking[3]
	if mut.Namespaced || *mut.Objects != 1 || len(mut.Namespaces) != 0 || len(mut.TargetVersions) != 0 {
		t.Errorf("mutatingadmissionpolicies: %+v", mut)
	}
	if !wl.Namespaced || *wl.Objects != 3 || !slices.Equal(wl.Namespaces, []NamespaceCount{{"team-a", 2}, {"team-b", 1}}) {
		t.Errorf("workloads: objects %v in %v", *wl.Objects, wl.Namespaces)
	}
	if wl.Requests["list"] != 80 || wl.Requests["watch"] != 4 {
		t.Errorf("workloads requests = %v, want list 80 watch 4 (two nodes)", wl.Requests)
	}
	if r := p.Lacking[2].Requests; r == nil || len(r) != 0 {
		t.Errorf("podgroups requests = %v, want known and none", r)
	}
	var names []string
	for _, n := range p.Namespaces {
		names = append(names, n.Name)
	}
	if !slices.Equal(names, []string{"old", "team-a", "team-b"}) {
		t.Fatalf("namespaces = %v", names)
	}
	old, teamA := p.Namespaces[0], p.Namespaces[1]
	if !old.Terminating || old.Risk != riskTerminating || len(old.Conditions) != 1 || !strings.HasPrefix(old.Conditions[0], "NamespaceDeletionDiscoveryFailure: ") {
		t.Errorf("old: %+v", old)
	}
	if teamA.Terminating || teamA.Objects != 2 || teamA.Risk != riskHolds || !slices.Equal(teamA.Holds, []string{"scheduling.k8s.io/v1alpha2/workloads"}) {
		t.Errorf("team-a: %+v", teamA)
	}

	var out strings.Builder
	p.WriteTable(&out)
	for _, s := range []string{"scheduling.k8s.io/v1alpha2/workloads", "team-a(2),team-b(1)", "list=80 watch=4", "(cluster-scoped)", "NamespaceDeletionDiscoveryFailure"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("table lacks %q:\n%s", s, out.String())
		}
	}
}

// TestRollbackPlanUnknowns: without usage the requests are unknown (null
// in JSON, "unknown" in the table); discovery a kube-apiserver answered
// itself says so; a target that serves everything lacks nothing.
func TestRollbackPlanUnknowns(t *testing.T) {
	c := labCluster(t, false)
	target := mustTarget(t, "v1.35.4", labReleases(t)...)
	p, err := Rollback(context.Background(), c, target, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(p.Discovery, "one kube-apiserver") || p.Usage != "unknown" {
		t.Errorf("discovery %q usage %q", p.Discovery, p.Usage)
	}
	data, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	var back struct {
		Lacking []map[string]any `json:"lacking"`
	}
	if err := json.Unmarshal(data, &back); err != nil || len(back.Lacking) != 4 {
		t.Fatalf("json: %v, %s", err, data)
	}
	if r, ok := back.Lacking[3]["requests"]; !ok || r != nil {
		t.Errorf("json requests = %v (present %v), want null", r, ok)
	}
	var out strings.Builder
	p.WriteTable(&out)
	if !strings.Contains(out.String(), "unknown") {
		t.Errorf("table:\n%s", out.String())
	}

	same := mustTarget(t, "v1.36", labReleases(t)...)
	p, err = Rollback(context.Background(), c, same, nil)
	if err != nil || len(p.Lacking) != 0 {
		t.Fatalf("to 1.36: %v, lacking %v", err, p.Lacking)
	}
	// Only the stuck namespace remains worth knowing.
	if len(p.Namespaces) != 1 || p.Namespaces[0].Name != "old" {
		t.Errorf("namespaces = %+v", p.Namespaces)
	}
}
