package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"

	"github.com/skewgate/skewgate/lab"
	"github.com/skewgate/skewgate/proxy/discovery"
	"github.com/skewgate/skewgate/proxy/forward"
	"github.com/skewgate/skewgate/proxy/headercount"
	"github.com/skewgate/skewgate/proxy/membership"
	"github.com/skewgate/skewgate/proxy/route"
)

// seen is what the upstream apiserver stand-in received.
type seen struct {
	uri     string
	header  http.Header
	trailer http.Header
}

// identityRig is skewgate's real handler and TLS server in front of a
// recording upstream: the edge cases of header handling, byte for byte.
// The lab's e2e tests prove the same against real apiservers.
type identityRig struct {
	addr string
	// upstream is the stand-in's address, for direct requests.
	upstream string
	client   tls.Certificate
	// frontProxy is skewgate's own front-proxy client certificate, which
	// its steering probe presents.
	frontProxy tls.Certificate
	roots      *x509.CertPool
	// ca signs the rig's client and peers' certificates.
	ca      *lab.CA
	members *membership.Members
	handler *Handler
	// acks paces a watch of benchmark events (streamEvents).
	acks chan struct{}
	mu   sync.Mutex
	got  []seen
	// refuseLists: the stand-in refuses lists of configmaps as a
	// shutting-down kube-apiserver refuses a request it never began.
	refuseLists atomic.Bool
	// reviews counts the SelfSubjectReviews the stand-in answered;
	// slowReviews makes each take 200 ms.
	reviews     atomic.Int64
	slowReviews atomic.Bool
}

