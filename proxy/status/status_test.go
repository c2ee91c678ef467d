package status_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	certutil "k8s.io/client-go/util/cert"

	"github.com/skewgate/skewgate/proxy/admin"
	"github.com/skewgate/skewgate/proxy/membership"
	"github.com/skewgate/skewgate/proxy/status"
	"github.com/skewgate/skewgate/proxy/status/statustest"
)

// Two nodes as an upgrade sees them: node-a's membership never probed its
// apiservers (unhealthy: degraded) and its steering is on standby; node-b
// is well, steering, in an open window with a type in rollback grace.
func twoNodes(t *testing.T, until time.Time) (a, b *httptest.Server) {
	a = statustest.Serve(t, statustest.Node{
		Local: "198.18.0.1:6443", Peer: "198.18.0.2:6443", Version: "v0.1.0-a",
		Steering: &admin.SteeringView{Layout: admin.SteeringLayout, State: "steering standby: mode auto: no skew window", Mode: "auto",
			Targets: []string{"198.18.0.1:6443"}},
		State: "standby", Lookups: map[string]float64{"lease_expired": 40, "not_target": 900},
	})
	b = statustest.Serve(t, statustest.Node{
		Local: "198.18.0.2:6443", Peer: "198.18.0.1:6443", Version: "v0.1.0-b",
		Steering: &admin.SteeringView{Layout: admin.SteeringLayout, State: "steering on (lease 1.5s): mode auto: skew window open", Mode: "always",
			Targets: []string{"198.18.0.2:6443", "[fd00::2]:6443"}},
		State:   "steering",
		Lookups: map[string]float64{"steered": 120, "lease_expired": 3, "off": 1, "exempt": 2, "not_target": 5000},
		Healthy: true,
		Window:  &admin.WindowView{Open: true, Reason: "versions differ: v1.35.4, v1.36.3", Until: &until},
		Grace:   []membership.GraceType{statustest.Workloads(until.Add(time.Minute), "198.18.0.1:6443")},
	})
	return a, b
}

// options is the operator's config for servers: their CA and the token.
func options(t *testing.T, srv *httptest.Server) status.Options {
	t.Helper()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	return status.Options{Config: &rest.Config{BearerToken: statustest.Token, TLSClientConfig: rest.TLSClientConfig{CAData: ca}}, Timeout: 5 * time.Second}
}

// closedURL is an address nothing listens on.
func closedURL(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := "https://" + ln.Addr().String()
	ln.Close()
	return u
}

func TestGather(t *testing.T) {
	until := time.Now().Add(9 * time.Minute).UTC().Truncate(time.Second)
	a, b := twoNodes(t, until)
	targets := []status.Target{
		{Node: "node-a", Pod: "skewgate-a", URL: a.URL},
		{Node: "node-b", Pod: "skewgate-b", URL: b.URL},
		{Node: "node-c", Pod: "skewgate-c", URL: closedURL(t)},
		{Node: "node-d", Pod: "skewgate-d", Err: errString("pod skewgate-d has no host IP yet (phase \"Pending\")")},
	}
	// Every httptest server has the same certificate: one CA for all.
	c := status.Gather(context.Background(), targets, options(t, a))
	if got := c.Failed(); !slices.Equal(got, []string{"node-c", "node-d"}) {
		t.Errorf("failed %v, want node-c (nothing listens) and node-d (no address)", got)
	}
	if got := c.Degraded(); !slices.Equal(got, []string{"node-a"}) {
		t.Errorf("degraded %v, want node-a (apiservers never probed)", got)
	}
	na, nb, nc := c.Nodes[0], c.Nodes[1], c.Nodes[2]
	if !strings.Contains(nc.Error, "connection refused") || c.Nodes[3].Error != "pod skewgate-d has no host IP yet (phase \"Pending\")" {
		t.Errorf("errors: %q, %q", nc.Error, c.Nodes[3].Error)
	}
	if na.Version != "v0.1.0-a" || na.Mode != "auto" || na.Steering != "standby" || na.Window == nil || na.Window.Open {
		t.Errorf("node-a: %+v", na)
	}
	if na.Connections == nil || na.Connections.Steered != 0 || na.Connections.Direct != 40 {
		t.Errorf("node-a connections %+v, want 0 steered, 40 direct (lease expired: standby)", na.Connections)
	}
	if len(na.Problems) != 2 || !strings.Contains(na.Problems[0], "apiserver 198.18.0.1:6443 unhealthy") {
		t.Errorf("node-a problems %q, want both apiservers unhealthy", na.Problems)
	}
	if nb.Version != "v0.1.0-b" || nb.Mode != "always" || nb.Steering != "steering" || len(nb.Problems) != 0 {
		t.Errorf("node-b: %+v", nb)
	}
	if !slices.Equal(nb.Targets, []string{"198.18.0.2:6443", "[fd00::2]:6443"}) {
		t.Errorf("node-b targets %q", nb.Targets)
	}
	want := &status.Connections{Steered: 120, Direct: 6, ByReason: map[string]uint64{"steered": 120, "lease_expired": 3, "off": 1, "exempt": 2}}
	if !reflect.DeepEqual(nb.Connections, want) {
		t.Errorf("node-b connections %+v, want %+v (not_target is no connection to a target)", nb.Connections, want)
	}
	if w := nb.Window; w == nil || !w.Open || w.Until == nil || !w.Until.Equal(until) || !strings.Contains(w.Reason, "versions differ") {
		t.Errorf("node-b window %+v", w)
	}
	if g := nb.Grace; g == nil || g.Types != 1 || !g.Until.Equal(until.Add(time.Minute)) {
		t.Errorf("node-b grace %+v", g)
	}
	if len(nb.Servers) != 2 || nb.Servers[0].State != "healthy" || !nb.Servers[0].Local && !nb.Servers[1].Local {
		t.Errorf("node-b servers %+v", nb.Servers)
	}
}

