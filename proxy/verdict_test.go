package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
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
		return a.authenticate(r)
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
