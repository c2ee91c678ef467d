package proxy

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"k8s.io/apiserver/pkg/server/dynamiccertificates"

	"github.com/skewgate/skewgate/lab"
)

// swapCA is a CA bundle that the test changes, telling listeners as the
// file-backed provider does on a reload.
type swapCA struct {
	mu        sync.Mutex
	pool      *x509.CertPool
	pem       []byte
	listeners []dynamiccertificates.Listener
}

func (s *swapCA) set(ca *x509.Certificate) {
	s.mu.Lock()
	s.pool = x509.NewCertPool()
	s.pool.AddCert(ca)
	s.pem = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Raw})
	ls := s.listeners
	s.mu.Unlock()
	for _, l := range ls {
		l.Enqueue()
	}
}
func (s *swapCA) Name() string { return "swap" }
func (s *swapCA) CurrentCABundleContent() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pem
}
func (s *swapCA) VerifyOptions() (x509.VerifyOptions, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return x509.VerifyOptions{Roots: s.pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, true
}
func (s *swapCA) AddListener(l dynamiccertificates.Listener) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.listeners = append(s.listeners, l)
}

// Bug: a verdict on a connection's client certificate lived as long as the
// connection, so an expired certificate, or one whose CA was removed from
// --client-ca-file, kept working on a long-lived HTTP/2 connection.
func TestConnectionVerdictExpires(t *testing.T) {
	ca, err := lab.NewCA("clients")
	if err != nil {
		t.Fatal(err)
	}
	other, err := lab.NewCA("other")
	if err != nil {
		t.Fatal(err)
	}
	cert, _, err := ca.Sign(lab.Leaf{CN: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	clientCA := &swapCA{}
	clientCA.set(ca.Cert)
	a := newCallerAuth(clientCA, RequestHeader{})
	now := time.Now()
	a.now = func() time.Time { return now }

	conn := withConnVerdict(context.Background(), nil) // one connection, many requests
	req := func() (Caller, error) {
		r := httptest.NewRequest(http.MethodGet, "/api", nil).WithContext(conn)
		r.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert}}
		return a.authenticate(r, false)
	}
	if c, err := req(); err != nil || c.User.GetName() != "alice" {
		t.Fatalf("a valid certificate: %v %v", c.User, err)
	}
	clientCA.set(other.Cert) // the CA removed from the bundle
	if _, err := req(); !errors.Is(err, ErrUntrustedClient) {
		t.Errorf("after the CA left the bundle, same connection: err %v, want ErrUntrustedClient", err)
	}
	clientCA.set(ca.Cert)
	if c, err := req(); err != nil || c.User.GetName() != "alice" {
		t.Fatalf("the CA back: %v %v", c.User, err)
	}
	now = cert.NotAfter.Add(time.Second)
	if _, err := req(); !errors.Is(err, ErrUntrustedClient) {
		t.Errorf("after NotAfter on the same connection: err %v, want ErrUntrustedClient", err)
	}
}

// Bug (by reading): a verdict lived until the presented chain's earliest
// NotAfter, so a client certificate outliving its CA kept working on a
// connection after the CA expired.
func TestConnectionVerdictEndsWithTheCA(t *testing.T) {
	now := time.Now()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "short-lived ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	leafKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leafTmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "alice"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(365 * 24 * time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafTmpl, caCert, leafKey.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(leafDER)
	clientCA := &swapCA{}
	clientCA.set(caCert)
	a := newCallerAuth(clientCA, RequestHeader{})
	clock := now
	a.now = func() time.Time { return clock }
	conn := withConnVerdict(context.Background(), nil)
	req := func() (Caller, error) {
		r := httptest.NewRequest(http.MethodGet, "/api", nil).WithContext(conn)
		r.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf}}
		return a.authenticate(r, false)
	}
	if c, err := req(); err != nil || c.User.GetName() != "alice" {
		t.Fatalf("a valid certificate: %v %v", c.User, err)
	}
	clock = caCert.NotAfter.Add(time.Second)
	if _, err := req(); !errors.Is(err, ErrUntrustedClient) {
		t.Errorf("after the CA's NotAfter on the same connection: err %v, want ErrUntrustedClient", err)
	}
}

// kube-apiserver tries its authenticators in turn: a certificate it cannot
// verify is skipped when a token is there to judge, and a verified
// certificate without a common name is anonymous.
func TestCertificateAndTokenAsTheApiserver(t *testing.T) {
	ca, err := lab.NewCA("clients")
	if err != nil {
		t.Fatal(err)
	}
	stranger, err := lab.NewCA("stranger")
	if err != nil {
		t.Fatal(err)
	}
	untrusted, _, err := stranger.Sign(lab.Leaf{CN: "mallory"})
	if err != nil {
		t.Fatal(err)
	}
	nameless, _, err := ca.Sign(lab.Leaf{})
	if err != nil {
		t.Fatal(err)
	}
	clientCA := &swapCA{}
	clientCA.set(ca.Cert)
	a := newCallerAuth(clientCA, RequestHeader{})
	for _, tc := range []struct {
		name  string
		cert  *x509.Certificate
		token bool
		fails bool
	}{
		{"untrusted certificate and a token: the token is judged", untrusted, true, false},
		{"untrusted certificate alone: 401", untrusted, false, true},
		{"verified certificate without a name: anonymous", nameless, false, false},
	} {
		r := httptest.NewRequest(http.MethodGet, "/api", nil).WithContext(withConnVerdict(context.Background(), nil))
		r.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{tc.cert}}
		c, err := a.authenticate(r, tc.token)
		if (err != nil) != tc.fails || c.User != nil || c.Peer {
			t.Errorf("%s: caller %+v err %v", tc.name, c, err)
		}
	}
}
