package membership

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
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
	m, err := New(Config{Local: u("127.0.0.1:6443"), Grace: time.Minute})
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

// rolledBack is a Members whose peer 10.0.0.2 served workloads, went down
// and came back serving less (a rollback), at the clock's time.
func rolledBack(t *testing.T, grace time.Duration, clock *time.Time) *Members {
	t.Helper()
	u := func(h string) *url.URL { return &url.URL{Scheme: "https", Host: h} }
	m, err := New(Config{Local: u("127.0.0.1:6443"), Peers: []*url.URL{u("10.0.0.2:6443")}, Grace: grace})
	if err != nil {
		t.Fatal(err)
	}
	m.now = func() time.Time { return *clock }
	newDoc := workloadsDoc()
	newDoc.APIs.Items[0].Name = "scheduling.k8s.io"
	const b = "10.0.0.2:6443"
	healthy(m, m.localID, &discovery.Doc{}, *clock)
	healthy(m, b, newDoc, *clock)
	s := m.servers[b]
	down := errors.New("readyz: 500")
	s.observe(time.Millisecond, down, *clock)
	s.observe(time.Millisecond, down, *clock)
	m.notePreDown(s)
	healthy(m, b, &discovery.Doc{}, *clock) // back on the old version
	return m
}

// healthy makes server id pass its probes and confirms doc as what it
// serves, as the probe and refresh loops do.
func healthy(m *Members, id string, doc *discovery.Doc, at time.Time) {
	s := m.servers[id]
	s.observe(time.Millisecond, nil, at)
	s.observe(time.Millisecond, nil, at)
	gen := s.confirmable()
	m.store.Record(id, doc, nil)
	m.confirmed(id, s, gen)
	m.publish()
}