// The JSON of -o json reads back as the same status.
func TestJSONRoundTrips(t *testing.T) {
	until := time.Now().Add(9 * time.Minute).UTC().Truncate(time.Second)
	a, b := twoNodes(t, until)
	c := status.Gather(context.Background(), []status.Target{
		{Node: "node-a", Pod: "skewgate-a", URL: a.URL}, {Node: "node-b", Pod: "skewgate-b", URL: b.URL},
		{Node: "node-c", Pod: "skewgate-c", URL: closedURL(t)},
	}, options(t, a))
	var buf bytes.Buffer
	if err := status.WriteJSON(&buf, c); err != nil {
		t.Fatal(err)
	}
	var back status.Cluster
	if err := json.Unmarshal(buf.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, c) {
		t.Errorf("round trip differs:\n%s\nread back as\n%+v", buf.String(), back)
	}
	for _, key := range []string{`"steered": 120`, `"direct": 6`, `"open": true`, `"mode": "always"`, `"state": "healthy"`, `"error": "Get `} {
		if !strings.Contains(buf.String(), key) {
			t.Errorf("JSON lacks %s:\n%s", key, buf.String())
		}
	}
}

// A node's certificate is verified by the kubeconfig's CA and the node's
// IP, or the name asked for; only Insecure skips that.
func TestVerifiesNodes(t *testing.T) {
	until := time.Now().Add(time.Minute)
	a, _ := twoNodes(t, until)
	targets := []status.Target{{Node: "node-a", URL: a.URL}}
	otherCA, _, err := certutil.GenerateSelfSignedCertKey("other", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		edit func(*status.Options)
		want string
	}{
		{"by the node's IP", func(*status.Options) {}, ""},
		{"by a name the certificate has", func(o *status.Options) { o.ServerName = "example.com" }, ""},
		{"by a name it lacks", func(o *status.Options) { o.ServerName = "kubernetes" }, "certificate is valid for"},
		{"without the token", func(o *status.Options) { o.Config.BearerToken = "" }, "401"},
		{"by another CA", func(o *status.Options) { o.Config.CAData = otherCA }, "certificate signed by unknown authority"},
		{"insecure, by another CA", func(o *status.Options) { o.Config.CAData, o.Insecure = otherCA, true }, ""},
	} {
		o := options(t, a)
		tc.edit(&o)
		n := status.Gather(context.Background(), targets, o).Nodes[0]
		if tc.want == "" && n.Error != "" || tc.want != "" && !strings.Contains(n.Error, tc.want) {
			t.Errorf("%s: error %q, want %q", tc.name, n.Error, tc.want)
		}
	}
}

type errString string

func (e errString) Error() string { return string(e) }

