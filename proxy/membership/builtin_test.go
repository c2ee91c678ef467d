package membership

import (
	"context"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/skewgate/skewgate/proxy/discovery"
	"github.com/skewgate/skewgate/proxy/route"
)

// apiService is an APIService as kube-aggregator keeps it: managed as
// kube-apiserver's own (automanaged "onstart"), a CRD's ("true"), or an
// aggregated API's (managed "", with a service).
func apiService(group, version, managed string) *unstructured.Unstructured {
	spec := map[string]any{"group": group, "version": version}
	if managed == "" {
		spec["service"] = map[string]any{"namespace": "kube-system", "name": "metrics-server"}
	}
	meta := map[string]any{"name": version + "." + group}
	if managed != "" {
		meta["labels"] = map[string]any{AutoManagedLabel: managed}
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService", "metadata": meta, "spec": spec}}
}

// apiServices is a cluster's APIService list as a dynamic client reads it.
func apiServices(objs ...runtime.Object) *dynamicfake.FakeDynamicClient {
	return dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{APIServicesGVR: "APIServiceList"}, objs...)
}

// The release skewgate never saw: v1.37.2's discovery plus a group of its
// own, futuristic.k8s.io/v1, which kube-apiserver registers as its own
// (a local APIService, automanaged onstart) — and a CRD's group, which
// the aggregator also registers locally (automanaged "true").
var (
	futuristic  = route.Request{Kind: route.Resource, Verb: "list", GVR: schema.GroupVersionResource{Group: "futuristic.k8s.io", Version: "v1", Resource: "widgets"}}
	crdGadgets  = route.Request{Kind: route.Resource, Verb: "list", GVR: schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "gadgets"}}
	newReleaseS = []runtime.Object{
		apiService("", "v1", AutoManagedOnStart), apiService("batch", "v1", AutoManagedOnStart),
		apiService("futuristic.k8s.io", "v1", AutoManagedOnStart),
		apiService("example.com", "v1", "true"), apiService("metrics.k8s.io", "v1beta1", ""),
	}
)

func newReleaseDoc(t *testing.T) *discovery.Doc {
	return &discovery.Doc{API: discovery.Endpoint{Items: fixture(t, "v1.37.2", "api"), Format: discovery.FormatV2},
		APIs: discovery.Endpoint{Items: append(fixture(t, "v1.37.2", "apis"), group("futuristic.k8s.io", "v1", "widgets")), Format: discovery.FormatV2}}
}

func v137Doc(t *testing.T) *discovery.Doc {
	return &discovery.Doc{API: discovery.Endpoint{Items: fixture(t, "v1.37.2", "api"), Format: discovery.FormatV2},
		APIs: discovery.Endpoint{Items: fixture(t, "v1.37.2", "apis"), Format: discovery.FormatV2}}
}

