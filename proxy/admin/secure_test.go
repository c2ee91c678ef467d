package admin

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"

	"github.com/skewgate/skewgate/proxy/admin/admintest"
	"github.com/skewgate/skewgate/proxy/membership"
)

// servingPair writes a self-signed serving pair for 127.0.0.1 (its CA in
// the certificate file) and returns the paths.
func servingPair(t *testing.T, dir string) (string, string) {
	t.Helper()
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey("127.0.0.1", []net.IP{net.ParseIP("127.0.0.1")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cf, kf := filepath.Join(dir, "admin.crt"), filepath.Join(dir, "admin.key")
	if err := certutil.WriteCert(cf, certPEM); err != nil {
		t.Fatal(err)
	}
	if err := keyutil.WriteKey(kf, keyPEM); err != nil {
		t.Fatal(err)
	}
	return cf, kf
}

// testCA signs client certificates; its certificate is written to a file.
type testCA struct {
	cert *x509.Certificate
	key  crypto.Signer
	file string
}

func newTestCA(t *testing.T, dir string) testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := certutil.NewSelfSignedCACert(certutil.Config{CommonName: "admin-client-ca"}, key)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "client-ca.crt")
	if err := certutil.WriteCert(file, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw})); err != nil {
		t.Fatal(err)
	}
	return testCA{cert, key, file}
}

