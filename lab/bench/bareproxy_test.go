package bench

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"slices"
	"testing"

	"github.com/skewgate/skewgate/lab"
)

// The floor proxy does what any L7 hop in front of kube-apiserver must:
// the caller's verified certificate, not its headers, names the user the
// upstream sees, through the front-proxy client certificate; and it is
// HTTP/2 on both sides, as skewgate is. Its figures mean nothing unless it
// forwards as skewgate does.
func TestBareProxyPassesTheVerifiedIdentity(t *testing.T) {
	pki, err := lab.GeneratePKI(t.TempDir(), []lab.Node{{Name: "node-a", IP: netip.MustParseAddr("127.0.0.1")}})
	if err != nil {
		t.Fatal(err)
	}
	frontProxyCAs, err := certPool(pki.FrontProxyCA)
	if err != nil {
		t.Fatal(err)
	}
	type seen struct {
		user, proto string
		groups      []string
		frontProxy  string
	}
	got := make(chan seen, 1)
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- seen{r.Header.Get("X-Remote-User"), r.Proto, r.Header.Values("X-Remote-Group"), r.TLS.PeerCertificates[0].Subject.CommonName}
		io.WriteString(w, "ok")
	}))
	up.EnableHTTP2 = true
	up.TLS = &tls.Config{ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: frontProxyCAs}
	cert, err := tls.LoadX509KeyPair(pki.Serving["node-a"].CertFile, pki.Serving["node-a"].KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	up.TLS.Certificates = []tls.Certificate{cert}
	up.StartTLS()
	defer up.Close()

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	bp := BareProxy{Cert: pki.Serving["node-a"].CertFile, Key: pki.Serving["node-a"].KeyFile, ClientCA: pki.CAFile,
		Upstream: up.URL, UpstreamCA: pki.CAFile, FrontProxyCert: pki.FrontProxyClient.CertFile,
		FrontProxyKey: pki.FrontProxyClient.KeyFile, Source: "127.0.0.1"}
	go bp.serve(l)
	defer l.Close()

	roots := x509.NewCertPool()
	caPEM, err := os.ReadFile(pki.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	roots.AppendCertsFromPEM(caPEM)
	admin, err := tls.LoadX509KeyPair(pki.Admin.CertFile, pki.Admin.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: &http.Transport{ForceAttemptHTTP2: true,
		TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{admin}}}}
	defer client.CloseIdleConnections()
	req, _ := http.NewRequest(http.MethodGet, "https://"+l.Addr().String()+"/api/v1/namespaces/default/configmaps", nil)
	req.Header.Set("X-Remote-User", "mallory")
	req.Header.Set("X-Remote-Group", "evil")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2 {
		t.Fatalf("through the floor proxy: %s %s", resp.Proto, resp.Status)
	}
	s := <-got
	want := seen{lab.AdminCN, "HTTP/2.0", []string{"system:masters"}, lab.FrontProxyClientCN}
	if s.user != want.user || s.proto != want.proto || !slices.Equal(s.groups, want.groups) || s.frontProxy != want.frontProxy {
		t.Errorf("upstream saw %+v, want %+v", s, want)
	}

	// Without a client certificate, nothing is forwarded.
	anon := &http.Client{Transport: &http.Transport{ForceAttemptHTTP2: true, TLSClientConfig: &tls.Config{RootCAs: roots}}}
	defer anon.CloseIdleConnections()
	if resp, err := anon.Get("https://" + l.Addr().String() + "/"); err == nil {
		resp.Body.Close()
		t.Errorf("a caller without a certificate got %s", resp.Status)
	}
}
