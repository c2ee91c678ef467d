package proxy

import (
	"bufio"
	"crypto/tls"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/skewgate/skewgate/lab"
	"github.com/skewgate/skewgate/proxy/forward"
)

// sendWith writes raw request bytes on a fresh TLS connection that presents
// certs (none: no client certificate), even when the server's acceptable CAs
// do not name its issuer, and returns the answer's status and headers.
func (rig *identityRig) sendWith(t *testing.T, certs []tls.Certificate, raw string) (int, http.Header) {
	t.Helper()
	cfg := &tls.Config{RootCAs: rig.roots, ServerName: "127.0.0.1", NextProtos: []string{"http/1.1"}}
	if len(certs) > 0 {
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &certs[0], nil }
	}
	conn, err := tls.Dial("tcp", rig.addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, strings.ReplaceAll(raw, "\n", "\r\n")); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, resp.Header
}

// Bug: X-Skewgate-Route and X-Skewgate-Server were on every answer, 401s
// included, so a caller without valid credentials learned which types only
// peers serve, the peers' addresses and that the local apiserver was away.
// They are for callers authenticated by skewgate (a client certificate, a
// peer) or by an apiserver (a token it accepted); everyone else gets the
// answer without them.
func TestRouteHeadersOnlyForAuthenticatedCallers(t *testing.T) {
	rig := newIdentityRig(t) // never probed: merged discovery is skewgate's own 503
	ca, err := lab.NewCA("rogue")
	if err != nil {
		t.Fatal(err)
	}
	rogueCert, rogueKey, err := ca.Sign(lab.Leaf{CN: "mallory", Orgs: []string{"system:masters"}})
	if err != nil {
		t.Fatal(err)
	}
	user := []tls.Certificate{rig.client}
	rogue := []tls.Certificate{{Certificate: [][]byte{rogueCert.Raw}, PrivateKey: rogueKey}}
	const (
		list       = "GET /api/v1/namespaces/default/configmaps HTTP/1.1\nHost: 127.0.0.1\n%s\n"
		aggregated = "GET /apis HTTP/1.1\nHost: 127.0.0.1\nAccept: application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList\n%s\n"
		exec       = "GET /api/v1/namespaces/default/pods/p1/exec?command=ls&container=wrong&stdout=true HTTP/1.1\nHost: 127.0.0.1\nConnection: Upgrade\nUpgrade: websocket\n%s\n"
		good, bad  = "Authorization: Bearer good\n", "Authorization: Bearer bad\n"
	)
	for _, tc := range []struct {
		name   string
		certs  []tls.Certificate
		raw    string
		header string
		code   int
		route  string // "": no route headers at all
	}{
		{"user, forwarded", user, list, "", http.StatusOK, "local"},
		{"valid token, forwarded", nil, list, good, http.StatusOK, "local"},
		{"invalid token, the apiserver's 401", nil, list, bad, http.StatusUnauthorized, ""},
		{"no credentials, the apiserver's answer", nil, list, "", http.StatusOK, ""},
		{"user, skewgate's 503", user, aggregated, "", http.StatusServiceUnavailable, "unavailable"},
		{"valid token, skewgate's 503", nil, aggregated, good, http.StatusServiceUnavailable, "unavailable"},
		{"invalid token, skewgate's 401", nil, aggregated, bad, http.StatusUnauthorized, ""},
		{"no credentials, the apiserver's answer instead of skewgate's 503", nil, aggregated, "", http.StatusOK, ""},
		{"untrusted certificate, skewgate's 401", rogue, list, "", http.StatusUnauthorized, ""},
		{"user, upgrade refused", user, exec, "", http.StatusBadRequest, "local"},
		{"no credentials, upgrade refused", nil, exec, "", http.StatusBadRequest, ""},
		{"invalid token, upgrade", nil, exec, bad, http.StatusUnauthorized, ""},
	} {
		code, hdr := rig.sendWith(t, tc.certs, strings.Replace(tc.raw, "%s", tc.header, 1))
		route, server := hdr.Get(forward.HeaderRoute), hdr.Get(forward.HeaderServer)
		if code != tc.code || route != tc.route || (tc.route == "") != (server == "") {
			t.Errorf("%s: %d route %q server %q, want %d route %q", tc.name, code, route, server, tc.code, tc.route)
		}
	}
}

