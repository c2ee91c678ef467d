package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"

	"github.com/skewgate/skewgate/proxy/admin"
	"github.com/skewgate/skewgate/proxy/admin/admintest"
	"github.com/skewgate/skewgate/proxy/membership"
)

// TestRoutesAuthenticates: `skewgate routes` and `explain` reach the
// secure admin listener with a kubeconfig's token, verifying it by the
// kubeconfig's CA as "kubernetes"; without credentials they are refused.
func TestRoutesAuthenticates(t *testing.T) {
	dir := t.TempDir()
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey("kubernetes", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	cert, key := filepath.Join(dir, "apiserver.crt"), filepath.Join(dir, "apiserver.key")
	if err := certutil.WriteCert(cert, certPEM); err != nil {
		t.Fatal(err)
	}
	if err := keyutil.WriteKey(key, keyPEM); err != nil {
		t.Fatal(err)
	}
	apiserver := httptest.NewTLSServer(&admintest.Reviewer{Users: map[string]string{"operator-token": "operator"},
		Allowed: map[string][]string{"operator": {"/debug/routes", "/debug/explain"}}})
	defer apiserver.Close()
	m, err := membership.New(membership.Config{Local: &url.URL{Scheme: "https", Host: "127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err = admin.ServeSecure(ctx, admin.SecureOptions{Address: addr, CertFile: cert, KeyFile: key,
		Cluster: &rest.Config{Host: apiserver.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}}},
		admin.Handler(m, prometheus.NewRegistry(), admin.Options{}))
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	writeKubeconfig(t, kubeconfig, cert, "operator-token")
	stranger := filepath.Join(dir, "stranger")
	writeKubeconfig(t, stranger, cert, "")

	run := func(args ...string) (int, string) {
		var out, errOut bytes.Buffer
		code := execute(args, &out, &errOut)
		return code, out.String() + errOut.String()
	}
	admin := "https://" + addr
	deadline := time.Now().Add(10 * time.Second)
	code, out := run("routes", "--admin", admin, "--kubeconfig", kubeconfig)
	for code != 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		code, out = run("routes", "--admin", admin, "--kubeconfig", kubeconfig)
	}
	if code != 0 || !strings.Contains(out, "127.0.0.1:1") {
		t.Errorf("routes with the operator's kubeconfig: exit %d\n%s", code, out)
	}
	if code, out := run("explain", "list", "/api/v1/pods", "--admin", admin, "--kubeconfig", kubeconfig); code != 0 || !strings.Contains(out, "route:") {
		t.Errorf("explain with the operator's kubeconfig: exit %d\n%s", code, out)
	}
	if code, out := run("routes", "--admin", admin, "--kubeconfig", stranger); code == 0 || !strings.Contains(out, "403") {
		t.Errorf("routes as anonymous: exit %d, want a 403\n%s", code, out)
	}
	if code, out := run("routes", "--admin", admin); code == 0 || !strings.Contains(out, "certificate") {
		t.Errorf("routes without a kubeconfig: exit %d, want the listener's certificate refused\n%s", code, out)
	}
}

func writeKubeconfig(t *testing.T, path, ca, token string) {
	t.Helper()
	user := "{}"
	if token != "" {
		user = fmt.Sprintf("{token: %s}", token)
	}
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: https://unused.invalid, certificate-authority: %s}}]
users: [{name: u, user: %s}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`, ca, user)
	if err := os.WriteFile(path, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
}
