package plan

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	metadatafake "k8s.io/client-go/metadata/fake"

	"github.com/skewgate/skewgate/proxy/admin"
	"github.com/skewgate/skewgate/proxy/discovery"
	"github.com/skewgate/skewgate/proxy/membership"
)

// recorded is the release a node's skewgate records from a real server of
// build (proxy/discovery/testdata), with extra groups in /apis: what
// membership keeps in the state file and /debug/routes shows.
func recorded(t *testing.T, build string, extra ...apidiscoveryv2.APIGroupDiscovery) membership.Release {
	t.Helper()
	doc := &discovery.Doc{}
	for _, ep := range []string{"api", "apis"} {
		data, err := os.ReadFile(filepath.Join("..", "discovery", "testdata", build+"-"+ep+"-v2.json"))
		if err != nil {
			t.Fatal(err)
		}
		var list apidiscoveryv2.APIGroupDiscoveryList
		if err := json.Unmarshal(data, &list); err != nil {
			t.Fatal(err)
		}
		e := discovery.Endpoint{Format: discovery.FormatV2, Items: list.Items}
		if ep == "api" {
			doc.API = e
		} else {
			e.Items = append(e.Items, extra...)
			doc.APIs = e
		}
	}
	builtIn := map[string]bool{}
	for _, g := range append(doc.API.Items, doc.APIs.Items...) {
		builtIn[g.Name] = true // every group of a recorded default server is its own
	}
	return membership.ReleaseOf(build, "198.18.0.1:6443", time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), discovery.NewCapabilities(doc), builtIn)
}

func mustTarget(t *testing.T, version string, releases ...membership.Release) *Builtin {
	t.Helper()
	b, err := TargetOf(version, releases)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// futuristic is the group of a release skewgate never saw.
var futuristic = group("futuristic.k8s.io", "v1", "widgets", apidiscoveryv2.ScopeNamespace)

// TestRollbackPlanOfANewRelease: a cluster upgraded to a release no
// skewgate build knows (v1.37.2's types plus futuristic.k8s.io) rolls
// back to v1.37: the plan reads what each version served from the nodes'
// skewgates — one down, one that saw only v1.37.2 — and the new
// release's group is what the rollback takes away, its objects counted.
func TestRollbackPlanOfANewRelease(t *testing.T) {
	old, neu := recorded(t, "v1.37.2"), recorded(t, "v1.37.2", futuristic)
	neu.Version = "v1.99.0"
	a := routesServer(t, admin.RoutesView{Releases: []membership.Release{old}})
	b := routesServer(t, admin.RoutesView{Releases: []membership.Release{old, neu}})
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()
	srv := discoveryServer(t, "v1.37.2", true, futuristic)
	mdScheme := metadatafake.NewTestScheme()
	if err := metav1.AddMetaToScheme(mdScheme); err != nil {
		t.Fatal(err)
	}
	c := &Cluster{HTTP: srv.Client(), Host: srv.URL, Admin: http.DefaultClient,
		Kube: fake.NewClientset(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-f"}, Status: corev1.NamespaceStatus{Phase: corev1.NamespaceActive}}),
		Dynamic: dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{apiServicesGVR: "APIServiceList"},
			apiService("futuristic.k8s.io", "v1", false)),
		Metadata: metadatafake.NewSimpleMetadataClient(mdScheme, partial("futuristic.k8s.io/v1", "Widget", "team-f", "w1")),
	}
	releases, errs := ReadReleases(context.Background(), c, []Node{{Admin: a.URL}, {Admin: b.URL}, {Admin: down.URL}})
	if len(errs) != 1 || len(releases) != 2 || releases[0].Version != "v1.37.2" || releases[1].Version != "v1.99.0" {
		t.Fatalf("ReadReleases = %v, %v", releases, errs)
	}
	p, err := Rollback(context.Background(), c, mustTarget(t, "v1.37", releases...), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Lacking) != 1 || p.Lacking[0].Resource != "futuristic.k8s.io/v1/widgets" || *p.Lacking[0].Objects != 1 || p.TargetFrom != "v1.37.2" {
		t.Fatalf("plan: from %s lacking %+v", p.TargetFrom, p.Lacking)
	}
	if len(p.Namespaces) != 1 || p.Namespaces[0].Name != "team-f" || p.Namespaces[0].Risk != riskHolds {
		t.Errorf("namespaces = %+v", p.Namespaces)
	}
	if p, err = Rollback(context.Background(), c, mustTarget(t, "v1.99.0", releases...), nil); err != nil || len(p.Lacking) != 0 {
		t.Errorf("to the release it runs: %v, lacking %v", err, p.Lacking)
	}
	if _, err := TargetOf("v1.36.3", releases); !errors.Is(err, ErrUnknownVersion) || !strings.Contains(err.Error(), "known: v1.37.2, v1.99.0") {
		t.Errorf("a version the cluster never ran: %v; want ErrUnknownVersion naming the known ones", err)
	}
}

// TestTargetOf: a build recorded is itself; another patch of a recorded
// minor is its newest recorded build (a patch release adds no API); a
// pre-release orders before its release.
func TestTargetOf(t *testing.T) {
	rel := func(v string) membership.Release { return membership.Release{Version: v, Types: []string{"v1/pods"}} }
	releases := []membership.Release{rel("v1.35.4"), rel("v1.35.2"), rel("v1.38.0-beta.0"), rel("v1.38.0")}
	for asked, want := range map[string]string{
		"v1.35.2": "v1.35.2", "v1.35.4": "v1.35.4", "1.35": "v1.35.4", "v1.35.9": "v1.35.4",
		"v1.38": "v1.38.0", "v1.38.0-beta.0": "v1.38.0-beta.0", "1.35.2": "v1.35.2",
	} {
		b, err := TargetOf(asked, releases)
		if err != nil || b.RecordedFrom != want || b.Minor != asked {
			t.Errorf("%s: %v, %+v; want %s", asked, err, b, want)
		}
	}
	for _, asked := range []string{"v1.34.1", "v2", "latest", ""} {
		if _, err := TargetOf(asked, releases); !errors.Is(err, ErrUnknownVersion) {
			t.Errorf("%q: %v, want ErrUnknownVersion", asked, err)
		}
	}
	b := mustTarget(t, "v1.35", releases...)
	if !b.Serves(schema.GroupVersionResource{Version: "v1", Resource: "pods"}) || !slices.Equal(b.VersionsOf(schema.GroupResource{Resource: "pods"}), []string{"v1"}) {
		t.Errorf("types: %+v", b)
	}
}
