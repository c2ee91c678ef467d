package admin

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	certutil "k8s.io/client-go/util/cert"

	"github.com/skewgate/skewgate/proxy/admin/admintest"
	"github.com/skewgate/skewgate/proxy/membership"
)

// fakeClock is the decisions' clock, moved by the test.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *fakeClock) Step(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// TestSecureAdminOutlivesItsApiserver: Prometheus keeps scraping while the
// node's apiserver is away, by a recent positive decision (within its TTL)
// and through a peer apiserver; a denial is never replayed as an
// allowance, an unknown token is still refused, and an old decision no
// longer stands in.
func TestSecureAdminOutlivesItsApiserver(t *testing.T) {
	// The webhooks' own retries (about 4 s per failed review) only slow
	// the cases where nobody answers.
	saved := webhookBackoff
	webhookBackoff = wait.Backoff{Duration: 10 * time.Millisecond, Steps: 1}
	t.Cleanup(func() { webhookBackoff = saved })

	users := map[string]string{"prom-token": "prometheus", "carol-token": "carol", "dave-token": "dave"}
	local := &admintest.Reviewer{Users: users,
		Allowed: map[string][]string{"prometheus": {"/metrics"}, "carol": {"/metrics"}}}
	localServer := httptest.NewTLSServer(local)
	peer := &admintest.Reviewer{Users: map[string]string{"prom-token": "prometheus"},
		Allowed: map[string][]string{"prometheus": {"/metrics"}}}
	peerServer := httptest.NewTLSServer(peer)
	defer peerServer.Close()
	insecure := func(host string) *rest.Config {
		return &rest.Config{Host: host, TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
	}
	var (
		mu       sync.Mutex
		peersUp  bool
		clock    = &fakeClock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
		peerList = func() []*rest.Config {
			mu.Lock()
			defer mu.Unlock()
			if !peersUp {
				return nil
			}
			return []*rest.Config{insecure(peerServer.URL)}
		}
	)

	dir := t.TempDir()
	servingCert, servingKey := servingPair(t, dir)
	m, err := membership.New(membership.Config{Local: &url.URL{Scheme: "https", Host: "127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr := freeAddr(t)
	// The webhooks' 10 s caches would hide what this test is about.
	_, err = ServeSecure(ctx, SecureOptions{Address: addr, CertFile: servingCert, KeyFile: servingKey,
		Cluster: insecure(localServer.URL), Peers: peerList, now: clock.Now, cacheTTL: time.Nanosecond},
		Handler(m, prometheus.NewRegistry(), Options{}))
	if err != nil {
		t.Fatal(err)
	}
	pool, err := certutil.NewPool(servingCert)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: 20 * time.Second}
	waitServing(t, func() error { _, err := client.Get("https://" + addr + "/livez"); return err })
	scrape := func(token string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, "https://"+addr+"/metrics", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("GET /metrics: %v", err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	expect := func(when, token string, want int) {
		t.Helper()
		if got := scrape(token); got != want {
			t.Errorf("%s: %s scrapes /metrics: %d, want %d", when, token, got, want)
		}
	}

	expect("local apiserver up", "prom-token", 200)
	expect("local apiserver up", "carol-token", 200)
	expect("local apiserver up", "dave-token", 403)
	// carol's binding is removed: the fresh denial erases her allowance.
	local.SetAllowed("carol")
	expect("carol's access revoked", "carol-token", 403)

	localServer.Close()
	clock.Step(4 * time.Minute)
	expect("no apiserver answers, 4 minutes after the last decision", "prom-token", 200)
	if got := scrape("carol-token"); got == 200 {
		t.Errorf("no apiserver answers: carol, denied last, scrapes /metrics: %d; a denial must never be replayed as an allowance", got)
	}
	if got := scrape("dave-token"); got == 200 {
		t.Errorf("no apiserver answers: dave, never allowed, scrapes /metrics: %d", got)
	}
	expect("no apiserver answers, a token never reviewed", "new-token", 401)

	clock.Step(2 * time.Minute)
	expect("no apiserver answers, 6 minutes after the last decision", "prom-token", 401)

	mu.Lock()
	peersUp = true
	mu.Unlock()
	expect("the local apiserver away, a healthy peer", "prom-token", 200)
	if asked := strings.Join(peer.Asked(), "\n"); !strings.Contains(asked, "prometheus get /metrics") {
		t.Errorf("the peer was not asked for prometheus's access; asked:\n%s", asked)
	}
}

// TestReviewTransportFailsOver: a review the first apiserver cannot answer
// (gone, shutting down with 503) goes to the next; so does one it refuses
// to skewgate itself (403: an apiserver started a moment ago, its RBAC not
// read yet — kubeadm's upgrade, a scrape failed in CI), and when every
// server refuses, the refusal is the answer, with no recent decision
// standing in for it.
func TestReviewTransportFailsOver(t *testing.T) {
	shuttingDown := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "apiserver is shutting down", http.StatusServiceUnavailable)
	}))
	defer shuttingDown.Close()
	gone := httptest.NewTLSServer(http.NotFoundHandler())
	gone.Close()
	reviewer := httptest.NewTLSServer(&admintest.Reviewer{Users: map[string]string{"t": "u"}})
	defer reviewer.Close()
	forbidden := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "forbidden", http.StatusForbidden)
	}))
	defer forbidden.Close()
	cfg := func(s *httptest.Server) *rest.Config {
		return &rest.Config{Host: s.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
	}
	review := `{"apiVersion":"authentication.k8s.io/v1","kind":"TokenReview","spec":{"token":"t"}}`
	post := func(rt *reviewTransport) (int, string, error) {
		req, _ := http.NewRequest(http.MethodPost, "https://ignored/apis/authentication.k8s.io/v1/tokenreviews", strings.NewReader(review))
		resp, err := rt.RoundTrip(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), err
	}

	rt := newReviewTransport(cfg(gone), func() []*rest.Config { return []*rest.Config{cfg(shuttingDown), cfg(reviewer)} }, 0, nil)
	code, body, err := post(rt)
	if err != nil || code != 200 || !strings.Contains(body, `"authenticated":true`) {
		t.Errorf("gone, shutting down, then a reviewer: %d %s %v; want the reviewer's answer", code, body, err)
	}

	rt = newReviewTransport(cfg(forbidden), func() []*rest.Config { return []*rest.Config{cfg(reviewer)} }, 0, nil)
	if code, body, err := post(rt); err != nil || code != 200 || !strings.Contains(body, `"authenticated":true`) {
		t.Errorf("the first apiserver refuses skewgate, the next reviews: %d %s %v; want the reviewer's answer", code, body, err)
	}
	// The decision just made is recent; every server refusing now must
	// not replay it.
	only := cfg(forbidden)
	rt.primary, rt.peers = only, func() []*rest.Config { return []*rest.Config{cfg(gone), cfg(forbidden)} }
	if code, _, err := post(rt); err != nil || code != http.StatusForbidden {
		t.Errorf("every apiserver refuses skewgate: %d %v; want the 403", code, err)
	}
}

