package admin

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"

	"github.com/skewgate/skewgate/proxy/admin/admintest"
	"github.com/skewgate/skewgate/proxy/membership"
)

// TestSecureAdminOnLoopbackToo: with Loopback, a listener on another
// address (the node's, 127.0.0.2 here) is served on 127.0.0.1 at the
// same port too — where a port-forward to the pod arrives — behind the
// same authentication and authorization; without it, 127.0.0.1 takes
// nothing. An address that takes 127.0.0.1 already opens nothing more.
func TestSecureAdminOnLoopbackToo(t *testing.T) {
	dir := t.TempDir()
	rv := &admintest.Reviewer{Users: map[string]string{"alice-token": "alice"}, Allowed: map[string][]string{"alice": {"/debug/routes"}}}
	apiserver := httptest.NewTLSServer(rv)
	t.Cleanup(apiserver.Close)
	cluster := &rest.Config{Host: apiserver.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
	cert, key := servingPair(t, dir)
	m, err := membership.New(membership.Config{Local: &url.URL{Scheme: "https", Host: "127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	h := Handler(m, prometheus.NewRegistry(), Options{})
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, Timeout: 10 * time.Second}
	get := func(addr, token, path string) (int, error) {
		req, _ := http.NewRequest(http.MethodGet, "https://"+addr+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	serve := func(addr string, loopback bool) string {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		var got net.Addr
		listen := func(a string) (net.Listener, error) {
			ln, err := net.Listen("tcp", a)
			if err == nil {
				got = ln.Addr()
			}
			return ln, err
		}
		if _, err := ServeSecure(ctx, SecureOptions{Address: addr, Listen: listen, Loopback: loopback, CertFile: cert, KeyFile: key, Cluster: cluster}, h); err != nil {
			t.Fatalf("serve %s (loopback %v): %v", addr, loopback, err)
		}
		return got.String()
	}

	node := serve("127.0.0.2:0", true)
	_, port, _ := net.SplitHostPort(node)
	twin := net.JoinHostPort("127.0.0.1", port)
	waitServing(t, func() error { _, err := get(twin, "", "/livez"); return err })
	for _, addr := range []string{node, twin} {
		for _, tc := range []struct {
			token, path string
			want        int
		}{
			{"", "/healthz", http.StatusOK},
			{"", "/debug/routes", http.StatusForbidden},
			{"forged", "/debug/routes", http.StatusUnauthorized},
			{"alice-token", "/debug/routes", http.StatusOK},
			{"alice-token", "/metrics", http.StatusForbidden},
		} {
			if got, err := get(addr, tc.token, tc.path); err != nil || got != tc.want {
				t.Errorf("GET https://%s%s with %q: %d %v, want %d", addr, tc.path, tc.token, got, err, tc.want)
			}
		}
	}

	alone := serve("127.0.0.2:0", false)
	_, port, _ = net.SplitHostPort(alone)
	waitServing(t, func() error { _, err := get(alone, "", "/livez"); return err })
	if code, err := get(net.JoinHostPort("127.0.0.1", port), "", "/livez"); err == nil {
		t.Errorf("without Loopback, 127.0.0.1:%s answered %d", port, code)
	}

	// Each of these takes 127.0.0.1 itself: a second listener there would
	// fail to bind, and ServeSecure with it.
	for _, addr := range []string{"127.0.0.1:0", "0.0.0.0:0", ":0"} {
		serve(addr, true)
	}
}