// The table: a row per node with what it said, or "error"; the apiservers
// as each node sees them; and why a node needs a look or a window is open.
func TestPrintStatus(t *testing.T) {
	until := time.Now().Add(9 * time.Minute).UTC().Truncate(time.Second)
	a, b := twoNodes(t, until)
	c := status.Gather(context.Background(), []status.Target{
		{Node: "node-a", Pod: "skewgate-a", URL: a.URL}, {Node: "node-b", Pod: "skewgate-b", URL: b.URL},
		{Node: "node-c", Pod: "skewgate-c", Err: errString("pod skewgate-c has no --secure-admin-address")},
	}, options(t, a))
	var out bytes.Buffer
	status.PrintStatus(&out, c, until.Add(-5*time.Minute))
	t.Logf("\n%s", out.String())
	lines := strings.Split(out.String(), "\n")
	for _, want := range [][]string{
		{"NODE", "SKEWGATE", "MODE", "STEERING", "WINDOW", "GRACE", "TARGETS", "STEERED", "DIRECT", "APISERVERS", "STATUS"},
		{"node-a", "v0.1.0-a", "auto", "standby", "closed", "-", "198.18.0.1:6443", "0", "40", "0/2 healthy", "degraded"},
		{"node-b", "v0.1.0-b", "always", "steering", "open, 5m0s left", "1 type, 6m0s left", "198.18.0.2:6443,[fd00::2]:6443", "120", "6", "2/2 healthy", "ok"},
		{"node-c", "-", "-", "-", "-", "-", "-", "-", "-", "-", "error"},
		{"node-b", "198.18.0.2:6443", "true", "healthy"},
		{"node-c: error: pod skewgate-c has no --secure-admin-address"},
		{"node-a: degraded: apiserver 198.18.0.1:6443 unhealthy"},
		{"node-b: window open until " + until.Format(time.RFC3339) + " unless they differ again: versions differ: v1.35.4, v1.36.3"},
	} {
		if !slices.ContainsFunc(lines, func(l string) bool { return hasInOrder(l, want) }) {
			t.Errorf("no line with %q", want)
		}
	}
}

// hasInOrder reports whether l holds every cell, in order, apart.
func hasInOrder(l string, cells []string) bool {
	for _, c := range cells {
		i := strings.Index(l, c)
		if i < 0 {
			return false
		}
		l = l[i+len(c):]
	}
	return true
}

// An address the apiserver serves that skewgate does not steer is a
// problem the status names: its clients bypass skewgate.
func TestUnsteeredIsAProblem(t *testing.T) {
	a := statustest.Serve(t, statustest.Node{
		Local: "198.18.0.1:6443", Peer: "198.18.0.2:6443", Version: "v0.1.0-a", Healthy: true,
		Steering: &admin.SteeringView{Layout: admin.SteeringLayout, State: "steering standby: mode auto: no skew window", Mode: "auto",
			Targets: []string{"198.18.0.1:6443"}, Unsteered: []string{"10.0.0.100:6443"}},
		State: "standby", Lookups: map[string]float64{"not_target": 9},
	})
	c := status.Gather(context.Background(), []status.Target{{Node: "node-a", Pod: "skewgate-a", URL: a.URL}}, options(t, a))
	na := c.Nodes[0]
	if !slices.Equal(na.Unsteered, []string{"10.0.0.100:6443"}) || len(na.Problems) != 1 || !strings.Contains(na.Problems[0], "10.0.0.100:6443, which skewgate does not steer") {
		t.Errorf("node-a unsteered %q, problems %q", na.Unsteered, na.Problems)
	}
}

// A node whose switch says off while a rollback grace holds a type keeps
// steering, and the status says why; a held lookup (the kernel refused a
// dead skewgate's connection) is not a direct one.
func TestOffWaits(t *testing.T) {
	why := "a rollback grace holds scheduling.k8s.io/v1alpha2, Resource=workloads until 2026-03-01T03:30:00Z; end it first (kube-system/skewgate rollback-grace-until)"
	a := statustest.Serve(t, statustest.Node{
		Local: "198.18.0.1:6443", Peer: "198.18.0.2:6443", Version: "v0.1.0-a", Healthy: true,
		Steering: &admin.SteeringView{Layout: admin.SteeringLayout, State: "steering on (lease 1.5s): steering off waits: " + why, Mode: "off",
			Targets: []string{"198.18.0.1:6443"}, OffWaits: why},
		State: "steering", Lookups: map[string]float64{"steered": 50, "held": 7, "lease_expired": 2},
	})
	c := status.Gather(context.Background(), []status.Target{{Node: "node-a", Pod: "skewgate-a", URL: a.URL}}, options(t, a))
	na := c.Nodes[0]
	if na.OffWaits != why || na.Connections == nil || na.Connections.Direct != 2 || na.Connections.ByReason["held"] != 7 {
		t.Errorf("node-a off waits %q, connections %+v; want the reason, 2 direct and 7 held", na.OffWaits, na.Connections)
	}
	var out bytes.Buffer
	status.PrintStatus(&out, c, time.Now())
	if !strings.Contains(out.String(), "node-a: steering off waits: "+why) {
		t.Errorf("status:\n%s\nwant a line saying steering off waits, and why", out.String())
	}
}

