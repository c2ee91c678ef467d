package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/skewgate/skewgate/lab"
)

// Hostile load, all at once against node-b's skewgate (issue 23 item 2).
const (
	hostileConns   = 4000 // idle HTTP/2 connections: ~55 KiB each, past the limit without shedding
	hostileStreams = 1000 // slow uploads on each of two HTTP/2 connections
	hostileUploads = 300  // slow uploads, each on its own HTTP/1.1 connection
	// hostileLimit is the container memory limit skewgate runs with here:
	// the DaemonSet's mechanism (SKEWGATE_MEMORY_LIMIT, a soft limit of 3/4)
	// at a quarter of its shipped 1 GiB, as a small cluster's operator may
	// set it, so the attack crosses the bounds within the test's seconds.
	hostileLimit = 256 << 20
)

// TestHostileClients runs skewgate on node-b as the DaemonSet runs it —
// steering node-b's address, SKEWGATE_MEMORY_LIMIT a container's memory
// limit (hostileLimit) — and a ServiceAccount allowed to write ConfigMaps attacks it
// through node-b's address: thousands of idle connections, two connections
// full of slow uploads, hundreds of slow uploads on connections of their
// own, each declaring the 3 MiB an apiserver accepts and never finishing.
// skewgate's RSS must stay under the limit and it must fail open — shed
// at its bounds (steering withdrawn, connections handed back, streams
// refused with a retryable answer), or let its lease lapse when the attack
// starves its probe — never be OOM-killed, and another client's requests
// through the same address must keep being answered.
func TestHostileClients(t *testing.T) {
	b := node(t, "node-b")
	limit := int64(hostileLimit)
	proc := startLimited(t, b, limit)
	url := b.URL() + "/api/v1/namespaces/default/configmaps"
	token := hostileToken(t)
	// Each apiserver learns of the RoleBinding from its own informer: until
	// node-b has, its 403 would answer the uploads before reading them.
	dryRun := &http.Client{Transport: &http.Transport{TLSClientConfig: labTLS(t)}} // no client certificate: the token speaks
	waitFor(t, 20*time.Second, "node-b authorizes the ServiceAccount", func() bool {
		return do(t, dryRun, http.MethodPost, url+"?dryRun=All", []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"hostile-probe"}}`),
			"Authorization", "Bearer "+token).Code == http.StatusCreated
	})

	// Counters, read calmly before and after the attack: a gauge sampled
	// during it misses what happens between two scrapes.
	counters := func() (episodes, lapsed, dropped float64) {
		t.Helper()
		for range 20 { // up to 20 s
			m := metricValues(lab.SkewgateAdminURL(b)+"/metrics", "skewgate_shedding_episodes_total", leaseExpired, droppedSource, droppedTotal)
			if v, ok := m["skewgate_shedding_episodes_total"]; ok {
				return v, m[leaseExpired], m[droppedSource] + m[droppedTotal]
			}
			time.Sleep(time.Second)
		}
		t.Fatal("skewgate_shedding_episodes_total unread for 20 s")
		return 0, 0, 0
	}
	shed0, lapsed0, dropped0 := counters()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	good := goodClient(ctx, t, url+"?limit=1", &wg)
	rss := sampleRSS(ctx, proc.PID, b, &wg)
	attack, stopAttack := context.WithCancel(ctx)
	out := &outcomes{m: map[string]int{}}
	idle := idleConns(attack, t, b, &wg)
	for range 2 {
		slowStreams(attack, t, url, token, out, &wg)
	}
	slowUploads(attack, t, url, token, out, &wg)
	time.Sleep(25 * time.Second)
	stopAttack()
	time.Sleep(3 * time.Second) // the good client after the attack
	cancel()
	wg.Wait()

	hwm := procStatusKiB(t, proc.PID, "VmHWM") << 10
	shed1, lapsed1, dropped1 := counters()
	shed, lapsed, dropped := shed1-shed0, lapsed1-lapsed0, dropped1-dropped0
	t.Logf("skewgate RSS peak %d MiB (VmHWM %d MiB) of a %d MiB limit; shedding episodes %.0f (the gauge seen at 1: %t, %d of %d scrapes failed); new connections the kernel sent to the apiserver with the lease withdrawn or lapsed %.0f (%d scrapes lapsed: not steering, not shedding); authenticated client connections peak %.0f; pending connections dropped %.0f; idle connections opened %d",
		rss.peak.Load()>>20, hwm>>20, limit>>20, shed, rss.shed.Load(), rss.failed.Load(), rss.scrapes.Load(), lapsed, rss.unsteered.Load(), float64(rss.conns.Load()), dropped, idle.Load())
	t.Logf("hostile answers: %v", out.snapshot())
	t.Logf("the other client: %d answered, %d failed %v", good.ok.Load(), good.failed.Load(), good.first())
	if hwm >= limit {
		t.Errorf("skewgate's RSS reached %d MiB, its container's limit is %d MiB: the kernel would OOM-kill it", hwm>>20, limit>>20)
	}
	// Either way of failing open counts, and both end the lease, which
	// the kernel's lease_expired count shows. Its bounds (shedding
	// withdraws the lease), or a lapse: the attack's TLS handshakes fill
	// both cores, a steering probe through skewgate misses its 500 ms
	// deadline, and the lease is held off 10 s, so new connections reach
	// the apiserver directly before the bounds are reached (CI saw it twice: RSS 176 and 197
	// MiB, no shedding; in the second, steering lapsed in 17 of 49
	// scrapes).
	// Or, first of all, the bound on connections that never
	// authenticated: the idle ones and the uploads never answered all
	// come from one address.
	if shed < 1 && lapsed < 1 && dropped < 1 {
		t.Errorf("skewgate neither shed, let its lease lapse nor dropped a pending connection: the attack reached none of its defences, so this test proved nothing about them")
	}
	if good.failed.Load() > 0 || good.ok.Load() == 0 {
		t.Errorf("the other client: %d requests failed, %d answered, while the hostile one attacked (%v)", good.failed.Load(), good.ok.Load(), good.first())
	}
}

// hostileToken is a ServiceAccount token of default/hostile, allowed to
// create ConfigMaps in default (the apiserver reads its uploads), issued
// by node-a.
func hostileToken(t *testing.T) string {
	cs := scaleClient(t, node(t, "node-a").URL(), nil)
	ctx := context.Background()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "hostile"}}
	if _, err := cs.CoreV1().ServiceAccounts("default").Create(ctx, sa, metav1.CreateOptions{}); err != nil && !strings.Contains(err.Error(), "already exists") {
		t.Fatal(err)
	}
	// A Role of its own: the aggregated ClusterRole edit is empty without
	// a controller-manager, which the lab does not run.
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "hostile-configmaps"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "create"}}}}
	if _, err := cs.RbacV1().Roles("default").Create(ctx, role, metav1.CreateOptions{}); err != nil && !strings.Contains(err.Error(), "already exists") {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "hostile-configmaps"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "hostile-configmaps"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "hostile", Namespace: "default"}}}
	if _, err := cs.RbacV1().RoleBindings("default").Create(ctx, rb, metav1.CreateOptions{}); err != nil && !strings.Contains(err.Error(), "already exists") {
		t.Fatal(err)
	}
	tr, err := cs.CoreV1().ServiceAccounts("default").CreateToken(ctx, "hostile", &authnv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// outcomes tallies the hostile requests' ends.
type outcomes struct {
	mu sync.Mutex
	m  map[string]int
}

func (o *outcomes) add(k string) { o.mu.Lock(); o.m[k]++; o.mu.Unlock() }
func (o *outcomes) snapshot() map[string]int {
	o.mu.Lock()
	defer o.mu.Unlock()
	c := map[string]int{}
	for k, v := range o.m {
		c[k] = v
	}
	return c
}

func (o *outcomes) send(c *http.Client, req *http.Request) {
	resp, err := c.Do(req)
	switch {
	case err != nil && req.Context().Err() != nil:
		o.add("cancelled at the end")
	case err != nil:
		o.add("error")
	default:
		o.add(fmt.Sprintf("%d", resp.StatusCode))
		resp.Body.Close()
	}
}

// slowBody declares 3 MiB and sends 4 KiB every 250 ms, stopping one byte
// short: the upload never ends.
type slowBody struct {
	ctx  context.Context
	left int
}

const slowDeclared = 3<<20 - 1

func (s *slowBody) Read(p []byte) (int, error) {
	if s.left <= 1 {
		<-s.ctx.Done()
		return 0, s.ctx.Err()
	}
	select {
	case <-s.ctx.Done():
		return 0, s.ctx.Err()
	case <-time.After(250 * time.Millisecond):
	}
	n := min(len(p), 4<<10, s.left-1)
	for i := range n {
		p[i] = 'x'
	}
	s.left -= n
	return n, nil
}

func slowRequest(ctx context.Context, url, token string) *http.Request {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, &slowBody{ctx: ctx, left: slowDeclared})
	req.ContentLength = slowDeclared
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	return req
}

func labTLS(t *testing.T) *tls.Config {
	ca, err := os.ReadFile(plane.PKI.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	return &tls.Config{RootCAs: pool}
}

// slowStreams fills one HTTP/2 connection with slow uploads.
func slowStreams(ctx context.Context, t *testing.T, url, token string, out *outcomes, wg *sync.WaitGroup) {
	c := &http.Client{Transport: &http2.Transport{TLSClientConfig: labTLS(t), StrictMaxConcurrentStreams: true}}
	for range hostileStreams {
		wg.Add(1)
		go func() { defer wg.Done(); out.send(c, slowRequest(ctx, url, token)) }()
	}
}

// slowUploads sends slow uploads over HTTP/1.1, a connection each.
func slowUploads(ctx context.Context, t *testing.T, url, token string, out *outcomes, wg *sync.WaitGroup) {
	tr := &http.Transport{TLSClientConfig: labTLS(t), TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{}}
	c := &http.Client{Transport: tr}
	for range hostileUploads {
		wg.Add(1)
		go func() { defer wg.Done(); out.send(c, slowRequest(ctx, url, token)) }()
	}
}

// idleConns opens hostileConns HTTP/2 connections, 32 at a time, sends
// the client preface on each and holds them until ctx ends.
func idleConns(ctx context.Context, t *testing.T, n lab.Node, wg *sync.WaitGroup) *atomic.Int64 {
	var opened atomic.Int64
	cfg := labTLS(t)
	cfg.NextProtos = []string{"h2"}
	sem := make(chan struct{}, 32)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range hostileConns {
			select {
			case <-ctx.Done():
				return
			case sem <- struct{}{}:
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				d := tls.Dialer{NetDialer: &net.Dialer{Timeout: 5 * time.Second}, Config: cfg}
				conn, err := d.DialContext(ctx, "tcp", n.URL()[len("https://"):])
				<-sem
				if err != nil {
					return
				}
				defer conn.Close()
				if _, err := io.WriteString(conn, http2.ClientPreface+"\x00\x00\x00\x04\x00\x00\x00\x00\x00"); err != nil {
					return
				}
				opened.Add(1)
				go io.Copy(io.Discard, conn) // the server's settings, a GOAWAY
				<-ctx.Done()
			}()
		}
	}()
	return &opened
}

// goodRecord counts another client's answers.
type goodRecord struct {
	ok, failed atomic.Int64
	mu         sync.Mutex
	failures   []string
}

func (g *goodRecord) first() []string { g.mu.Lock(); defer g.mu.Unlock(); return g.failures }

// goodClient lists ConfigMaps through url every 100 ms on a kept
// connection and every 500 ms on a new one, as the admin, honouring
// Retry-After (as client-go does) for at most 10 s. It connects from
// node-a's namespace: the attack's source address holds at most
// proxy.DefaultPerSource connections that have not authenticated, the
// oldest dropped first, and a fresh connection of another client from
// that address can be dropped mid-handshake by the attack's next ones.
func goodClient(ctx context.Context, t *testing.T, url string, wg *sync.WaitGroup) *goodRecord {
	g := &goodRecord{}
	kept, fresh := client(t, plane.PKI.Admin), freshConns(t)
	for _, c := range []*http.Client{kept, fresh} {
		c.Transport.(*http.Transport).DialContext = dialFromNode("node-a")
	}
	loop := func(c *http.Client, every time.Duration) {
		defer wg.Done()
		for sleep(ctx, every) {
			err := getRetrying(c, url)
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				g.failed.Add(1)
				g.mu.Lock()
				if len(g.failures) < 5 {
					g.failures = append(g.failures, err.Error())
				}
				g.mu.Unlock()
				continue
			}
			g.ok.Add(1)
		}
	}
	wg.Add(2)
	go loop(kept, 100*time.Millisecond)
	go loop(fresh, 500*time.Millisecond)
	return g
}

func getRetrying(c *http.Client, url string) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		req, _ := http.NewRequestWithContext(rctx, http.MethodGet, url, nil)
		resp, err := c.Do(req)
		if err != nil {
			cancel()
			return err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		cancel()
		switch {
		case resp.StatusCode == http.StatusOK:
			return nil
		case resp.Header.Get("Retry-After") != "" && time.Now().Before(deadline):
			time.Sleep(time.Second)
		default:
			return fmt.Errorf("%d (route %q)", resp.StatusCode, resp.Header.Get("X-Skewgate-Route"))
		}
	}
}

const (
	steeringOn    = `skewgate_steering_state{state="steering"}`
	leaseExpired  = `skewgate_steering_lookups_total{reason="lease_expired"}`
	droppedSource = `skewgate_client_connections_dropped_total{bound="source"}`
	droppedTotal  = `skewgate_client_connections_dropped_total{bound="total"}`
)

// rssSamples are skewgate's peaks while the test runs.
type rssSamples struct {
	peak, conns     atomic.Int64
	scrapes, failed atomic.Int64
	unsteered       atomic.Int64 // scrapes where steering was not on and skewgate not shedding
	shed            atomic.Bool
}

// sampleRSS reads skewgate's RSS every 100 ms and its shedding and
// connection gauges every 500 ms until ctx ends.
func sampleRSS(ctx context.Context, pid int, n lab.Node, wg *sync.WaitGroup) *rssSamples {
	s := &rssSamples{}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; sleep(ctx, 100*time.Millisecond); i++ {
			if data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
				var kib int64
				for _, line := range strings.Split(string(data), "\n") {
					if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
						fmt.Sscan(v, &kib)
					}
				}
				if kib<<10 > s.peak.Load() {
					s.peak.Store(kib << 10)
				}
			}
			if i%5 == 0 {
				s.scrapes.Add(1)
				if m := metricValues(lab.SkewgateAdminURL(n)+"/metrics", "skewgate_shedding", "skewgate_client_connections", steeringOn); m != nil {
					s.shed.Store(s.shed.Load() || m["skewgate_shedding"] > 0)
					s.conns.Store(max(s.conns.Load(), int64(m["skewgate_client_connections"])))
					if m[steeringOn] == 0 && m["skewgate_shedding"] == 0 {
						s.unsteered.Add(1)
					}
				} else {
					s.failed.Add(1)
				}
			}
		}
	}()
	return s
}

// metricValues reads series from a /metrics page, each named as it is
// written there (labels included).
func metricValues(url string, names ...string) map[string]float64 {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	m := map[string]float64{}
	for _, line := range strings.Split(string(body), "\n") {
		for _, n := range names {
			if v, ok := strings.CutPrefix(line, n+" "); ok {
				var f float64
				fmt.Sscan(v, &f)
				m[n] = f
			}
		}
	}
	return m
}

// dialFromNode dials from inside node name's network namespace: from its
// address, not the root namespace's.
func dialFromNode(name string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		var c net.Conn
		err := lab.InNode(name, func() (err error) {
			c, err = (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, network, addr)
			return err
		})
		return c, err
	}
}

// startLimited starts a skewgate on node b with memory limit limit
// (bytes, as the manifests pass the container's) that steers b's address,
// and waits until new connections reach it.
func startLimited(t *testing.T, b lab.Node, limit int64) lab.Proc {
	t.Helper()
	proc, err := plane.StartSkewgate(context.Background(), b.Name, skewgateBin, lab.SkewgateMode{Steering: true, Kubeconfig: true,
		Env: []string{fmt.Sprintf("SKEWGATE_MEMORY_LIMIT=%d", limit)}}, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proc.Stop(10 * time.Second) })
	url := b.URL() + "/api/v1/namespaces/default/configmaps?limit=1"
	fresh := freshConns(t)
	waitFor(t, 10*time.Second, "steering on", func() bool { return steered(do(t, fresh, http.MethodGet, url, nil)) })
	return proc
}