// The agent's steering probe knows a new connection reached skewgate by
// the route header on the answer, so skewgate answers it itself for its own
// front-proxy certificate, whether or not a requestheader CA makes that
// certificate a peer's (without one it was a 401 whose route header the
// probe took for skewgate's answer). Nobody else's probe mark gets skewgate's
// answer or its route headers.
func TestSteeringProbeAnsweredForOwnCertificate(t *testing.T) {
	rig := newIdentityRig(t) // no requestheader CA
	const probe = "GET /healthz HTTP/1.1\nHost: 127.0.0.1\nX-Skewgate-Probe: steering\n\n"
	code, hdr := rig.sendWith(t, []tls.Certificate{rig.frontProxy}, probe)
	if code != http.StatusOK || hdr.Get(forward.HeaderRoute) != "self" {
		t.Errorf("skewgate's own probe: %d route %q, want 200 self", code, hdr.Get(forward.HeaderRoute))
	}
	if code, hdr := rig.sendWith(t, nil, probe); hdr.Get(forward.HeaderRoute) != "" {
		t.Errorf("an anonymous probe mark: %d route %q, want no route headers", code, hdr.Get(forward.HeaderRoute))
	}
	if code, hdr := rig.sendWith(t, []tls.Certificate{rig.client}, probe); hdr.Get(forward.HeaderRoute) != "local" {
		t.Errorf("a user's probe mark: %d route %q, want the local apiserver's answer", code, hdr.Get(forward.HeaderRoute))
	}
}

// refuseShuttingDown answers as k8s.io/apiserver's waitgroup filter does
// once a server no longer takes requests: the request was never begun.
func refuseShuttingDown(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Retry-After", "1")
	w.WriteHeader(http.StatusServiceUnavailable)
	io.WriteString(w, `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"apiserver is shutting down","reason":"ServiceUnavailable","code":503}`)
}

// Issue 44: when the local server failed a request and a peer answered
// it, the caller was told X-Skewgate-Route: local, skewgate_requests_total
// counted route="local", and the duration's server label said
// "skewgate" — the plan, not the outcome. All three now name the peer
// that answered; the rule label keeps the plan (rule 3: the local server
// serves it).
func TestOutcomeNotPlan(t *testing.T) {
	rig := newIdentityRig(t)
	peer := rig.newPeerStandIn(t, apiserverLeaf)
	rig.withPeers(t, peer)
	const list = "GET /api/v1/namespaces/default/configmaps HTTP/1.1\nHost: 127.0.0.1\n\n"
	user := []tls.Certificate{rig.client}

	if code, hdr := rig.sendWith(t, user, list); code != http.StatusOK || hdr.Get(forward.HeaderRoute) != "local" {
		t.Fatalf("the local server answering: %d route %q, want 200 local", code, hdr.Get(forward.HeaderRoute))
	}
	rig.refuseLists.Store(true)
	code, hdr := rig.sendWith(t, user, list)
	if code != http.StatusOK || hdr.Get(forward.HeaderRoute) != "peer" || hdr.Get(forward.HeaderServer) != peer.url.Host {
		t.Fatalf("the local server refusing: %d route %q server %q, want 200 from peer %s", code,
			hdr.Get(forward.HeaderRoute), hdr.Get(forward.HeaderServer), peer.url.Host)
	}
	if got, _ := peer.take("/api/v1/namespaces/default/configmaps"); len(got) != 1 {
		t.Fatalf("the peer was sent %d lists, want 1", len(got))
	}

	m := rig.handler.metrics
	for _, tc := range []struct {
		route string
		want  float64
	}{{"local", 1}, {"peer", 1}} {
		got := observed(t, m.requests, map[string]string{"route": tc.route, "rule": "3", "verb": "list", "resource": "configmaps", "code": "200"})
		if got != tc.want {
			t.Errorf("skewgate_requests_total{route=%q,rule=\"3\"} = %g, want %g", tc.route, got, tc.want)
		}
	}
	if n := observed(t, m.duration, map[string]string{"route": "peer", "server": peer.url.Host}); n != 1 {
		t.Errorf("skewgate_request_duration_seconds{route=\"peer\",server=%q} counted %g, want 1", peer.url.Host, n)
	}
	if n := observed(t, m.duration, map[string]string{"server": "skewgate"}); n != 0 {
		t.Errorf("skewgate_request_duration_seconds{server=\"skewgate\"} counted %g, want 0: nothing was skewgate's own answer", n)
	}
}

// observed sums what c's counters counted, or its histograms' samples,
// over the series whose labels include want.
func observed(t *testing.T, c prometheus.Collector, want map[string]string) float64 {
	t.Helper()
	ch := make(chan prometheus.Metric, 64)
	go func() { c.Collect(ch); close(ch) }()
	var n float64
	for m := range ch {
		var pb dto.Metric
		if err := m.Write(&pb); err != nil {
			t.Fatal(err)
		}
		labels := map[string]string{}
		for _, l := range pb.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		match := true
		for k, v := range want {
			match = match && labels[k] == v
		}
		switch {
		case !match:
		case pb.GetCounter() != nil:
			n += pb.GetCounter().GetValue()
		case pb.GetHistogram() != nil:
			n += float64(pb.GetHistogram().GetSampleCount())
		}
	}
	return n
}
