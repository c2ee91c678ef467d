package proxy

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/skewgate/skewgate/lab"
	"github.com/skewgate/skewgate/proxy/forward"
	"github.com/skewgate/skewgate/proxy/membership"
)

// stand-in apiservers for skewgate's own cluster reads: each answers
// /readyz and a GET of kube-system/skewgate, or refuses everything as a
// shutting-down kube-apiserver does.
type standIn struct {
	srv      *httptest.Server
	down     atomic.Bool
	gets     atomic.Int32
	bearer   atomic.Value
	hostname string
}

func newStandIn(t *testing.T, kp lab.KeyPair, ip, name string) *standIn {
	t.Helper()
	s := &standIn{hostname: name}
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.down.Load() { // k8s.io/apiserver filters/waitgroup.go, exactly
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("X-Content-Type-Options", "nosniff")
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte(`{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"apiserver is shutting down","reason":"ServiceUnavailable","code":503}`))
			return
		}
		switch r.URL.Path {
		case "/readyz":
			w.Write([]byte("ok"))
		case "/api/v1/namespaces/kube-system/configmaps/skewgate":
			s.gets.Add(1)
			s.bearer.Store(r.Header.Get("Authorization"))
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"skewgate","namespace":"kube-system"},"data":{"answeredBy":"` + s.hostname + `"}}`))
		default:
			http.NotFound(w, r)
		}
	}))
	ln, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatal(err)
	}
	s.srv.Listener = ln
	cert, err := tls.LoadX509KeyPair(kp.CertFile, kp.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	s.srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	s.srv.StartTLS()
	t.Cleanup(s.srv.Close)
	return s
}

// While its own apiserver refuses requests as a shutting-down one does,
// skewgate's cluster client reads through the peer, with the same token;
// back, the local one answers again.
func TestClusterClientFailsOverToPeers(t *testing.T) {
	dir := t.TempDir()
	pki, err := lab.GeneratePKI(dir, []lab.Node{{Name: "node-a", IP: mustIP("127.0.0.1")}, {Name: "node-b", IP: mustIP("127.0.0.2")}})
	if err != nil {
		t.Fatal(err)
	}
	local := newStandIn(t, pki.Serving["node-a"], "127.0.0.1", "node-a")
	peer := newStandIn(t, pki.Serving["node-b"], "127.0.0.2", "node-b")
	ca, err := dynamiccertificates.NewDynamicCAContentFromFile("peer-ca", pki.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	localURL, _ := url.Parse(local.srv.URL)
	peerURL, _ := url.Parse(peer.srv.URL)
	m, err := membership.New(membership.Config{Local: localURL, Peers: []*url.URL{peerURL}, Trust: forward.Trust{PeerCA: ca},
		ProbeInterval: 50 * time.Millisecond, ProbeTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go m.Run(ctx)
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte("skewgate-sa-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	rc := &rest.Config{Host: local.srv.URL, BearerTokenFile: token, TLSClientConfig: rest.TLSClientConfig{CAFile: pki.CAFile, ServerName: "kubernetes"}}
	client, err := kubernetes.NewForConfig(failoverConfig(rc, m))
	if err != nil {
		t.Fatal(err)
	}
	answeredBy := func() string {
		cm, err := client.CoreV1().ConfigMaps("kube-system").Get(context.Background(), "skewgate", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("read through the failover: %v", err)
		}
		return cm.Data["answeredBy"]
	}
	waitHealth := func(id string, want bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			for _, st := range m.Statuses() {
				if st.ID == id && st.Healthy == want {
					return
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s never healthy=%t: %+v", id, want, m.Statuses())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitHealth(peerURL.Host, true)
	waitHealth(localURL.Host, true)
	if got := answeredBy(); got != "node-a" {
		t.Errorf("both healthy: answered by %s, want the local node-a", got)
	}
	// Shutting down, before the probes noticed: refused, so the peer.
	local.down.Store(true)
	if got := answeredBy(); got != "node-b" {
		t.Errorf("local shutting down: answered by %s, want the peer node-b", got)
	}
	waitHealth(localURL.Host, false)
	before := local.gets.Load()
	if got := answeredBy(); got != "node-b" || local.gets.Load() != before {
		t.Errorf("local out: answered by %s (local asked %d times more), want node-b first", got, local.gets.Load()-before)
	}
	if b, _ := peer.bearer.Load().(string); b != "Bearer skewgate-sa-token" {
		t.Errorf("the peer saw Authorization %q, want skewgate's token", b)
	}
	local.down.Store(false)
	waitHealth(localURL.Host, true)
	if got := answeredBy(); got != "node-a" {
		t.Errorf("local back: answered by %s, want node-a", got)
	}
}