// Bug: the rollback grace lived only in memory. A skewgate restarted
// inside it (an OOM, a rollout, the node's kubelet downgrade) answered
// 404 at once for the type the rollback took away. Restored from the
// state file, the grace holds to its original end, and not after.
func TestGraceSurvivesRestart(t *testing.T) {
	clock := time.Now()
	path := filepath.Join(t.TempDir(), "state.json")
	first := rolledBack(t, time.Minute, &clock)
	rolledAt := clock
	if d := route.Decide(workloads, first.Table(), false, "c"); d.Rule != route.RuleUnavailable {
		t.Fatalf("before the restart: rule %s (%s), want 5", d.Rule, d.Reason)
	}
	clock = clock.Add(20 * time.Second)
	if err := first.SaveState(path); err != nil {
		t.Fatal(err)
	}

	clock = clock.Add(10 * time.Second) // skewgate restarts
	u := func(h string) *url.URL { return &url.URL{Scheme: "https", Host: h} }
	next, err := New(Config{Local: u("127.0.0.1:6443"), Peers: []*url.URL{u("10.0.0.2:6443")}, Grace: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	next.now = func() time.Time { return clock }
	if _, err := next.Restore(path); err != nil {
		t.Fatal(err)
	}
	if ds := next.Discovery().Servers[next.localID]; ds.Doc == nil || !ds.Restored {
		t.Errorf("the local server's last document not restored: %+v", ds)
	}
	if d := route.Decide(workloads, next.Table(), false, "c"); d.Rule != route.RuleUnavailable {
		t.Errorf("restored, before any probe: rule %s (%s), want 5", d.Rule, d.Reason)
	}
	// Both servers answer again, on the versions they had.
	healthy(next, next.localID, &discovery.Doc{}, clock)
	healthy(next, "10.0.0.2:6443", &discovery.Doc{}, clock)
	if err := next.Ready(); err != nil {
		t.Fatalf("not ready after both were read: %v", err)
	}
	for _, at := range []time.Duration{0, 59 * time.Second} {
		clock = rolledAt.Add(at)
		next.publish()
		if d := route.Decide(workloads, next.Table(), false, "c"); d.Route != route.Unavailable || d.Rule != route.RuleUnavailable || !slices.Equal(d.Servers, []string{"10.0.0.2:6443"}) {
			t.Errorf("%s into the grace, after the restart: %s rule %s %v (%s), want unavailable by rule 5 from 10.0.0.2", at, d.Route, d.Rule, d.Servers, d.Reason)
		}
	}
	g := next.InGrace()
	if len(g) != 1 || g[0].GVR != workloads.GVR || !g[0].Until.Equal(rolledAt.Add(time.Minute+DiscoverySettle)) || !g[0].Listed.Equal(rolledAt.Add(time.Minute)) {
		t.Errorf("in grace: %+v, want workloads listed until %v, 503 until %v", g, rolledAt.Add(time.Minute), rolledAt.Add(time.Minute+DiscoverySettle))
	}
	clock = rolledAt.Add(time.Minute + DiscoverySettle)
	next.publish()
	if d := route.Decide(workloads, next.Table(), false, "c"); d.Rule != route.RuleNobody {
		t.Errorf("the grace over: rule %s (%s), want the genuine 404 (rule 6)", d.Rule, d.Reason)
	}
	if g := next.InGrace(); len(g) != 0 {
		t.Errorf("in grace after its end and settle: %+v", g)
	}
	// Saved after its end, the grace is not written again.
	if err := next.SaveState(path); err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(path); strings.Contains(string(data), "lostDoc") {
		t.Errorf("a grace that ended is saved: %s", data)
	}
}

// The cluster's override ends every grace that began before it at once,
// or holds it longer; a grace that begins after it is the flag's.
func TestGraceOverride(t *testing.T) {
	clock := time.Now()
	m := rolledBack(t, time.Minute, &clock)
	rolledAt := clock
	rule := func() route.Rule { m.publish(); return route.Decide(workloads, m.Table(), false, "c").Rule }
	m.SetGraceUntil(rolledAt.Add(10 * time.Minute))
	clock = rolledAt.Add(2 * time.Minute)
	if r := rule(); r != route.RuleUnavailable {
		t.Errorf("held to the override, past the flag's minute: rule %s, want 5", r)
	}
	m.SetGraceUntil(clock) // "end it now": discovery drops it now, the 503 ends after the settle
	if r := rule(); r != route.RuleUnavailable || listed(m) {
		t.Errorf("ended by the override: rule %s, listed %t; want 5, not listed, for the settle", r, listed(m))
	}
	clock = clock.Add(DiscoverySettle)
	if r := rule(); r != route.RuleNobody {
		t.Errorf("ended by the override, settled: rule %s, want 6", r)
	}
	m.SetGraceUntil(time.Time{})
	if r := rule(); r != route.RuleNobody {
		t.Errorf("the override removed past the flag's end: rule %s, want 6", r)
	}

	// An override left in the ConfigMap from an earlier rollback does
	// not end the next one.
	later := clock.Add(time.Hour)
	next := rolledBack(t, time.Minute, &later)
	next.SetGraceUntil(clock)
	if r := route.Decide(workloads, next.Table(), false, "c").Rule; r != route.RuleUnavailable {
		t.Errorf("a rollback after an old override: rule %s, want 5 for the flag's grace", r)
	}
}

// The override holds a grace at most MaxGraceOverride after it began,
// however far ahead it is set, and a restart of skewgate (the grace's start
// restored from the state file) keeps that bound where it was.
func TestGraceOverrideBounded(t *testing.T) {
	clock := time.Now()
	m := rolledBack(t, time.Minute, &clock)
	rolledAt := clock
	m.SetGraceUntil(rolledAt.Add(365 * 24 * time.Hour))
	rule := func(m *Members) route.Rule { m.publish(); return route.Decide(workloads, m.Table(), false, "c").Rule }
	clock = rolledAt.Add(MaxGraceOverride - time.Second)
	if r := rule(m); r != route.RuleUnavailable || !listed(m) {
		t.Errorf("within the bound: rule %s, listed %t; want 5, listed", r, listed(m))
	}
	if g := m.InGrace(); len(g) != 1 || !g[0].Listed.Equal(rolledAt.Add(MaxGraceOverride)) {
		t.Errorf("in grace: %+v, want workloads listed until %v", g, rolledAt.Add(MaxGraceOverride))
	}
	path := filepath.Join(t.TempDir(), "state.json")
	if err := m.SaveState(path); err != nil {
		t.Fatal(err)
	}
	saved := clock
	clock = rolledAt.Add(MaxGraceOverride + DiscoverySettle)
	if r := rule(m); r != route.RuleNobody {
		t.Errorf("a year's override, a day and the settle on: rule %s, want 6", r)
	}

	// Restarted within the bound: the grace's start comes back from the
	// state file, and with it the bound.
	clock = saved
	u := func(h string) *url.URL { return &url.URL{Scheme: "https", Host: h} }
	next, err := New(Config{Local: u("127.0.0.1:6443"), Peers: []*url.URL{u("10.0.0.2:6443")}, Grace: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	next.now = func() time.Time { return clock }
	if _, err := next.Restore(path); err != nil {
		t.Fatal(err)
	}
	if u, ok := next.GraceUntil(); !ok || !u.Equal(rolledAt.Add(365*24*time.Hour)) {
		t.Errorf("the override restored: %v %t, want the saved one", u, ok)
	}
	healthy(next, next.localID, &discovery.Doc{}, clock)
	healthy(next, "10.0.0.2:6443", &discovery.Doc{}, clock)
	if r := rule(next); r != route.RuleUnavailable {
		t.Errorf("restarted within the bound: rule %s, want 5", r)
	}
	clock = rolledAt.Add(MaxGraceOverride + DiscoverySettle)
	if r := rule(next); r != route.RuleNobody {
		t.Errorf("restarted, past the bound and the settle: rule %s, want 6", r)
	}
}

// --rollback-grace=0: a rollback's types are absent at once.
func TestNoGrace(t *testing.T) {
	clock := time.Now()
	m := rolledBack(t, NoGrace, &clock)
	if d := route.Decide(workloads, m.Table(), false, "c"); d.Rule != route.RuleNobody {
		t.Errorf("no grace: rule %s (%s), want 6", d.Rule, d.Reason)
	}
}

// A rollback that happens while skewgate restarts (the node's kubelet
// downgrade restarts both) is seen: the restored document is what the
// server served before, and the first read after it answers again judges
// whether it came back serving less.
func TestRollbackWhileRestarting(t *testing.T) {
	clock := time.Now()
	u := func(h string) *url.URL { return &url.URL{Scheme: "https", Host: h} }
	path := filepath.Join(t.TempDir(), "state.json")
	first, err := New(Config{Local: u("127.0.0.1:6443"), Grace: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	first.now = func() time.Time { return clock }
	newDoc := workloadsDoc()
	newDoc.APIs.Items[0].Name = "scheduling.k8s.io"
	healthy(first, first.localID, newDoc, clock)
	if err := first.SaveState(path); err != nil {
		t.Fatal(err)
	}
	next, err := New(Config{Local: u("127.0.0.1:6443"), Grace: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	clock = clock.Add(30 * time.Second)
	next.now = func() time.Time { return clock }
	if _, err := next.Restore(path); err != nil {
		t.Fatal(err)
	}
	healthy(next, next.localID, &discovery.Doc{}, clock) // the local server is back on the old version
	if d := route.Decide(workloads, next.Table(), false, "c"); d.Rule != route.RuleUnavailable || !slices.Equal(d.Servers, []string{next.localID}) {
		t.Errorf("the local server rolled back across the restart: rule %s %v (%s), want 5 from the local server", d.Rule, d.Servers, d.Reason)
	}
	clock = clock.Add(time.Minute + DiscoverySettle)
	next.publish()
	if d := route.Decide(workloads, next.Table(), false, "c"); d.Rule != route.RuleNobody {
		t.Errorf("the grace and its settle over: rule %s, want 6", d.Rule)
	}
}

// The grace metric names the held type and its end, and the override.
func TestGraceMetric(t *testing.T) {
	clock := time.Now()
	m := rolledBack(t, time.Minute, &clock)
	want := fmt.Sprintf(`skewgate_rollback_grace_end_timestamp_seconds{group="scheduling.k8s.io",resource="workloads",version="v1alpha2"} %v`, float64(clock.Add(time.Minute+DiscoverySettle).Unix()))
	if got := gather(t, m); !strings.Contains(got, want) || strings.Contains(got, "override") {
		t.Errorf("metrics lack %q or show an override:\n%s", want, got)
	}
	m.SetGraceUntil(clock.Add(time.Hour))
	if got := gather(t, m); !strings.Contains(got, fmt.Sprintf("skewgate_rollback_grace_override_timestamp_seconds %v", float64(clock.Add(time.Hour).Unix()))) ||
		!strings.Contains(got, fmt.Sprintf("} %v", float64(clock.Add(time.Hour+DiscoverySettle).Unix()))) {
		t.Errorf("after an override an hour on:\n%s", got)
	}
}

func gather(t *testing.T, c prometheus.Collector) string {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, mf := range mfs {
		if !strings.Contains(mf.GetName(), "grace") {
			continue
		}
		expfmt.MetricFamilyToText(&b, mf)
	}
	return b.String()
}

// TestStateFileStatus: the state file's last write is reported, a failed
// one with its error (a path under a regular file cannot be created),
// and a later good write clears it — what preflight reads per node.
func TestStateFileStatus(t *testing.T) {
	u := func(h string) *url.URL { return &url.URL{Scheme: "https", Host: h} }
	m, err := New(Config{Local: u("127.0.0.1:6443"), Peers: []*url.URL{u("10.0.0.2:6443")}})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := m.StateFile(); ok {
		t.Fatal("StateFile reports a file before any was named")
	}
	doc := workloadsDoc()
	doc.APIs.Items[0].Name = "scheduling.k8s.io"
	m.servers["10.0.0.2:6443"].observe(time.Millisecond, nil, time.Now())
	m.store.Record("10.0.0.2:6443", doc, nil)

	dir := t.TempDir()
	blocker := filepath.Join(dir, "file")
	if err := os.WriteFile(blocker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(blocker, "state.json")
	if err := m.SaveState(bad); err == nil {
		t.Fatal("SaveState under a regular file succeeded")
	}
	st, ok := m.StateFile()
	if !ok || st.Path != bad || st.Error == "" || !st.Saved.IsZero() {
		t.Fatalf("after a failed write: %+v, %v", st, ok)
	}
	good := filepath.Join(dir, "state.json")
	if err := m.SaveState(good); err != nil {
		t.Fatal(err)
	}
	if st, _ = m.StateFile(); st.Path != good || st.Error != "" || st.Saved.IsZero() {
		t.Fatalf("after a good write: %+v", st)
	}
}

// Bug: with --kubeconfig the state file is restored before the cluster's
// apiservers are listed, so every peer came back departed, with no doubt
// on its document: a peer that rolled back while skewgate restarted was
// taken to serve what it serves now from the start, and its rolled-back
// type answered 404 at once. Restored before it is listed, a peer still
// comes back as one that went down when it was last healthy, and the
// first read after it is listed again judges whether it serves less.
// Upgraded again inside the grace, it answers the type again.
func TestPeerRollbackWhileRestartingListedLater(t *testing.T) {
	clock := time.Now()
	u := func(h string) *url.URL { return &url.URL{Scheme: "https", Host: h} }
	const b = "10.0.0.2:6443"
	path := filepath.Join(t.TempDir(), "state.json")
	newDoc := workloadsDoc()
	newDoc.APIs.Items[0].Name = "scheduling.k8s.io"
	first, err := New(Config{Local: u("127.0.0.1:6443"), Peers: []*url.URL{u(b)}, Grace: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	first.now = func() time.Time { return clock }
	healthy(first, first.localID, &discovery.Doc{}, clock)
	healthy(first, b, newDoc, clock)
	if err := first.SaveState(path); err != nil {
		t.Fatal(err)
	}

	clock = clock.Add(30 * time.Second) // skewgate restarts; b rolls back meanwhile
	next, err := New(Config{Local: u("127.0.0.1:6443"), Grace: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	next.now = func() time.Time { return clock }
	if n, err := next.Restore(path); err != nil || n != 1 {
		t.Fatalf("restored %d peers (%v), want 1", n, err)
	}
	next.SetPeers([]*url.URL{u(b)}) // the cluster's list, read after the restore
	healthy(next, next.localID, &discovery.Doc{}, clock)
	if err := next.Ready(); err == nil {
		t.Error("ready before the listed peer's discovery was read again")
	}
	healthy(next, b, &discovery.Doc{}, clock) // back on the old version
	if d := route.Decide(workloads, next.Table(), false, "c"); d.Rule != route.RuleUnavailable || !slices.Equal(d.Servers, []string{b}) {
		t.Errorf("the peer rolled back across the restart: rule %s %v (%s), want 5 from %s", d.Rule, d.Servers, d.Reason, b)
	}
	if err := next.Ready(); err != nil {
		t.Errorf("not ready once both were read: %v", err)
	}

	// Upgraded again inside the grace: down, then back serving workloads.
	s := next.servers[b]
	down := errors.New("readyz: 500")
	s.observe(time.Millisecond, down, clock)
	s.observe(time.Millisecond, down, clock)
	next.notePreDown(s)
	next.publish()
	if d := route.Decide(workloads, next.Table(), false, "c"); d.Rule != route.RuleUnavailable {
		t.Errorf("down for its upgrade, inside the grace: rule %s (%s), want 5", d.Rule, d.Reason)
	}
	healthy(next, b, newDoc, clock)
	if d := route.Decide(workloads, next.Table(), false, "c"); d.Route != route.Peer || !slices.Equal(d.Servers, []string{b}) {
		t.Errorf("upgraded again: %s %v rule %s (%s), want the peer", d.Route, d.Servers, d.Rule, d.Reason)
	}
}

// Bug, seen on the lab: a peer inside its rollback's grace that leaves
// the cluster's list (its graceful shutdown for the next upgrade removes
// it from the kubernetes EndpointSlice) took its grace with it: what it
// served before the rollback answered 404 until it was listed again.
// Departed, it still holds them, as it holds what it serves now.
func TestDepartedKeepsItsRollbackGrace(t *testing.T) {
	clock := time.Now()
	m := rolledBack(t, time.Minute, &clock)
	clock = clock.Add(10 * time.Second)
	m.SetPeers(nil)
	if d := route.Decide(workloads, m.Table(), false, "c"); d.Rule != route.RuleUnavailable || !slices.Equal(d.Servers, []string{"10.0.0.2:6443"}) {
		t.Errorf("departed inside its rollback's grace: rule %s %v (%s), want 5 from 10.0.0.2", d.Rule, d.Servers, d.Reason)
	}
	clock = clock.Add(time.Minute)
	m.forgetDeparted(clock)
	m.publish()
	if d := route.Decide(workloads, m.Table(), false, "c"); d.Rule != route.RuleUnavailable || listed(m) {
		t.Errorf("the grace over, in its settle: rule %s (%s), listed %t; want 5, not listed", d.Rule, d.Reason, listed(m))
	}
	clock = clock.Add(DiscoverySettle)
	m.forgetDeparted(clock)
	m.publish()
	if d := route.Decide(workloads, m.Table(), false, "c"); d.Rule != route.RuleNobody {
		t.Errorf("the grace and its settle over: rule %s (%s), want 6", d.Rule, d.Reason)
	}
	if _, ok := m.servers["10.0.0.2:6443"]; ok {
		t.Errorf("the departed server is kept after its grace and settle")
	}
}

// listed reports whether m's merged discovery lists workloads' group.
func listed(m *Members) bool {
	return slices.ContainsFunc(m.Discovery().Merged.APIs().Items, func(g apidiscoveryv2.APIGroupDiscovery) bool { return g.Name == workloads.GVR.Group })
}

// Bug, seen in the 1.36 → 1.37 kubeadm drill (20 dependents deleted while
// their owners existed, with skewgate only): at the grace's end merged
// discovery dropped the rolled-back type and rule 5's 503 became a 404 at
// the same instant. kube-controller-manager's garbage collector still
// mapped the type (it re-reads discovery every 30 s), read its owners,
// took the 404 for "owner gone" and deleted their dependents. Discovery
// now drops the type at the grace's end, and rule 5 answers 503 for
// DiscoverySettle more: a client sees the type absent before it is.
func TestGraceEndsInDiscoveryBeforeThe404(t *testing.T) {
	clock := time.Now()
	m := rolledBack(t, time.Minute, &clock)
	rolledAt := clock
	for _, tc := range []struct {
		at     time.Duration
		listed bool
		rule   route.Rule
	}{
		{0, true, route.RuleUnavailable},
		{time.Minute - time.Second, true, route.RuleUnavailable},
		{time.Minute, false, route.RuleUnavailable},
		{time.Minute + DiscoverySettle - time.Second, false, route.RuleUnavailable},
		{time.Minute + DiscoverySettle, false, route.RuleNobody},
	} {
		clock = rolledAt.Add(tc.at)
		m.publish()
		if d := route.Decide(workloads, m.Table(), false, "c"); d.Rule != tc.rule || listed(m) != tc.listed {
			t.Errorf("%s after the rollback: rule %s (%s), listed in discovery %t; want rule %s, listed %t", tc.at, d.Rule, d.Reason, listed(m), tc.rule, tc.listed)
		}
	}
}

// Bug, seen in the kubeadm drill (4 false 404s as node-a came back on
// v1.36.3): kube-apiserver's graceful shutdown takes it out of the
// kubernetes EndpointSlice, and it is listed again only after it is
// ready. Back and healthy but departed, its discovery not re-read yet,
// it was not "not known yet" (only members were): the new version's type
// was nobody's, and the node's own old apiserver answered its 404. A
// departed server that went down and is not re-read since may have come
// back on another version, as a member may.
func TestDepartedBackNotReReadIsUnknown(t *testing.T) {
	clock := time.Now()
	u := func(h string) *url.URL { return &url.URL{Scheme: "https", Host: h} }
	const b = "10.0.0.2:6443"
	m, err := New(Config{Local: u("127.0.0.1:6443"), Peers: []*url.URL{u(b)}, Grace: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	m.now = func() time.Time { return clock }
	healthy(m, m.localID, &discovery.Doc{}, clock)
	healthy(m, b, &discovery.Doc{}, clock) // the old version, as the local one
	s := m.servers[b]
	down := errors.New("readyz: 500")
	s.observe(time.Millisecond, down, clock)
	s.observe(time.Millisecond, down, clock)
	m.notePreDown(s)
	m.SetPeers(nil) // its shutdown took it out of the EndpointSlice
	s.observe(time.Millisecond, nil, clock)
	s.observe(time.Millisecond, nil, clock) // back, on the new version, not re-read yet
	m.publish()
	if d := route.Decide(workloads, m.Table(), false, "c"); d.Rule != route.RuleUnavailable || !slices.Equal(d.Servers, []string{b}) {
		t.Errorf("departed, back, not re-read: rule %s %v (%s), want 5 from %s", d.Rule, d.Servers, d.Reason, b)
	}
	newDoc := workloadsDoc()
	newDoc.APIs.Items[0].Name = "scheduling.k8s.io"
	m.store.Record(b, newDoc, nil)
	m.confirmed(b, s, s.confirmable())
	if d := route.Decide(workloads, m.Table(), false, "c"); d.Route != route.Unavailable {
		t.Errorf("departed, re-read serving it: %s rule %s (%s), want unavailable until listed again", d.Route, d.Rule, d.Reason)
	}
	m.SetPeers([]*url.URL{u(b)})
	if d := route.Decide(workloads, m.Table(), false, "c"); d.Route != route.Peer {
		t.Errorf("listed again: %s rule %s (%s), want the peer", d.Route, d.Rule, d.Reason)
	}
}

// A skewgate that restarts inside the window's hold keeps the window open
// until the hold ends (measured: the kubeadm drill's rollback replaced
// node-a's pod, which went standby and handed its connections back while
// node-b and node-c held the window 10 more minutes); one restarted after
// the hold does not open it.
func TestWindowSurvivesRestart(t *testing.T) {
	u := func(h string) *url.URL { return &url.URL{Scheme: "https", Host: h} }
	members := func() *Members {
		m, err := New(Config{Local: u("127.0.0.1:6443"), Peers: []*url.URL{u("10.0.0.2:6443")}, WindowHold: 10 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	for _, tc := range []struct {
		name string
		ago  time.Duration // since the members last differed
		open bool
	}{{"inside the hold", 3 * time.Minute, true}, {"after the hold", 11 * time.Minute, false}} {
		path := filepath.Join(t.TempDir(), "state.json")
		first := members()
		first.skew.last, first.skew.reason = time.Now().Add(-tc.ago), "versions differ: v1.35.4 on a; v1.36.3 on b"
		if err := first.SaveState(path); err != nil {
			t.Fatal(err)
		}
		next := members()
		if _, err := next.Restore(path); err != nil {
			t.Fatal(err)
		}
		w := next.Window()
		if w.Open != tc.open {
			t.Errorf("%s: restored window open %t (%+v), want %t", tc.name, w.Open, w, tc.open)
		}
		if want := time.Now().Add(10*time.Minute - tc.ago); tc.open && (w.Until.Before(want.Add(-time.Second)) || w.Until.After(want.Add(stateResolution))) {
			t.Errorf("%s: restored window until %s, want %s (up to %s later)", tc.name, w.Until, want, stateResolution)
		}
		if tc.open && !strings.Contains(w.Reason, "versions differ") {
			t.Errorf("%s: restored window's reason %q", tc.name, w.Reason)
		}
	}
}

// Bug, seen in TestKubeadm's runbook step 8 in CI: with the discovery
// settle, rule 5's 503 outlived the end `skewgate routes` named by up to
// Run's 10 s tick — the table was built again only on the tick, while
// routes judged the hold by the clock ("no type in rollback grace", then
// a GET answered 503). Each publish now records the next grace or settle
// end, and Run builds the table again at that instant.
func TestPublishRecordsTheNextGraceEdge(t *testing.T) {
	clock := time.Now()
	m := rolledBack(t, time.Minute, &clock)
	rolledAt := clock
	for _, tc := range []struct {
		at, edge time.Duration
	}{
		{0, time.Minute}, // the grace ends: discovery drops the type
		{time.Minute + time.Second, time.Minute + DiscoverySettle}, // its settle ends: the 404
		{time.Minute + DiscoverySettle - time.Second, time.Minute + DiscoverySettle},
	} {
		clock = rolledAt.Add(tc.at)
		m.publish()
		if got, want := time.Unix(0, m.nextEdge.Load()), rolledAt.Add(tc.edge); got.Sub(want).Abs() > 100*time.Millisecond {
			t.Errorf("%s after the rollback: next edge %s after it, want %s", tc.at, got.Sub(rolledAt), tc.edge)
		}
	}
	// Past the settle's end but not rebuilt yet, routing still answers
	// 503: what routes lists follows the table, not the clock.
	clock = rolledAt.Add(time.Minute + DiscoverySettle)
	if d := route.Decide(workloads, m.Table(), false, "c"); d.Rule != route.RuleUnavailable || len(m.InGrace()) != 1 {
		t.Errorf("at the settle's end, before the rebuild: rule %s, in grace %+v; want 503 and listed", d.Rule, m.InGrace())
	}
	m.publish()
	if d := route.Decide(workloads, m.Table(), false, "c"); d.Rule != route.RuleNobody || len(m.InGrace()) != 0 {
		t.Errorf("at the settle's end, rebuilt: rule %s, in grace %+v; want the 404 and nothing listed", d.Rule, m.InGrace())
	}
	// Every grace and settle over: no edge, Run waits its tick (not a
	// busy loop of publishes).
	clock = rolledAt.Add(time.Hour)
	m.publish()
	if d := m.untilEdge(10 * time.Second); m.nextEdge.Load() != 0 || d != 10*time.Second {
		t.Errorf("no grace left: next edge %d, Run waits %s, want none and the 10s tick", m.nextEdge.Load(), d)
	}
	// Run waits until the edge, a tick at most.
	m.nextEdge.Store(time.Now().Add(300 * time.Millisecond).UnixNano())
	if d := m.untilEdge(10 * time.Second); d < 250*time.Millisecond || d > 302*time.Millisecond {
		t.Errorf("edge in 300ms: Run waits %s", d)
	}
	m.nextEdge.Store(time.Now().Add(time.Hour).UnixNano())
	if d := m.untilEdge(10 * time.Second); d != 10*time.Second {
		t.Errorf("edge in an hour: Run waits %s, want the 10s tick", d)
	}
}

// TestHeld: Held names what a grace or its settle holds, for as long as
// rule 5 answers 503 for it (the settle included: clients act on
// discovery they read up to a refresh ago), and nothing after.
func TestHeld(t *testing.T) {
	clock := time.Now()
	m := rolledBack(t, time.Minute, &clock)
	rolledAt := clock
	for _, tc := range []struct {
		at   time.Duration
		held bool
	}{
		{0, true},
		{time.Minute + time.Second, true}, // the settle
		{time.Minute + DiscoverySettle - time.Second, true},
		{time.Minute + DiscoverySettle, false},
	} {
		clock = rolledAt.Add(tc.at)
		m.publish()
		got := m.Held()
		if (got != "") != tc.held {
			t.Errorf("%s after the rollback: Held() = %q, want held %t", tc.at, got, tc.held)
		}
		if tc.held && !strings.Contains(got, workloads.GVR.String()) {
			t.Errorf("%s after the rollback: Held() = %q, want it to name %s", tc.at, got, workloads.GVR)
		}
	}
}