// upgrading is three v1.37.2 members, the cluster's APIServices read (or
// not, with apiServicesRead false), and node b restarting onto the new
// release: down, not read since — unknown.
func upgrading(t *testing.T, apiServicesRead bool) (*Members, string) {
	t.Helper()
	u := func(h string) *url.URL { return &url.URL{Scheme: "https", Host: h} }
	const b, c = "10.0.0.2:6443", "10.0.0.3:6443"
	m, err := New(Config{Local: u("127.0.0.1:6443"), Peers: []*url.URL{u(b), u(c)}, Grace: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for _, id := range []string{m.localID, b, c} {
		healthy(m, id, v137Doc(t), now)
	}
	if apiServicesRead {
		if err := m.WatchAPIServices(t.Context(), apiServices(newReleaseS...)); err != nil {
			t.Fatal(err)
		}
	}
	s := m.servers[b]
	down := errors.New("readyz: connection refused")
	s.observe(time.Millisecond, down, now)
	s.observe(time.Millisecond, down, now)
	m.notePreDown(s)
	m.publish()
	return m, b
}

// TestANewReleaseIsAnUpgrade: a server of a release skewgate never saw,
// with a group only it serves, is handled as an upgrade — from the
// cluster's APIServices, not from what skewgate was compiled with. While
// it restarts onto that release (down, then not read yet), its group
// answers rule 5's 503, not the local server's false 404; once it serves
// it, the members' built-in types differ (the window opens after its
// debounce) and its clients go
// to it (rule 4), and what the release serves is recorded. A CRD's group
// nobody serves keeps its genuine 404. Without the APIServices (the
// compiled groups) each of these went wrong: a 404, no difference.
func TestANewReleaseIsAnUpgrade(t *testing.T) {
	m, b := upgrading(t, true)
	if d := route.Decide(futuristic, m.Table(), false, ""); d.Rule != route.RuleUnavailable || !slices.Contains(d.Servers, b) {
		t.Fatalf("new release's group while %s restarts: %s %v (%s), want rule 5's 503", b, d.Route, d.Servers, d.Reason)
	}
	if d := route.Decide(crdGadgets, m.Table(), false, ""); d.Rule != route.RuleNobody {
		t.Errorf("a CRD's group nobody serves: rule %s (%s), want 6: its 404 is genuine", d.Rule, d.Reason)
	}
	healthy(m, b, newReleaseDoc(t), time.Now())
	m.noteRelease(b, "v1.99.0")
	if d := route.Decide(futuristic, m.Table(), false, ""); d.Rule != route.RulePeer || d.Servers[0] != b {
		t.Errorf("served by %s: %s %v, want rule 4 to it", b, d.Route, d.Servers)
	}
	statuses := map[string]Status{}
	for _, st := range m.Statuses() {
		statuses[st.ID] = st
	}
	if w := windowOf(m.Table(), statuses); !w.Open || !strings.Contains(w.Reason, "futuristic.k8s.io/v1/widgets") {
		t.Errorf("window %+v, want open: the built-in types differ by futuristic.k8s.io/v1/widgets", w)
	}
	rs := m.Releases()
	if len(rs) != 1 || rs[0].Version != "v1.99.0" || !slices.Contains(rs[0].Types, "futuristic.k8s.io/v1/widgets") || !slices.Contains(rs[0].Types, "batch/v1/jobs") {
		t.Errorf("releases = %+v", rs)
	}

	// What the compiled groups made of it.
	m, b = upgrading(t, false)
	if d := route.Decide(futuristic, m.Table(), false, ""); d.Rule != route.RuleNobody {
		t.Fatalf("compiled groups: rule %s, want 6 (the false 404 the APIServices prevent)", d.Rule)
	}
	healthy(m, b, newReleaseDoc(t), time.Now())
	for _, st := range m.Statuses() {
		statuses[st.ID] = st
	}
	if w := windowOf(m.Table(), statuses); w.Open {
		t.Errorf("compiled groups: window %+v, want closed (the window the APIServices open)", w)
	}
}

// windowOf is the window a table makes when it lasted past the debounce.
// The versions are left out, so that what the servers serve is all that
// can open it (as between servers of one version with other
// --runtime-config).
func windowOf(t *route.Table, statuses map[string]Status) Window {
	for id, st := range statuses {
		st.Version = ""
		statuses[id] = st
	}
	var w skewWatch
	rules := windowRules{hold: 10 * time.Minute, debounce: 30 * time.Second}
	t0 := time.Unix(1_800_000_000, 0)
	w.note(skewOf(t, statuses), t0)
	w.note(skewOf(t, statuses), t0.Add(31*time.Second))
	return w.at(t0.Add(31*time.Second), rules, "")
}

// TestBuiltInWithoutAPIServices: when the cluster's APIServices cannot
// be read, the groups an earlier run saw (state file) decide, and without
// them the groups skewgate was compiled with; either way it says so, and
// the list is followed once it is readable.
func TestBuiltInWithoutAPIServices(t *testing.T) {
	u := func(h string) *url.URL { return &url.URL{Scheme: "https", Host: h} }
	m, err := New(Config{Local: u("127.0.0.1:6443")})
	if err != nil {
		t.Fatal(err)
	}
	forbidden := apiServices()
	forbidden.PrependReactor("list", "apiservices", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(APIServicesGVR.GroupResource(), "", errors.New("no RBAC"))
	})
	if err := m.WatchAPIServices(t.Context(), forbidden); !errors.Is(err, errAPIServicesUnreadable) || !apierrors.IsForbidden(err) {
		t.Fatalf("forbidden: %v", err)
	}
	if b := m.BuiltIn(); b.Source != BuiltInCompiled || m.Table().BuiltIn != nil {
		t.Fatalf("forbidden: %+v", b)
	}
	tab := m.Table()
	if !tab.BuiltIn.BuiltIn("batch") || !tab.BuiltIn.BuiltIn("") || tab.BuiltIn.BuiltIn("futuristic.k8s.io") || tab.BuiltIn.BuiltIn("example.com") {
		t.Error("compiled fallback: want batch and core built in, futuristic.k8s.io and example.com not")
	}

	// An earlier run read them: the state file keeps the groups.
	path := filepath.Join(t.TempDir(), "state.json")
	seen, err := New(Config{Local: u("127.0.0.1:6443")})
	if err != nil {
		t.Fatal(err)
	}
	if err := seen.WatchAPIServices(context.Background(), apiServices(newReleaseS...)); err != nil {
		t.Fatal(err)
	}
	if b := seen.BuiltIn(); b.Source != BuiltInFromAPIServices || !slices.Equal(b.Groups, []string{"", "batch", "futuristic.k8s.io"}) {
		t.Fatalf("read: %+v, want the onstart groups only (not the CRD's, not the aggregated API's)", b)
	}
	if err := seen.SaveState(path); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Restore(path); err != nil {
		t.Fatal(err)
	}
	if b := m.BuiltIn(); b.Source != BuiltInFromStateFile || !m.Table().BuiltIn.BuiltIn("futuristic.k8s.io") {
		t.Fatalf("restored: %+v", b)
	}
	if err := m.WatchAPIServices(t.Context(), apiServices(apiService("batch", "v1", AutoManagedOnStart))); err != nil {
		t.Fatal(err)
	}
	if b := m.BuiltIn(); b.Source != BuiltInFromAPIServices || !m.Table().BuiltIn.BuiltIn("futuristic.k8s.io") {
		t.Errorf("read after the restore: %+v; want the apiservices, the restored groups kept", b)
	}
}

// TestReleasesSurviveRestart: what each version served is kept in the
// state file with the built-in groups (layout 1 gains fields only: a file
// without them restores as before), and a restart keeps what it reads
// itself over what it restored.
func TestReleasesSurviveRestart(t *testing.T) {
	u := func(h string) *url.URL { return &url.URL{Scheme: "https", Host: h} }
	path := filepath.Join(t.TempDir(), "state.json")
	first, err := New(Config{Local: u("127.0.0.1:6443")})
	if err != nil {
		t.Fatal(err)
	}
	healthy(first, first.localID, v137Doc(t), time.Now())
	first.noteRelease(first.localID, "v1.37.2")
	if err := first.SaveState(path); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil || !strings.Contains(string(data), `"version":1,`) || !strings.Contains(string(data), `"releases":[{"version":"v1.37.2"`) {
		t.Fatalf("state file: %v\n%.300s", err, data)
	}
	next, err := New(Config{Local: u("127.0.0.1:6443")})
	if err != nil {
		t.Fatal(err)
	}
	healthy(next, next.localID, newReleaseDoc(t), time.Now())
	next.noteRelease(next.localID, "v1.99.0")
	if _, err := next.Restore(path); err != nil {
		t.Fatal(err)
	}
	rs := next.Releases()
	if len(rs) != 2 || rs[0].Version != "v1.37.2" || rs[1].Version != "v1.99.0" || !slices.Equal(rs[0].Types, first.Releases()[0].Types) {
		t.Fatalf("restored releases: %+v", rs)
	}
	if slices.Contains(rs[0].Types, "futuristic.k8s.io/v1/widgets") || len(rs[0].Types) < 50 {
		t.Errorf("v1.37.2: %d types %v", len(rs[0].Types), rs[0].Types)
	}

	// A file of an older skewgate: no releases, no groups.
	if err := os.WriteFile(path, []byte(`{"version":1,"servers":[]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	old, _ := New(Config{Local: u("127.0.0.1:6443")})
	if _, err := old.Restore(path); err != nil || len(old.Releases()) != 0 || old.BuiltIn().Source != BuiltInCompiled {
		t.Errorf("older file: %v, %+v, %+v", err, old.Releases(), old.BuiltIn())
	}
}
