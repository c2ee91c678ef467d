package forward

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apiserver/pkg/server/dynamiccertificates"
)

// testCA signs serving certificates for 127.0.0.1, as the cluster CA signs
// both apiservers' and kubelets' serving certificates.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kubernetes"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert, key, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// serve starts an HTTPS server with a certificate for 127.0.0.1 (and
// dnsNames) under subject, counting the requests it is sent.
func (ca *testCA) serve(t *testing.T, subject pkix.Name, dnsNames ...string) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: subject,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature,
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: dnsNames}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		t.Fatal(err)
	}
	hits := &atomic.Int32{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusCreated)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv, hits
}

func (ca *testCA) trust(t *testing.T, peer bool) Trust {
	t.Helper()
	pool, err := dynamiccertificates.NewStaticCAContent("cluster", ca.pem)
	if err != nil {
		t.Fatal(err)
	}
	return Trust{PeerCA: pool, Peer: peer}
}

// Issue 25: a writer of apiserver leases or endpoints can name any address
// as a peer, and a kubelet's serving certificate, signed by the cluster CA,
// is valid for its node's address. A peer must prove itself an apiserver
// in the handshake: its certificate names kubernetes.default.svc and is not
// a node's. The node's own apiserver is verified as before.
func TestPeerMustProveAnAPIServer(t *testing.T) {
	ca := newTestCA(t)
	for _, tc := range []struct {
		name    string
		subject pkix.Name
		dns     []string
		proven  bool
	}{
		{"kubeadm's apiserver.crt", pkix.Name{CommonName: "kube-apiserver"}, []string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}, true},
		{"a kubelet's serving certificate", pkix.Name{CommonName: "system:node:node-x", Organization: []string{"system:nodes"}}, []string{"node-x"}, false},
		{"a kubelet's certificate that names the service", pkix.Name{CommonName: "system:node:node-x", Organization: []string{"system:nodes"}}, []string{"kubernetes.default.svc"}, false},
		{"a webhook's certificate from the cluster CA", pkix.Name{CommonName: "webhook"}, []string{"webhook.default.svc"}, false},
	} {
		srv, hits := ca.serve(t, tc.subject, tc.dns...)
		u, _ := url.Parse(srv.URL)
		req, _ := http.NewRequest(http.MethodGet, "/version", nil)
		resp, err := NewBackend("peer", u, ca.trust(t, true)).Send(req, true, nil)
		if resp != nil {
			resp.Body.Close()
		}
		if proven := err == nil; proven != tc.proven {
			t.Errorf("%s as a peer: err %v, want proven %v", tc.name, err, tc.proven)
		}
		if !tc.proven && (!errors.Is(err, ErrUntrustedServer) || hits.Load() != 0) {
			t.Errorf("%s as a peer: err %v, %d requests reached it; want ErrUntrustedServer before any", tc.name, err, hits.Load())
		}
		if kind, ok := Blame(err); !tc.proven && (!ok || kind != FailConnect) {
			t.Errorf("%s as a peer: blamed %q %v, want a connect failure (it never enters routing)", tc.name, kind, ok)
		}
		resp, err = NewBackend("local", u, ca.trust(t, false)).Send(req, true, nil)
		if err != nil {
			t.Errorf("%s as the local apiserver: %v", tc.name, err)
		} else {
			resp.Body.Close()
		}
	}
}

// A request that still carries a bearer token never leaves for a peer, by
// any path: forwarded (with failover), sent once, or spliced as an upgrade;
// in Authorization or in a websocket bearer subprotocol, however spelled.
// Only a token review may take it there.
func TestBearerTokenNeverSentToAPeer(t *testing.T) {
	ca := newTestCA(t)
	srv, hits := ca.serve(t, pkix.Name{CommonName: "kube-apiserver"}, APIServerName)
	u, _ := url.Parse(srv.URL)
	peer := NewBackend("peer", u, ca.trust(t, true))

	bearer := bearerProtocolPrefix + base64.RawURLEncoding.EncodeToString([]byte("secret"))
	for _, form := range []struct {
		name string
		set  func(http.Header)
	}{
		{"Authorization", func(h http.Header) { h.Set("Authorization", "Bearer secret") }},
		{"authorization, not canonical", func(h http.Header) { h["authorization"] = []string{"Bearer secret"} }},
		{"a bearer subprotocol", func(h http.Header) { h.Set("Sec-WebSocket-Protocol", "v5.channel.k8s.io, "+bearer) }},
		{"a bearer subprotocol on its own line, upper case", func(h http.Header) {
			h["Sec-Websocket-Protocol"] = []string{"v5.channel.k8s.io", strings.ToUpper(bearer)}
		}},
	} {
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodGet, "/apis/g/v/rs", nil)
		form.set(r.Header)
		Forward(w, r, Request{Candidates: []*Backend{peer, peer}, Idempotent: true, Anonymous: true})
		if w.Code != http.StatusServiceUnavailable || hits.Load() != 0 {
			t.Errorf("%s, forwarded: %d, %d requests reached the peer; want 503 and none", form.name, w.Code, hits.Load())
		}

		w = httptest.NewRecorder()
		r = httptest.NewRequest(http.MethodGet, "/api/v1/namespaces/n/pods/p/exec?command=ls", nil)
		form.set(r.Header)
		r.Header.Set("Connection", "Upgrade")
		r.Header.Set("Upgrade", "websocket")
		Forward(w, r, Request{Candidates: []*Backend{peer}, Anonymous: true, LongRunning: true})
		if w.Code != http.StatusServiceUnavailable || hits.Load() != 0 {
			t.Errorf("%s, an upgrade: %d, %d requests reached the peer; want 503 and none", form.name, w.Code, hits.Load())
		}

		r = httptest.NewRequest(http.MethodGet, "/apis", nil)
		form.set(r.Header)
		if _, err := peer.Send(r, true, nil); !errors.Is(err, ErrTokenToPeer) || hits.Load() != 0 {
			t.Errorf("%s, sent once: %v, %d requests reached the peer; want ErrTokenToPeer and none", form.name, err, hits.Load())
		}
	}
	if _, ok := Blame(ErrTokenToPeer); ok {
		t.Error("skewgate's own refusal blamed on the peer")
	}

	// The identity that replaces the token goes.
	r := httptest.NewRequest(http.MethodGet, "/apis/g/v/rs", nil)
	r.Header.Set("Authorization", "Bearer secret")
	r.Header.Set("Sec-WebSocket-Protocol", bearer)
	w := httptest.NewRecorder()
	Forward(w, r, Request{Candidates: []*Backend{peer}, SetIdentity: func(h http.Header) {
		StripCredentials(h)
		h.Set("X-Remote-User", "alice")
	}})
	if w.Code != http.StatusCreated || hits.Load() != 1 {
		t.Errorf("forwarded as the reviewed user: %d, %d requests reached the peer; want the peer's 201", w.Code, hits.Load())
	}

	r = httptest.NewRequest(http.MethodPost, "/apis/authentication.k8s.io/v1/selfsubjectreviews", nil)
	r.Header.Set("Authorization", "Bearer secret")
	resp, err := peer.Review(r)
	if err != nil || resp.StatusCode != http.StatusCreated || hits.Load() != 2 {
		t.Fatalf("a token review on a proven peer: %v, %d requests reached it", err, hits.Load())
	}
	resp.Body.Close()
}
