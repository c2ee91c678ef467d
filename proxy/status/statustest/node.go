// Package statustest stands in for nodes' secure admin listeners, for
// tests of proxy/status and kubectl-skewgate.
package statustest

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/skewgate/skewgate/proxy/admin"
	"github.com/skewgate/skewgate/proxy/membership"
	"github.com/skewgate/skewgate/proxy/status"
)

// Token is the bearer token every Node accepts; any other is a 401.
const Token = "operator-token"

// Node is one node's skewgate as its admin listener answers.
type Node struct {
	// Local and Peer are the apiservers its membership knows.
	Local, Peer string
	Version     string
	// Steering is the kernel side's view in /debug/routes.
	Steering *admin.SteeringView
	// State is the steering state the metrics say; Lookups the sk_lookup
	// outcomes counted.
	State   string
	Lookups map[string]float64
	// Healthy marks every apiserver healthy, and Window and Grace set the
	// skew window and one type in rollback grace: what a membership that
	// never probed cannot say, written into the JSON the real handler
	// gave.
	Healthy bool
	Window  *admin.WindowView
	Grace   []membership.GraceType
	// Cert is the serving certificate (nil: APIServerCert's).
	Cert *tls.Certificate
}

// SelfSigned is a self-signed certificate, its own CA, for cn and orgs,
// valid for 127.0.0.1, ::1 and dns.
func SelfSigned(t testing.TB, cn string, orgs []string, dns ...string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn, Organization: orgs},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage:    x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, DNSNames: dns, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

var (
	apiserverOnce sync.Once
	apiserverCert tls.Certificate
)

// APIServerCert is the certificate every Node serves unless it names its
// own: an apiserver's, valid for kubernetes.default.svc (and example.com,
// 127.0.0.1), and its own CA, so that one node's certificate verifies
// every node's.
func APIServerCert(t testing.TB) tls.Certificate {
	apiserverOnce.Do(func() { apiserverCert = SelfSigned(t, "kube-apiserver", nil, "example.com", "kubernetes.default.svc") })
	return apiserverCert
}

// Serve serves n over TLS (a certificate for 127.0.0.1 and example.com)
// until the test ends: /debug/routes and /debug/explain from admin.Handler
// on a real membership.Members, /metrics from a registry with the agent's
// metric names.
func Serve(t *testing.T, n Node) *httptest.Server {
	t.Helper()
	peers := []*url.URL{}
	if n.Peer != "" {
		peers = append(peers, &url.URL{Scheme: "https", Host: n.Peer})
	}
	m, err := membership.New(membership.Config{Local: &url.URL{Scheme: "https", Host: n.Local}, Peers: peers})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	state := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: status.MetricSteeringState}, []string{"state"})
	for _, s := range []string{"disabled", "off", "standby", "lapsed", "steering"} {
		v := 0.0
		if s == n.State {
			v = 1
		}
		state.WithLabelValues(s).Set(v)
	}
	lookups := prometheus.NewCounterVec(prometheus.CounterOpts{Name: status.MetricLookups}, []string{"reason"})
	for r, c := range n.Lookups {
		lookups.WithLabelValues(r).Add(c)
	}
	if n.State != "" {
		reg.MustRegister(state, lookups)
	}
	steering := n.Steering
	h := admin.Handler(m, reg, admin.Options{Version: n.Version, Steering: func() *admin.SteeringView { return steering }})
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+Token {
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		if r.URL.Path == "/debug/routes" && (n.Healthy || n.Window != nil || n.Grace != nil) {
			n.edit(t, h, w, r)
			return
		}
		h.ServeHTTP(w, r)
	}))
	cert := APIServerCert(t)
	if n.Cert != nil {
		cert = *n.Cert
	}
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

// edit answers the real handler's /debug/routes with n's changes.
func (n Node) edit(t *testing.T, h http.Handler, w http.ResponseWriter, r *http.Request) {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	var v admin.RoutesView
	if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
		t.Errorf("the admin handler's /debug/routes: %v", err)
	}
	for i := range v.Servers {
		v.Servers[i].Healthy = v.Servers[i].Healthy || n.Healthy
	}
	if n.Window != nil {
		v.Window = n.Window
	}
	v.Grace = append(v.Grace, n.Grace...)
	var buf bytes.Buffer
	json.NewEncoder(&buf).Encode(v)
	w.Header().Set("Content-Type", "application/json")
	w.Write(buf.Bytes())
}

// Workloads is a type in rollback grace until until.
func Workloads(until time.Time, server string) membership.GraceType {
	return membership.GraceType{GVR: schema.GroupVersionResource{Group: "scheduling.k8s.io", Version: "v1alpha2", Resource: "workloads"},
		Until: until, Servers: []string{server}, Why: []string{"came back serving less"}}
}