// TestPositiveDecisions: only an authenticated token or an allowed (not
// denied) access is kept, and never with the review's spec (the token).
func TestPositiveDecisions(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		code       int
		keep       bool
	}{
		{"authenticated", `{"kind":"TokenReview","spec":{"token":"secret"},"status":{"authenticated":true,"user":{"username":"u"}}}`, 201, true},
		{"not authenticated", `{"kind":"TokenReview","spec":{"token":"secret"},"status":{"authenticated":false}}`, 201, false},
		{"allowed", `{"kind":"SubjectAccessReview","spec":{"user":"u"},"status":{"allowed":true}}`, 201, true},
		{"no opinion", `{"kind":"SubjectAccessReview","spec":{"user":"u"},"status":{"allowed":false}}`, 201, false},
		{"denied", `{"kind":"SubjectAccessReview","spec":{"user":"u"},"status":{"allowed":true,"denied":true}}`, 201, false},
		{"an error status", `{"kind":"Status","status":{"allowed":true}}`, 403, false},
		{"not JSON", `allowed`, 201, false},
	} {
		kept, ok := positive(answer{code: tc.code, body: []byte(tc.body)})
		if ok != tc.keep {
			t.Errorf("%s: kept %v, want %v", tc.name, ok, tc.keep)
		}
		if strings.Contains(string(kept), "spec") || strings.Contains(string(kept), "secret") {
			t.Errorf("%s: kept %s, with the review's spec", tc.name, kept)
		}
	}
}
