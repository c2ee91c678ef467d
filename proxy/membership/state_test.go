package membership

import (
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/skewgate/skewgate/proxy/discovery"
	"github.com/skewgate/skewgate/proxy/route"
)

func workloadsDoc() *discovery.Doc {
	return &discovery.Doc{APIs: discovery.Endpoint{Format: discovery.FormatV2, ETag: `"e1"`, Items: []apidiscoveryv2.APIGroupDiscovery{{
		Versions: []apidiscoveryv2.APIVersionDiscovery{{Version: "v1alpha2", Resources: []apidiscoveryv2.APIResourceDiscovery{{
			Resource: "workloads", Scope: apidiscoveryv2.ScopeNamespace, Verbs: []string{"get", "list"},
		}}}},
	}}}}
}

var workloads = route.Request{Kind: route.Resource, Verb: "list", GVR: schema.GroupVersionResource{Group: "scheduling.k8s.io", Version: "v1alpha2", Resource: "workloads"}}

// TestStateRoundTrip: a run saves the peer it saw healthy; the next run,
// which does not list that peer, restores it departed with what it served,
// so its resources answer 503; ETag and fetch time survive.
func TestStateRoundTrip(t *testing.T) {
	u := func(h string) *url.URL { return &url.URL{Scheme: "https", Host: h} }
	path := filepath.Join(t.TempDir(), "sub", "state.json")
	first, err := New(Config{Local: u("127.0.0.1:6443"), Peers: []*url.URL{u("10.0.0.2:6443"), u("10.0.0.3:6443")}})
	if err != nil {
		t.Fatal(err)
	}
	doc := workloadsDoc()
	doc.APIs.Items[0].Name = "scheduling.k8s.io"
	seen := time.Now().Add(-time.Minute)
	first.servers["10.0.0.2:6443"].observe(time.Millisecond, nil, seen) // healthy at once: a new server
	first.store.Record("10.0.0.2:6443", doc, nil)
	first.store.Record("10.0.0.3:6443", doc, nil) // never healthy: not saved
	if err := first.SaveState(path); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("state file: %v, %v", fi, err)
	}

	next, err := New(Config{Local: u("127.0.0.1:6443")})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := next.Restore(path); err != nil || n != 1 {
		t.Fatalf("Restore = %d, %v; want 1 peer", n, err)
	}
	st := next.Discovery().Servers["10.0.0.2:6443"]
	if !st.Restored || st.Doc.APIs.ETag != `"e1"` || st.FetchedAt.IsZero() {
		t.Errorf("restored discovery: %+v", st)
	}
	var departed *time.Time
	for _, s := range next.Statuses() {
		if s.ID == "10.0.0.2:6443" {
			departed = s.Departed
		}
	}
	if departed == nil || !departed.Equal(seen.Truncate(stateResolution)) {
		t.Errorf("restored peer departed at %v, want when it was last healthy (%v, to %s)", departed, seen, stateResolution)
	}
	next.store.Record(next.localID, &discovery.Doc{}, nil) // the local server serves no workloads
	next.publish()
	if d := route.Decide(workloads, next.Table(), false, "c"); d.Route != route.Unavailable || d.Rule != route.RuleUnavailable {
		t.Errorf("workloads after restore: %s rule %s (%s), want unavailable by rule 5", d.Route, d.Rule, d.Reason)
	}
}

func TestRestoreSkipsWhatItCannotUse(t *testing.T) {
	u := func(h string) *url.URL { return &url.URL{Scheme: "https", Host: h} }
	dir := t.TempDir()
	m, err := New(Config{Local: u("127.0.0.1:6443"), DepartGrace: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := m.Restore(filepath.Join(dir, "missing.json")); n != 0 || err != nil {
		t.Errorf("missing file: %d, %v; want nothing and no error", n, err)
	}
	for name, content := range map[string]string{
		"corrupt": `{"version":1,"servers":[`,
		"layout":  `{"version":99,"servers":[]}`,
	} {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(content), 0o600)
		if n, err := m.Restore(p); n != 0 || err == nil || !strings.Contains(err.Error(), p) {
			t.Errorf("%s: %d, %v; want an error naming the file", name, n, err)
		}
	}
	stale := `{"version":1,"servers":[` +
		`{"url":"https://10.0.0.9:6443","lastHealthy":"` + time.Now().Add(-2*time.Minute).Format(time.RFC3339Nano) + `","doc":{}},` +
		`{"url":"https://127.0.0.1:6443","lastHealthy":"` + time.Now().Format(time.RFC3339Nano) + `","doc":{}}]}`
	p := filepath.Join(dir, "stale.json")
	os.WriteFile(p, []byte(stale), 0o600)
	if n, err := m.Restore(p); n != 0 || err != nil || len(m.Statuses()) != 1 {
		t.Errorf("stale peer and the local server: restored %d (%v), %d servers; want none restored", n, err, len(m.Statuses()))
	}
}

// TestRestoredDocIsNotReady: a member whose only discovery is the previous
// run's does not make skewgate ready; a fetch must confirm it.
func TestRestoredDocIsNotReady(t *testing.T) {
	u := func(h string) *url.URL { return &url.URL{Scheme: "https", Host: h} }
	m, err := New(Config{Local: u("127.0.0.1:6443"), Peers: []*url.URL{u("10.0.0.2:6443")}})
	if err != nil {
		t.Fatal(err)
	}
	m.store.Record(m.localID, workloadsDoc(), nil)
	m.servers[m.localID].observe(time.Millisecond, nil, time.Now())
	m.servers["10.0.0.2:6443"].observe(time.Millisecond, nil, time.Now())
	m.store.Restore("10.0.0.2:6443", workloadsDoc(), time.Now().Add(-time.Minute))
	if err := m.Ready(); err == nil {
		t.Fatal("ready on a restored, unconfirmed doc")
	}
	m.store.Record("10.0.0.2:6443", m.Discovery().Servers["10.0.0.2:6443"].Doc, nil) // a 304
	if err := m.Ready(); err != nil {
		t.Fatalf("not ready once confirmed: %v", err)
	}
}

func TestDepartedProbesDoNotRenewLastHealthy(t *testing.T) {
	s := &server{passes: passThreshold - 1}
	first := time.Now().Add(-time.Minute)
	s.observe(time.Millisecond, nil, first)
	s.setDeparted(time.Now())
	s.observe(time.Millisecond, nil, time.Now())
	if !s.lastHealthy.Equal(first) {
		t.Errorf("lastHealthy %v, want %v: a departed server's probes must not renew it", s.lastHealthy, first)
	}
}