// client is a client certificate for cn in orgs.
func (ca testCA) client(t *testing.T, cn string, orgs ...string) *tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn, Organization: orgs},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// TestSecureAdmin: the health paths answer anyone; /metrics and the debug
// endpoints only a caller the apiserver authenticates and authorizes for
// that path, by token or client certificate; system:masters everything; a
// token the apiserver cannot review is refused, never let through.
func TestSecureAdmin(t *testing.T) {
	dir := t.TempDir()
	rv := &admintest.Reviewer{
		Users:   map[string]string{"prom-token": "system:serviceaccount:monitoring:prometheus", "alice-token": "alice"},
		Allowed: map[string][]string{"system:serviceaccount:monitoring:prometheus": {"/metrics"}, "alice": {"/debug/routes"}},
	}
	apiserver := httptest.NewTLSServer(rv)
	cluster := &rest.Config{Host: apiserver.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}}

	servingCert, servingKey := servingPair(t, dir)
	ca := newTestCA(t, dir)
	m, err := membership.New(membership.Config{Local: &url.URL{Scheme: "https", Host: "127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr := freeAddr(t)
	_, err = ServeSecure(ctx, SecureOptions{Address: addr, CertFile: servingCert, KeyFile: servingKey, ClientCAFile: ca.file, Cluster: cluster},
		Handler(m, prometheus.NewRegistry(), Options{}))
	if err != nil {
		t.Fatal(err)
	}
	pool, err := certutil.NewPool(servingCert)
	if err != nil {
		t.Fatal(err)
	}
	client := func(cert *tls.Certificate) *http.Client {
		tc := &tls.Config{RootCAs: pool}
		if cert != nil {
			tc.Certificates = []tls.Certificate{*cert}
		}
		return &http.Client{Transport: &http.Transport{TLSClientConfig: tc}, Timeout: 10 * time.Second}
	}
	master := ca.client(t, "root", "system:masters")
	bob := ca.client(t, "bob")
	get := func(c *http.Client, token, path string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, "https://"+addr+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	getBody := func(c *http.Client, token, path string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, "https://"+addr+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	waitServing(t, func() error { _, err := client(nil).Get("https://" + addr + "/livez"); return err })
	for _, tc := range []struct {
		who, token, path string
		cert             *tls.Certificate
		want             int
	}{
		{"anonymous", "", "/healthz", nil, 200},
		{"anonymous", "", "/livez", nil, 200},
		{"anonymous", "", "/readyz/ping", nil, 200},
		{"anonymous", "", "/metrics", nil, 403},
		{"anonymous", "", "/debug/routes", nil, 403},
		{"a token the apiserver rejects", "forged", "/metrics", nil, 401},
		{"prometheus", "prom-token", "/metrics", nil, 200},
		{"prometheus", "prom-token", "/debug/routes", nil, 403},
		{"prometheus", "prom-token", "/debug/explain?verb=get&path=/api/v1/pods", nil, 403},
		{"alice", "alice-token", "/debug/routes", nil, 200},
		{"alice", "alice-token", "/metrics", nil, 403},
		{"bob's client certificate", "", "/metrics", bob, 403},
		{"system:masters' client certificate", "", "/debug/explain?verb=get&path=/api/v1/pods", master, 200},
	} {
		if got := get(client(tc.cert), tc.token, tc.path); got != tc.want {
			t.Errorf("%s: GET %s = %d, want %d", tc.who, tc.path, got, tc.want)
		}
	}
	// Bug: anonymous /readyz/discovery (a kubelet probe's path, open to
	// anyone) answered "local discovery (127.0.0.1:1) not read yet": the
	// apiservers' addresses and state. Anonymous callers get the status
	// and ok or not, nothing more; authenticated ones the reason.
	for _, tc := range []struct {
		who, token, path string
		cert             *tls.Certificate
		code             int
		detail           bool
	}{
		{"anonymous", "", "/readyz/discovery", nil, 500, false},
		{"anonymous", "", "/readyz?verbose", nil, 500, false},
		{"anonymous", "", "/readyz", nil, 500, false},
		{"anonymous", "", "/livez", nil, 200, false},
		{"system:masters' client certificate", "", "/readyz/discovery", master, 500, true},
		{"prometheus", "prom-token", "/readyz/discovery", nil, 500, true},
	} {
		code, body := getBody(client(tc.cert), tc.token, tc.path)
		detail := strings.Contains(body, "127.0.0.1:1") || strings.Contains(body, "discovery")
		if code != tc.code || detail != tc.detail || (code == 200) != (strings.TrimSpace(body) == "ok") {
			t.Errorf("%s: GET %s = %d %q, want %d with detail %v", tc.who, tc.path, code, body, tc.code, tc.detail)
		}
	}

	asked := strings.Join(rv.Asked(), "\n")
	for _, want := range []string{"system:serviceaccount:monitoring:prometheus get /metrics", "alice get /debug/routes", "bob get /metrics", "system:anonymous get /metrics"} {
		if !strings.Contains(asked, want) {
			t.Errorf("no SubjectAccessReview %q; asked:\n%s", want, asked)
		}
	}

	// The apiserver gone: a new token cannot be reviewed, and is refused.
	apiserver.Close()
	if got := get(client(nil), "new-token", "/metrics"); got != http.StatusUnauthorized {
		t.Errorf("with the apiserver gone, an unreviewed token: GET /metrics = %d, want 401", got)
	}
	if got := get(client(nil), "", "/readyz/ping"); got != http.StatusOK {
		t.Errorf("with the apiserver gone, anonymous GET /readyz/ping = %d, want 200 (kubelet probes)", got)
	}
}

func TestSecureAdminNeedsCluster(t *testing.T) {
	if _, err := ServeSecure(context.Background(), SecureOptions{Address: "127.0.0.1:0"}, http.NotFoundHandler()); err != ErrNoCluster {
		t.Errorf("without cluster credentials: %v, want ErrNoCluster", err)
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func waitServing(t *testing.T, try func() error) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := try()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("secure admin listener not serving: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestHostPort(t *testing.T) {
	for in, want := range map[string]string{
		"10.0.0.1:16444": "10.0.0.1:16444", "fd00::1:16444": "[fd00::1]:16444", "[fd00::1]:16444": "[fd00::1]:16444",
		":16444": ":16444", "localhost:16444": "localhost:16444",
	} {
		if got := hostPort(in); got != want {
			t.Errorf("hostPort(%q) = %q, want %q", in, got, want)
		}
	}
}
