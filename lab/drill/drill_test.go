package drill

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"

	"github.com/skewgate/skewgate/lab"
	"github.com/skewgate/skewgate/lab/labtest"
	"github.com/skewgate/skewgate/lab/testenv"
)

var labDir, skewgateBin string

func TestMain(m *testing.M) {
	os.Exit(labtest.Exclusive(m, "drill", func(dir string) int {
		labDir = dir
		klog.SetLogger(logr.Discard()) // informers log every failed list; the drill counts them
		var err error
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		if skewgateBin, err = labtest.BuildSkewgate(ctx, dir); err != nil {
			os.Stderr.WriteString("drill: " + err.Error() + "\n")
			return 1
		}
		code := m.Run()
		if code == 0 {
			os.RemoveAll(dir)
		}
		return code
	}))
}

// The short drill of CI: node-a upgraded and rolled back under the
// workload, without skewgate (false 404s expected: the drill can see them)
// and with skewgate (none), Prometheus checking every dashboard query.
func TestShortDrill(t *testing.T) {
	prom := testenv.RequireCommand(t, "prometheus", "prometheus")
	pq, err := DashboardQueries()
	if err != nil {
		t.Fatal(err)
	}
	root, _ := filepath.Abs(filepath.Join("..", ".."))
	o := Options{Dir: filepath.Join(labDir, "plane"), CacheDir: lab.DefaultCacheDir(), Skewgate: skewgateBin, Short: true,
		Modes: []string{ModeNone, ModeSkewgate}, Prometheus: prom, MonitoringDir: filepath.Join(root, "deploy", "monitoring"),
		Queries: pq, OutDir: t.TempDir(), Progress: testWriter{t}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	results, err := Run(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	none, sg := results[0].Total(), results[1].Total()
	t.Logf("no skewgate: %d requests, %d false 404s, %d gaps; skewgate: %d requests, %d false 404s, %d gaps, %d 503s",
		none.Requests, none.False404, none.Gaps, sg.Requests, sg.False404, sg.Gaps, sg.Unavailable)
	if none.False404 == 0 {
		t.Error("without skewgate the drill saw no false 404: it cannot tell")
	}
	if sg.False404 != 0 {
		t.Errorf("with skewgate: %d false 404s", sg.False404)
	}
	if sg.Requests < 500 || sg.Errors > 0 {
		t.Errorf("with skewgate: %d requests, %d other errors", sg.Requests, sg.Errors)
	}
	t.Logf("pinned clients: %d of %d failed without skewgate, %d of %d with skewgate (rule 3a); 404s in the grace %d and %d",
		none.PinnedFailed, none.Pinned, sg.PinnedFailed, sg.Pinned, none.Grace404, sg.Grace404)
	if sg.Grace404 != 0 {
		t.Errorf("with skewgate: %d 404s in the grace", sg.Grace404)
	}
	// Through node-a's two restarts (the upgrade and the rollback) a
	// pinned client's request may fail only by the routing contract's
	// rule 5 (a 503 while the returned server's discovery is read again:
	// it may serve another version's types) or as a request in flight
	// when a server closed its connection (a 503 "unreachable", never sent
	// twice; at most a couple per restart). lab/e2e's TestXLocalRestart
	// holds the graceful restart of a server whose types peers serve to 0.
	var inFlight, other []string
	for _, e := range results[1].events {
		failed := e.pinned != "" && e.outcome != OK && (e.outcome != Unavailable || e.live)
		switch {
		case !failed:
		case e.outcome == Unavailable && (e.cause == CauseRestarting || e.cause == CauseRollback):
		case e.outcome == Unavailable && e.cause == CauseUnreachable:
			inFlight = append(inFlight, e.kind+" "+gvrString(e.gvr))
		default:
			other = append(other, e.kind+" "+gvrString(e.gvr)+": "+e.outcome+" "+e.detail)
		}
	}
	if len(other) > 0 || len(inFlight) > 4 {
		t.Errorf("with skewgate, pinned clients' failures: %d in flight at a restart %v, %d otherwise %v", len(inFlight), inFlight, len(other), other)
	}
	for _, p := range results[1].Monitor.Panels {
		if p.Series == 0 {
			t.Errorf("dashboard query %q returned no series over the drill (%s)", p.Expr, p.Err)
		}
	}
	if err := WriteAll(filepath.Join(o.OutDir, "report.md"), o, results, "go test ./lab/drill"); err != nil {
		t.Errorf("report: %v", err)
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// The kubeadm drill's steps: each node's kubelet right after its control
// plane, the rollback in reverse order, steady phases between.
func TestStepsKubeadm(t *testing.T) {
	for _, p := range Pairs {
		var got []string
		for _, s := range steps(p, false, true, true) {
			got = append(got, s.name)
			if s.node != "" && s.upgrade != (s.version == p.To) {
				t.Errorf("%s: step %q to %s: upgrade %t", p, s.name, s.version, s.upgrade)
			}
		}
		want := []string{"upgrade node-a", "upgrade kubelet node-a", "upgrade node-b", "upgrade kubelet node-b", "upgrade node-c", "upgrade kubelet node-c",
			"steady " + p.To, "rollback node-c", "rollback kubelet node-c", "rollback node-b", "rollback kubelet node-b",
			"rollback node-a", "rollback kubelet node-a", "steady " + p.From + " again"}
		if strings.Join(got, "|") != strings.Join(want, "|") {
			t.Errorf("%s: steps:\n got %q\nwant %q", p, got, want)
		}
		for _, s := range steps(p, true, false, true) {
			if s.kubelet {
				t.Errorf("binary-swap steps have a kubelet step: %+v", s)
			}
		}
		// No kubelet of To built: the upgrade keeps From's, the
		// rollback's kubelet steps (which replace skewgate's pod) stay.
		got = nil
		for _, s := range steps(p, false, true, false) {
			got = append(got, s.name)
		}
		want = []string{"upgrade node-a", "upgrade node-b", "upgrade node-c",
			"steady " + p.To, "rollback node-c", "rollback kubelet node-c", "rollback node-b", "rollback kubelet node-b",
			"rollback node-a", "rollback kubelet node-a", "steady " + p.From + " again"}
		if strings.Join(got, "|") != strings.Join(want, "|") {
			t.Errorf("%s: steps without To's kubelet:\n got %q\nwant %q", p, got, want)
		}
	}
}

func TestInNamespace(t *testing.T) {
	for k, want := range map[string]string{
		"/registry/workloads/drill-ns-3/gc-owner-3":                   "workloads",
		"/registry/configmaps/drill-ns-3/in-ns":                       "configmaps",
		"/registry/apiextensions.k8s.io/customresourcedefinitions/x":  "",
		"/registry/namespaces/drill-ns-3":                             "",
		"/registry/configmaps/drill-ns-30/in-ns":                      "",
		"/registry/scheduling.k8s.io/workloads/drill-ns-3/gc-owner-3": "scheduling.k8s.io/workloads",
	} {
		res, ok := inNamespace(k, "drill-ns-3")
		if res != want || ok != (want != "") {
			t.Errorf("inNamespace(%s) = %q %t, want %q", k, res, ok, want)
		}
	}
}

// Failed requests are a steering change's when they reach its node within
// its span: not before it, not after the node's apiserver stopped, not
// after the span or the node's next change; a 503 nothing could have
// answered is no failure.
func TestHandOffs(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	fail := func(node string, answered, conn float64) event {
		return event{node: node, at: at(answered), outcome: Error, connAt: at(conn), detail: "reset"}
	}
	long := fail("node-a", 9, 1) // sent before node-a engaged, failed at once after
	long.latency = 1500 * time.Millisecond
	hung := fail("node-a", 5, 1) // sent before node-a engaged, failed 4 s after: a hang
	hung.latency = 9 * time.Second
	events := []event{
		fail("node-a", 9, 1), // before node-a engaged
		long,                 // node-a's hand-over, on a kept connection
		hung,
		fail("node-a", 16, 1), // after node-a's apiserver stopped: the restart's
		{node: "node-a", at: at(12), outcome: OK, connAt: at(1)},
		{node: "node-a", at: at(12), outcome: Unavailable, connAt: at(1)}, // no live server served it
		fail("node-b", 12, 12), // node-b's hand-over, a new connection
		fail("node-b", 42, 1),  // past node-b's hand-over span
		fail("", 12, 12),       // reached no node
		fail("node-a", 110, 101),
		{node: "node-a", at: at(120), outcome: Unavailable, live: true, connAt: at(101)}, // node-a's hand-back
		fail("node-a", 428, 101),   // node-a's hand-back, near its span's end
		fail("node-a", 431.5, 101), // past node-a's hand-back span
		fail("node-b", 199, 150),   // node-b's hand-back, cut at 200
		fail("node-b", 210, 150),   // node-b's second hand-over, kept
		fail("node-b", 216, 150),   // after node-b's apiserver stopped
		fail("node-c", 25, 1),      // node-c's apiserver away, on a connection from before: the restart's
		fail("node-c", 26, 22),     // node-c's hand-over, a new connection while it is away
		fail("node-d", 25, 1),      // node-d steered from the start: no change
	}
	changes := []steerChange{
		{nodeEvent{"node-a", at(10)}, true}, {nodeEvent{"node-b", at(11)}, true}, {nodeEvent{"node-c", at(20)}, true},
		{nodeEvent{"node-a", at(100)}, false}, {nodeEvent{"node-b", at(101)}, false}, {nodeEvent{"node-b", at(200)}, true},
		{nodeEvent{"node-e", at(16)}, true}, // after node-a's /readyz failed, before it stopped answering
	}
	stops := []nodeEvent{{"node-a", at(15)}, {"node-a", at(500)}, {"node-b", at(215)}}
	stops = append(stops, nodeEvent{"node-c", at(17)})
	hist := nodeHistory{
		initial: map[string]bool{"node-a": false, "node-b": false, "node-c": false, "node-d": true, "node-e": false},
		changes: changes, stops: stops,
		silent: []nodeEvent{{"node-a", at(18)}, {"node-b", at(216)}},
		ups:    []nodeEvent{{"node-a", at(0)}, {"node-b", at(0)}, {"node-c", at(0)}, {"node-a", at(60)}, {"node-c", at(40)}},
	}
	got := handOffs(events, []string{"node-a", "node-b", "node-c", "node-d", "node-e"}, hist)
	want := []struct {
		over, kept, back, engages, releases int
		before                              bool
	}{{1, 1, 3, 1, 1, true}, {2, 1, 1, 2, 1, true}, {1, 0, 0, 1, 0, false}, {0, 0, 0, 0, 0, true}, {0, 0, 0, 1, 0, true}}
	if len(got) != len(want) {
		t.Fatalf("%d nodes, want %d", len(got), len(want))
	}
	for i, h := range got {
		w := want[i]
		if h.HandOver != w.over || h.Kept != w.kept || h.HandBack != w.back || h.Engages != w.engages || h.Releases != w.releases || h.EngagedBeforeStop() != w.before {
			t.Errorf("%s: hand-over %d (kept %d), hand-back %d, %d engagements, %d releases, engaged before the first stop %t; want %+v",
				h.Node, h.HandOver, h.Kept, h.HandBack, h.Engages, h.Releases, h.EngagedBeforeStop(), w)
		}
	}
	if a := got[0]; !a.Engaged.Equal(at(10)) || !a.Released.Equal(at(100)) || !a.FirstStop.Equal(at(15)) || !a.FirstSilent.Equal(at(18)) {
		t.Errorf("node-a: engaged %s, released %s, first stop %s, first silent %s", a.Engaged, a.Released, a.FirstStop, a.FirstSilent)
	}
}

// The steering log records changes, not the state first read, and calls
// steering handed back once every node was released for the span.
func TestSteeringLog(t *testing.T) {
	l := newSteeringLog()
	t0 := time.Now()
	l.saw("node-a", true, t0)
	l.saw("node-b", false, t0)
	l.saw("node-a", true, t0.Add(time.Second))
	if initial, changes := l.snapshot(); !initial["node-a"] || initial["node-b"] || len(changes) != 0 {
		t.Fatalf("initial %v, changes %v; want node-a steering, no change", initial, changes)
	}
	if l.handedBack(time.Minute, t0.Add(time.Hour)) {
		t.Error("handed back while node-a steers")
	}
	l.saw("node-a", false, t0.Add(2*time.Second))
	if l.handedBack(time.Minute, t0.Add(time.Minute)) {
		t.Error("handed back 58 s after node-a's release, within the span")
	}
	if !l.handedBack(time.Minute, t0.Add(2*time.Second+time.Minute)) {
		t.Error("not handed back a span after node-a's release")
	}
	if _, changes := l.snapshot(); len(changes) != 1 || changes[0].on || changes[0].node != "node-a" {
		t.Errorf("changes %v; want node-a released", changes)
	}
}

// An apiserver stopped is a refused connection; one that answers with a
// failure, or not in time, still runs.
func TestRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	c := &http.Client{Timeout: time.Second}
	_, err = c.Get("http://" + addr + "/readyz")
	if !refused(err) {
		t.Errorf("a closed port: %v, not refused", err)
	}
	hang, err := net.Listen("tcp", "127.0.0.1:0") // accepts, never answers
	if err != nil {
		t.Fatal(err)
	}
	defer hang.Close()
	_, err = (&http.Client{Timeout: 200 * time.Millisecond}).Get("http://" + hang.Addr().String() + "/readyz")
	if err == nil || refused(err) {
		t.Errorf("a listener that never answers: %v, want a timeout, not refused", err)
	}
	if refused(errors.New("https://x/readyz: 500 Internal Server Error: etcd failed")) {
		t.Error("a failed /readyz counts as refused")
	}
}