// A node whose /debug/routes has no typed steering view (a skewgate
// before it), or one of another layout, is a problem the status names:
// the plugin does not guess at fields it cannot read.
func TestSteeringViewMissingOrOtherLayout(t *testing.T) {
	for _, tc := range []struct {
		steering *admin.SteeringView
		want     string
	}{
		{nil, "no steering view"},
		{&admin.SteeringView{Layout: admin.SteeringLayout + 1, State: "steering on"}, "layout 2, this plugin reads 1"},
	} {
		a := statustest.Serve(t, statustest.Node{Local: "198.18.0.1:6443", Peer: "198.18.0.2:6443", Version: "v0.3.0", Healthy: true,
			Steering: tc.steering, State: "steering", Lookups: map[string]float64{"steered": 1}})
		c := status.Gather(context.Background(), []status.Target{{Node: "node-a", Pod: "skewgate-a", URL: a.URL}}, options(t, a))
		na := c.Nodes[0]
		if !slices.ContainsFunc(na.Problems, func(p string) bool { return strings.Contains(p, tc.want) }) || na.Mode != "" {
			t.Errorf("steering view %+v: problems %q, mode %q; want a problem saying %q and nothing read", tc.steering, na.Problems, na.Mode, tc.want)
		}
	}
}

// A node's listener proves itself an apiserver's in the handshake, before
// the operator's token is sent: a kubelet's serving certificate (which the
// cluster CA signs for its node's IP) does not pass, even one that names
// kubernetes.default.svc, nor a certificate for the IP alone. The server
// gets no request.
func TestNoTokenForANodesCertificate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cert tls.Certificate
		want string
	}{
		{"a kubelet's, naming kubernetes.default.svc", statustest.SelfSigned(t, "system:node:worker-1", []string{"system:nodes"}, "kubernetes.default.svc"), "a node's certificate"},
		{"one for the node's IP alone", statustest.SelfSigned(t, "worker-1", nil), "not an apiserver's certificate"},
	} {
		var hits atomic.Int32
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hits.Add(1)
			http.Error(w, "collected", http.StatusUnauthorized)
		}))
		srv.TLS = &tls.Config{Certificates: []tls.Certificate{tc.cert}}
		srv.StartTLS()
		t.Cleanup(srv.Close)
		n := status.Gather(context.Background(), []status.Target{{Node: "node-a", URL: srv.URL}}, options(t, srv)).Nodes[0]
		if hits.Load() != 0 || !strings.Contains(n.Error, tc.want) {
			t.Errorf("%s: %d requests reached it, error %q; want none and %q", tc.name, hits.Load(), n.Error, tc.want)
		}
	}
}

// Issue 41: an operator's write of the cluster switch moves every node, so
// the status says who chose each node's mode: the switch, or the flag.
func TestStatusSaysWhoChoseTheMode(t *testing.T) {
	var targets []status.Target
	var srvs []*httptest.Server
	for i, from := range []string{admin.ModeFromSwitch, admin.ModeFromFlag} {
		srv := statustest.Serve(t, statustest.Node{Local: fmt.Sprintf("198.18.0.%d:6443", i+1), Version: "v0.2.0", Healthy: true,
			Steering: &admin.SteeringView{Layout: admin.SteeringLayout, State: "steering on (lease 1.5s)", Mode: "always", ModeFrom: from,
				Targets: []string{fmt.Sprintf("198.18.0.%d:6443", i+1)}},
			State: "steering", Lookups: map[string]float64{"steered": 1}})
		srvs = append(srvs, srv)
		targets = append(targets, status.Target{Node: fmt.Sprintf("node-%c", 'a'+i), Pod: "skewgate", URL: srv.URL})
	}
	c := status.Gather(context.Background(), targets, options(t, srvs[0])) // one CA serves every stand-in
	if c.Nodes[0].ModeFrom != admin.ModeFromSwitch || c.Nodes[1].ModeFrom != admin.ModeFromFlag {
		t.Fatalf("modeFrom %q, %q; want switch, flag", c.Nodes[0].ModeFrom, c.Nodes[1].ModeFrom)
	}
	var out bytes.Buffer
	status.PrintStatus(&out, c, time.Now())
	lines := strings.Split(out.String(), "\n")
	if !strings.Contains(lines[1], "always (switch)") || strings.Contains(lines[2], "(switch)") || !strings.Contains(lines[2], "always") {
		t.Errorf("status:\n%s\nwant node-a's mode marked (switch), node-b's not", out.String())
	}
}