func newIdentityRig(t testing.TB, policy ...TLS) *identityRig {
	rig := &identityRig{acks: make(chan struct{})}
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/apis/authentication.k8s.io/v1/selfsubjectreviews" {
			rig.reviews.Add(1)
			if rig.slowReviews.Load() {
				time.Sleep(200 * time.Millisecond)
			}
			review(w, r)
			return
		}
		// Any other request with a credential but "good" gets 401,
		// wherever it goes; it reached the apiserver all the same.
		if auth := r.Header.Get("Authorization"); auth != "" && auth != "Bearer good" {
			rig.mu.Lock()
			rig.got = append(rig.got, seen{r.URL.RequestURI(), r.Header.Clone(), r.Trailer.Clone()})
			rig.mu.Unlock()
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		if doc, ok := discoveryDocs[r.URL.Path]; ok && strings.Contains(r.Header.Get("Accept"), "g=apidiscovery.k8s.io") {
			// Aggregated discovery v2, so membership can make the local
			// server healthy with a document (see runMembers).
			w.Header().Set("Content-Type", "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList")
			io.WriteString(w, doc)
			return
		}
		if n, _ := strconv.Atoi(r.URL.Query().Get(benchEventsParam)); n > 0 && r.URL.Query().Get("watch") == "true" {
			streamEvents(w, r, n, rig.acks)
			return
		}
		if r.URL.Query().Get("watch") == "true" { // a watch: an event, then nothing until the caller leaves
			w.Write([]byte(`{"type":"ADDED"}` + "\n"))
			w.(http.Flusher).Flush()
			<-r.Context().Done()
			return
		}
		if rig.refuseLists.Load() && r.URL.Path == "/api/v1/namespaces/default/configmaps" {
			refuseShuttingDown(w)
			return
		}
		io.Copy(io.Discard, r.Body)
		rig.mu.Lock()
		rig.got = append(rig.got, seen{r.URL.RequestURI(), r.Header.Clone(), r.Trailer.Clone()})
		rig.mu.Unlock()
		if r.Header.Get("Upgrade") != "" { // answered like exec with a wrong container
			http.Error(w, "container wrong is not valid", http.StatusBadRequest)
			return
		}
		w.Write([]byte("ok"))
	}))
	up.EnableHTTP2 = true // as kube-apiserver
	// kube-apiserver's --http2-max-streams-per-connection default, and
	// skewgate's.
	up.Config.HTTP2 = &http.HTTP2Config{MaxConcurrentStreams: 1000}
	headercount.Set(up.Config) // and its header value limit
	up.StartTLS()
	t.Cleanup(up.Close)
	rig.upstream = up.Listener.Addr().String()

	dir := t.TempDir()
	pki, err := lab.GeneratePKI(dir, []lab.Node{{Name: "node-a", IP: mustIP("127.0.0.1")}})
	if err != nil {
		t.Fatal(err)
	}
	ca, err := lab.LoadCA(pki.CAFile, pki.CAKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := ca.Sign(lab.Leaf{CN: "alice", Orgs: []string{"dev", "system:masters"}})
	if err != nil {
		t.Fatal(err)
	}
	rig.client = tls.Certificate{Certificate: [][]byte{cert.Raw}, PrivateKey: key}
	rig.roots = x509.NewCertPool()
	rig.roots.AddCert(ca.Cert)

	// The stand-in's own certificate, and the lab CA that signs peers'
	// (see newPeerStandIn).
	rig.ca = ca
	upCA, err := dynamiccertificates.NewStaticCAContent("up", append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: up.Certificate().Raw}),
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Cert.Raw})...))
	if err != nil {
		t.Fatal(err)
	}
	proxyClient, err := dynamiccertificates.NewDynamicServingContentFromFiles("proxy-client", pki.FrontProxyClient.CertFile, pki.FrontProxyClient.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	serving, err := dynamiccertificates.NewDynamicServingContentFromFiles("serving", pki.Serving["node-a"].CertFile, pki.Serving["node-a"].KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	clientCA, err := dynamiccertificates.NewDynamicCAContentFromFile("client-ca", pki.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	upURL, _ := url.Parse(up.URL)
	// A probe's timeout long enough that a loaded machine (make test
	// runs packages side by side) never fails one: FuzzRequest fails on
	// any change of health, and only requests may be blamed there.
	members, err := membership.New(membership.Config{Local: upURL, Trust: forward.Trust{PeerCA: upCA, ClientCert: proxyClient}, ProbeTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	rig.members = members
	rig.frontProxy, err = tls.LoadX509KeyPair(pki.FrontProxyClient.CertFile, pki.FrontProxyClient.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	// No requestheader CA: no peers, as with the flag left out; skewgate
	// still knows its own front-proxy certificate, as Proxy wires it.
	h := NewHandler(members, clientCA, RequestHeader{Self: proxyClient}, NewMetrics(prometheus.NewRegistry()))
	rig.handler = h
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var tp TLS
	if len(policy) > 0 {
		tp = policy[0]
	}
	tp.Serving, tp.ClientCAs = serving, clientCA
	go func() { Serve(ctx, ln, h, tp); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	rig.addr = ln.Addr().String()
	return rig
}

// review answers a SelfSubjectReview as kube-apiserver: only the token
// "good" authenticates; "busy" meets its max-in-flight limit, "broken" a
// failure.
func review(w http.ResponseWriter, r *http.Request) {
	switch r.Header.Get("Authorization") {
	case "Bearer good", "Bearer " + canaryToken:
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, goodReview)
	case "Bearer busy":
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusTooManyRequests)
	case "Bearer broken":
		w.WriteHeader(http.StatusInternalServerError)
	default:
		w.WriteHeader(http.StatusUnauthorized)
	}
}

// canaryToken authenticates as "good" does; distinctive enough to be
// looked for in every byte a peer stand-in received.
const canaryToken = "canary-3f9d0c7b-token"

// goodReview is the stand-in's SelfSubjectReview for the token "good": a
// ServiceAccount's, as kube-apiserver answers it.
const goodReview = `{"kind":"SelfSubjectReview","apiVersion":"authentication.k8s.io/v1","metadata":{"creationTimestamp":null},` +
	`"status":{"userInfo":{"username":"system:serviceaccount:kube-system:generic-garbage-collector","uid":"4f7c",` +
	`"groups":["system:serviceaccounts","system:serviceaccounts:kube-system","system:authenticated"],` +
	`"extra":{"authentication.kubernetes.io/credential-id":["JTI=9a1b"],"authentication.kubernetes.io/node-name":["node-a"]}}}}`

// discoveryDocs are the stand-in's aggregated discovery: configmaps in
// core/v1, no groups.
var discoveryDocs = map[string]string{
	"/api": `{"kind":"APIGroupDiscoveryList","apiVersion":"apidiscovery.k8s.io/v2","metadata":{},"items":[{"metadata":{"creationTimestamp":null},` +
		`"versions":[{"version":"v1","resources":[{"resource":"configmaps","responseKind":{"group":"","version":"v1","kind":"ConfigMap"},` +
		`"scope":"Namespaced","singularResource":"configmap","verbs":["create","delete","get","list","patch","update","watch"]}],"freshness":"Current"}]}]}`,
	"/apis": `{"kind":"APIGroupDiscoveryList","apiVersion":"apidiscovery.k8s.io/v2","metadata":{},"items":[]}`,
}

// runMembers probes the rig's local server until it is healthy and its
// discovery is in the merged view, with a breaker on its backend (the
// local server has none in production) that records any failure counted
// against it.
func (rig *identityRig) runMembers(t testing.TB) *forward.Backend {
	b := rig.members.Backends([]string{rig.members.LocalID()})[0]
	b.BreakOnFailures()
	rig.startMembers(t)
	return b
}

// startMembers probes the rig's local server until it is healthy and its
// discovery is in the merged view, as in production: requests for what it
// serves then take the steady path (rule local), not the one for a local
// server not yet confirmed (rule local-away).
func (rig *identityRig) startMembers(t testing.TB) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go rig.members.Run(ctx)
	deadline := time.Now().Add(20 * time.Second)
	for !rig.members.Table().Local.Healthy || !mergesLocal(rig.members.Discovery().Merged, rig.members.LocalID()) {
		if time.Now().After(deadline) {
			t.Fatalf("the local stand-in never became healthy with discovery: %+v", rig.members.Statuses())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func mustIP(s string) netip.Addr { return netip.MustParseAddr(s) }

// send writes raw HTTP/1.1 request bytes on a fresh TLS connection and
// returns the status code and what the upstream saw.
func (rig *identityRig) send(t *testing.T, raw string) (int, seen) {
	t.Helper()
	rig.mu.Lock()
	rig.got = nil
	rig.mu.Unlock()
	code, _, _ := rig.sendRaw(t, raw)
	rig.mu.Lock()
	defer rig.mu.Unlock()
	if len(rig.got) != 1 {
		t.Fatalf("upstream saw %d requests, want 1 (answer %d)", len(rig.got), code)
	}
	return code, rig.got[0]
}

// sendRaw writes raw request bytes on a fresh TLS connection and returns
// the answer.
func (rig *identityRig) sendRaw(t *testing.T, raw string) (int, http.Header, string) {
	t.Helper()
	conn, err := tls.Dial("tcp", rig.addr, &tls.Config{Certificates: []tls.Certificate{rig.client}, RootCAs: rig.roots,
		ServerName: "127.0.0.1", NextProtos: []string{"http/1.1"}})
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
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header, string(body)
}

// Nothing a client sends over HTTP/1.1 removes or adds to the identity
// skewgate sets: not Connection tokens (bug: "Connection: X-Remote-Group"
// dropped the caller's groups, system:masters among them), not Keep-Alive,
// Te, Trailer or Upgrade variants, upgrades included.
func TestIdentitySurvivesHopByHopHeaders(t *testing.T) {
	rig := newIdentityRig(t)
	const exec = "/api/v1/namespaces/default/pods/p1/exec?command=ls&container=wrong&stdout=true"
	for _, tc := range []struct{ name, uri, headers, body string }{
		{"connection token", "/version", "Connection: X-Remote-Group\n", ""},
		{"connection tokens, odd case", "/version", "Connection: keep-alive, x-remote-user, X-REMOTE-GROUP\nKeep-Alive: timeout=5\n", ""},
		{"te", "/version", "Te: trailers\nConnection: te, X-Remote-Group\n", ""},
		{"forged identity", "/version", "X-Remote-User: root\nX-Remote-Group: hackers\nX-Remote-Extra-Scopes: all\nX-Kubernetes-Peer-Proxied: true\n", ""},
		{"trailer", "/version", "Trailer: X-Remote-Group\nConnection: Trailer\nTransfer-Encoding: chunked\n",
			"1\nx\n0\nX-Remote-Group: hackers\n\n"},
		{"upgrade with a connection token", exec, "Connection: Upgrade, X-Remote-Group\nUpgrade: SPDY/3.1\n", ""},
		{"upgrade with forged identity", exec, "Connection: Upgrade\nUpgrade: websocket\nX-Remote-Group: hackers\nX-Remote-User: root\n", ""},
	} {
		method := "GET"
		if tc.body != "" {
			method = "POST"
		}
		raw := fmt.Sprintf("%s %s HTTP/1.1\nHost: 127.0.0.1\n%s\n%s", method, tc.uri, tc.headers, tc.body)
		_, got := rig.send(t, raw)
		if got.uri != tc.uri {
			t.Errorf("%s: upstream got %q, want %q", tc.name, got.uri, tc.uri)
		}
		if u := got.header.Values("X-Remote-User"); !slices.Equal(u, []string{"alice"}) {
			t.Errorf("%s: X-Remote-User %q, want alice", tc.name, u)
		}
		if g := got.header.Values("X-Remote-Group"); !slices.Equal(g, []string{"dev", "system:masters"}) {
			t.Errorf("%s: X-Remote-Group %q, want dev, system:masters", tc.name, g)
		}
		for k, v := range got.header {
			// The x509 authenticator's only extra: the certificate's hash.
			credential := k == "X-Remote-Extra-Authentication.kubernetes.io%2fcredential-Id" && len(v) == 1 && strings.HasPrefix(v[0], "X509SHA256=")
			if strings.HasPrefix(k, "X-Remote-Extra-") && !credential {
				t.Errorf("%s: forged %s=%q reached the apiserver", tc.name, k, v)
			}
		}
		// A client's peer mark passes (it only forces the local answer it
		// reached); skewgate adds none of its own on a local route.
		if clientMark := strings.Contains(tc.headers, "Peer-Proxied"); (got.header.Get(PeerProxiedHeader) != "") != clientMark {
			t.Errorf("%s: peer mark %q reached the local apiserver", tc.name, got.header.Get(PeerProxiedHeader))
		}
		if got.header.Get("X-Remote-Extra-Authentication.kubernetes.io%2fcredential-Id") == "" {
			t.Errorf("%s: the credential id was removed", tc.name)
		}
		for k, v := range got.trailer {
			if strings.HasPrefix(http.CanonicalHeaderKey(k), "X-Remote-") && len(v) > 0 {
				t.Errorf("%s: trailer %s=%q reached the apiserver", tc.name, k, v)
			}
		}
	}
}

// Bug: with the local apiserver out of routing and no healthy peer, merged
// /apis answered 200 with no groups, which garbage collection and namespace
// deletion take as every resource type gone. Without the local server's
// document there is no merged view: 503 Status.
func TestMergedDiscoveryNeedsTheLocalDocument(t *testing.T) {
	rig := newIdentityRig(t) // its local server was never probed: not healthy, no discovery
	for _, path := range []string{"/apis", "/api"} {
		raw := "GET " + path + " HTTP/1.1\nHost: 127.0.0.1\nAccept: application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList\n\n"
		code, hdr, body := rig.sendRaw(t, raw)
		var status struct{ Kind, Reason string }
		json.Unmarshal([]byte(body), &status)
		if code != http.StatusServiceUnavailable || hdr.Get("Retry-After") == "" || status.Kind != "Status" || status.Reason != "ServiceUnavailable" {
			t.Errorf("merged %s without the local document: %d %q", path, code, body)
		}
	}
}

// The cluster's TLS policy holds on skewgate's listener, and oversized
// headers are refused with 431 as kube-apiserver refuses them.
func TestServingLimits(t *testing.T) {
	rig := newIdentityRig(t, TLS{MinVersion: tls.VersionTLS13})
	_, err := tls.Dial("tcp", rig.addr, &tls.Config{RootCAs: rig.roots, ServerName: "127.0.0.1", MaxVersion: tls.VersionTLS12})
	if err == nil {
		t.Error("a TLS 1.2 client was served under --tls-min-version=VersionTLS13")
	}
	raw := "GET /version HTTP/1.1\nHost: 127.0.0.1\nX-Big: " + strings.Repeat("a", 2<<20) + "\n\n"
	if code, _, _ := rig.sendRaw(t, raw); code != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("a 2 MiB header got %d, want 431", code)
	}
}

// sendH2 sends one request as a raw HTTP/2 HEADERS frame with the given
// header fields (any names, hop-by-hop ones included, which Go's client
// would refuse to send) and returns the status, or the stream's reset code.
func (rig *identityRig) sendH2(t *testing.T, path string, fields ...string) (status string, reset http2.ErrCode) {
	t.Helper()
	return rig.sendH2Method(t, "GET", path, fields...)
}

// sendH2Method is sendH2 with any :method.
func (rig *identityRig) sendH2Method(t *testing.T, method, path string, fields ...string) (status string, reset http2.ErrCode) {
	t.Helper()
	conn, err := tls.Dial("tcp", rig.addr, &tls.Config{Certificates: []tls.Certificate{rig.client}, RootCAs: rig.roots,
		ServerName: "127.0.0.1", NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(conn, http2.ClientPreface)
	fr := http2.NewFramer(conn, conn)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	all := append([]string{":method", method, ":scheme", "https", ":authority", "127.0.0.1", ":path", path}, fields...)
	for i := 0; i+1 < len(all); i += 2 {
		enc.WriteField(hpack.HeaderField{Name: all[i], Value: all[i+1]})
	}
	// In frames of the default maximum size: HEADERS, then CONTINUATIONs.
	const frameSize = 16 << 10
	frag := block.Bytes()
	first := frag[:min(len(frag), frameSize)]
	frag = frag[len(first):]
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: first, EndStream: true, EndHeaders: len(frag) == 0}); err != nil {
		t.Fatal(err)
	}
	for len(frag) > 0 {
		next := frag[:min(len(frag), frameSize)]
		frag = frag[len(next):]
		if err := fr.WriteContinuation(1, len(frag) == 0, next); err != nil {
			t.Fatal(err)
		}
	}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("read frame: %v", err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				fr.WriteSettingsAck()
			}
		case *http2.MetaHeadersFrame:
			if f.StreamID == 1 {
				return f.PseudoValue("status"), 0
			}
		case *http2.RSTStreamFrame:
			if f.StreamID == 1 {
				return "", f.ErrCode
			}
		case *http2.GoAwayFrame:
			return "", f.ErrCode
		}
	}
}

// Over HTTP/2, connection-specific headers are malformed (RFC 9113 8.2.2):
// Go's server refuses the request (400) before skewgate sees it, so no
// hop-by-hop trick reaches the identity there; an ordinary request, with a
// forged group, gets exactly the verified identity.
func TestHTTP2RefusesHopByHopHeaders(t *testing.T) {
	rig := newIdentityRig(t)
	rig.mu.Lock()
	rig.got = nil
	rig.mu.Unlock()
	for _, fields := range [][]string{
		{"connection", "x-remote-group"},
		{"keep-alive", "timeout=5"},
		{"te", "gzip"},
		{"upgrade", "websocket"},
		{"transfer-encoding", "chunked"},
	} {
		status, reset := rig.sendH2(t, "/version", fields...)
		if status != "400" && reset != http2.ErrCodeProtocol {
			t.Errorf("HTTP/2 request with %v: status %q reset %v, want it refused (400 or PROTOCOL_ERROR)", fields, status, reset)
		}
	}
	rig.mu.Lock()
	if len(rig.got) != 0 {
		t.Errorf("malformed HTTP/2 requests reached the apiserver: %+v", rig.got)
	}
	rig.mu.Unlock()
	if status, reset := rig.sendH2(t, "/version", "te", "trailers", "x-remote-group", "system:masters"); status != "200" {
		t.Fatalf("HTTP/2 request: status %q reset %v", status, reset)
	}
	rig.mu.Lock()
	defer rig.mu.Unlock()
	if len(rig.got) != 1 || !slices.Equal(rig.got[0].header.Values("X-Remote-Group"), []string{"dev", "system:masters"}) || rig.got[0].header.Get("X-Remote-User") != "alice" {
		t.Errorf("upstream saw %+v", rig.got)
	}
}

// The apiserver's audit log records the client's address from
// X-Forwarded-For: skewgate appends the address it saw to what the client
// sent, as a reverse proxy does.
func TestForwardedForKeepsTheClient(t *testing.T) {
	rig := newIdentityRig(t)
	for _, tc := range []struct{ sent, want string }{
		{"", "127.0.0.1"},
		{"X-Forwarded-For: 10.0.0.1\n", "10.0.0.1, 127.0.0.1"},
	} {
		_, got := rig.send(t, "GET /version HTTP/1.1\nHost: 127.0.0.1\n"+tc.sent+"\n")
		if v := got.header.Values("X-Forwarded-For"); !slices.Equal(v, []string{tc.want}) {
			t.Errorf("sent %q: upstream got X-Forwarded-For %q, want %q", tc.sent, v, tc.want)
		}
	}
}

// Bug: --http2-max-streams-per-connection did nothing; the server
// advertised Go's default 250 whatever it said.
func TestHTTP2MaxStreamsAdvertised(t *testing.T) {
	for _, n := range []int{50, 1000} {
		rig := newIdentityRig(t, TLS{MaxStreams: n})
		conn, err := tls.Dial("tcp", rig.addr, &tls.Config{RootCAs: rig.roots, ServerName: "127.0.0.1", NextProtos: []string{"h2"}})
		if err != nil {
			t.Fatal(err)
		}
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(conn, http2.ClientPreface)
		fr := http2.NewFramer(conn, conn)
		fr.WriteSettings()
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		sf, ok := f.(*http2.SettingsFrame)
		if !ok {
			t.Fatalf("first frame %T, want SETTINGS", f)
		}
		if v, ok := sf.Value(http2.SettingMaxConcurrentStreams); !ok || int(v) != n {
			t.Errorf("--http2-max-streams-per-connection=%d: SETTINGS_MAX_CONCURRENT_STREAMS %d (sent %t)", n, v, ok)
		}
		conn.Close()
	}
}

// Bug: Go's HTTP/2 server takes any :method, and an invalid one ("GET X")
// reached the forwarder, which counted the outgoing transport's refusal as
// the server failing to connect. It is refused with 400 before routing;
// nothing reaches the apiserver and no server is blamed.
func TestInvalidMethodRefusedBeforeRouting(t *testing.T) {
	rig := newIdentityRig(t)
	rig.mu.Lock()
	rig.got = nil
	rig.mu.Unlock()
	status, reset := rig.sendH2Method(t, "GET X", "/api/v1/namespaces/default/configmaps")
	if status != "400" {
		t.Errorf(`:method "GET X": status %q reset %v, want 400`, status, reset)
	}
	rig.mu.Lock()
	defer rig.mu.Unlock()
	if len(rig.got) != 0 {
		t.Errorf("the apiserver saw %d requests", len(rig.got))
	}
	for _, st := range rig.members.Statuses() {
		if st.LastError != "" {
			t.Errorf("%s blamed: %s", st.ID, st.LastError)
		}
	}
}

// Bug (by reading): skewgate's own answers (a 503 naming what peers serve
// and that they are down) reached callers kube-apiserver would have
// refused. A token the apiserver rejects gets 401; a caller without
// credentials gets the apiserver's own answer; a verified user or a valid
// token gets skewgate's 503.
func TestOwnAnswersOnlyForAuthenticatedCallers(t *testing.T) {
	rig := newIdentityRig(t) // never probed: no local document, merged discovery is a 503
	const raw = "GET /apis HTTP/1.1\nHost: 127.0.0.1\nAccept: application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList\n%s\n"
	anonymous := func(hdr string) (int, string) {
		conn, err := tls.Dial("tcp", rig.addr, &tls.Config{RootCAs: rig.roots, ServerName: "127.0.0.1", NextProtos: []string{"http/1.1"}})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(conn, strings.ReplaceAll(fmt.Sprintf(raw, hdr), "\n", "\r\n"))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		return resp.StatusCode, resp.Header.Get(forward.HeaderRoute)
	}
	if code, route := anonymous("Authorization: Bearer bad\n"); code != http.StatusUnauthorized {
		t.Errorf("an invalid token: %d (route %s), want 401", code, route)
	}
	if code, route := anonymous(""); code != http.StatusOK || route != "" {
		t.Errorf("no credentials: %d route %q, want the local apiserver's own answer (its stand-in's 200), no route headers", code, route)
	}
	if code, _ := anonymous("Authorization: Bearer good\n"); code != http.StatusServiceUnavailable {
		t.Errorf("a valid token: %d, want skewgate's 503", code)
	}
	if code, _, _ := rig.sendRaw(t, fmt.Sprintf(raw, "")); code != http.StatusServiceUnavailable {
		t.Errorf("a verified user: %d, want skewgate's 503", code)
	}
}

// Bug: when the apiserver could not say whether a bearer token is valid
// (its SelfSubjectReview answered 429 under an upgrade's load, or failed),
// the request skewgate would have answered itself went to the local
// apiserver: merged /apis without the local document came back as the
// local server's partial answer, the false 404 in bulk skewgate exists to
// prevent, to the garbage collector's own token. An inconclusive verdict
// is a reason-free 429 or 503 with Retry-After, and nothing reaches the
// local server.
func TestInconclusiveTokenVerdictNeverFallsOpen(t *testing.T) {
	rig := newIdentityRig(t) // never probed: no local document, merged discovery is skewgate's own 503
	const raw = "GET /apis HTTP/1.1\nHost: 127.0.0.1\nAccept: application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList\nAuthorization: Bearer %s\n\n"
	for _, tc := range []struct {
		token string
		want  int
	}{
		{"busy", http.StatusTooManyRequests},
		{"broken", http.StatusServiceUnavailable},
	} {
		rig.mu.Lock()
		rig.got = nil
		rig.mu.Unlock()
		code, hdr, body := rig.sendAnonymous(t, fmt.Sprintf(raw, tc.token))
		rig.mu.Lock()
		reached := len(rig.got)
		rig.mu.Unlock()
		if reached != 0 {
			t.Errorf("token %s: the request reached the local apiserver (%d requests), answer %d", tc.token, reached, code)
		}
		if code != tc.want || hdr.Get("Retry-After") == "" || hdr.Get(forward.HeaderRoute) == "local" {
			t.Errorf("token %s: %d Retry-After=%q route %q, want %d with Retry-After, not local", tc.token, code, hdr.Get("Retry-After"), hdr.Get(forward.HeaderRoute), tc.want)
		}
		var status struct{ Kind, Message string }
		json.Unmarshal([]byte(body), &status)
		if status.Kind != "Status" || strings.Contains(status.Message, "discovery") || strings.Contains(status.Message, "local apiserver") {
			t.Errorf("token %s: body %q, want a Status that tells an unverified caller nothing of the servers", tc.token, body)
		}
	}

	// A rule-5 request: workloads, which only a peer that departed a
	// moment ago served (restored from the state file), while the local
	// server's own document lacks them. Sent to the local server it
	// would come back as the false 404.
	doc := &discovery.Doc{APIs: discovery.Endpoint{Format: discovery.FormatV2, Items: []apidiscoveryv2.APIGroupDiscovery{{
		ObjectMeta: metav1.ObjectMeta{Name: "scheduling.k8s.io"},
		Versions: []apidiscoveryv2.APIVersionDiscovery{{Version: "v1alpha2", Resources: []apidiscoveryv2.APIResourceDiscovery{{
			Resource: "workloads", Scope: apidiscoveryv2.ScopeNamespace, Verbs: []string{"get", "list"}}}}}}}}}
	peerDoc, _ := json.Marshal(doc)
	localDoc, _ := json.Marshal(&discovery.Doc{})
	now := time.Now().UTC().Format(time.RFC3339)
	state := filepath.Join(t.TempDir(), "state.json")
	os.WriteFile(state, []byte(fmt.Sprintf(`{"version":1,"servers":[`+
		`{"url":"https://%s","local":true,"lastHealthy":%q,"fetchedAt":%q,"doc":%s},`+
		`{"url":"https://10.0.0.9:6443","lastHealthy":%q,"fetchedAt":%q,"doc":%s}]}`,
		rig.upstream, now, now, localDoc, now, now, peerDoc)), 0o600)
	if n, err := rig.members.Restore(state); n != 1 || err != nil {
		t.Fatalf("restore: %d, %v", n, err)
	}
	const list = "GET /apis/scheduling.k8s.io/v1alpha2/namespaces/default/workloads HTTP/1.1\nHost: 127.0.0.1\nAuthorization: Bearer busy\n\n"
	if d := route.Decide(route.Request{Kind: route.Resource, Verb: "list", GVR: schema.GroupVersionResource{Group: "scheduling.k8s.io", Version: "v1alpha2", Resource: "workloads"}}, rig.members.Table(), false, ""); d.Rule != route.RuleUnavailable {
		t.Fatalf("the rig's table: rule %s (%s), want 5", d.Rule, d.Reason)
	}
	rig.mu.Lock()
	rig.got = nil
	rig.mu.Unlock()
	code, hdr, _ := rig.sendAnonymous(t, list)
	rig.mu.Lock()
	reached := len(rig.got)
	rig.mu.Unlock()
	if reached != 0 || code != http.StatusTooManyRequests || hdr.Get("Retry-After") == "" {
		t.Errorf("a rule-5 request, token unjudged: %d Retry-After=%q, %d requests reached the local apiserver; want 429 and none", code, hdr.Get("Retry-After"), reached)
	}
}

// sendAnonymous writes raw request bytes on a fresh TLS connection that
// presents no client certificate.
func (rig *identityRig) sendAnonymous(t *testing.T, raw string) (int, http.Header, string) {
	t.Helper()
	conn, err := tls.Dial("tcp", rig.addr, &tls.Config{RootCAs: rig.roots, ServerName: "127.0.0.1", NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(conn, strings.ReplaceAll(raw, "\n", "\r\n"))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(body)
}

// A watch through skewgate ends, cleanly, when skewgate shuts down: it
// does not hold the shutdown (and the pod's BPF objects) until the
// shutdown's timeout.
func TestWatchesEndAtShutdown(t *testing.T) {
	rig := newIdentityRig(t)
	conn, err := tls.Dial("tcp", rig.addr, &tls.Config{Certificates: []tls.Certificate{rig.client}, RootCAs: rig.roots,
		ServerName: "127.0.0.1", NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	io.WriteString(conn, "GET /api/v1/namespaces/default/configmaps?watch=true HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	first, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || !strings.Contains(first, "ADDED") {
		t.Fatalf("watch: %q %v", first, err)
	}
	rig.handler.EndLongRunning()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		t.Errorf("the watch did not end cleanly: %v", err)
	}
}
