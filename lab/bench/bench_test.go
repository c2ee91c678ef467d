package bench_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/skewgate/skewgate/lab"
	"github.com/skewgate/skewgate/lab/bench"
	"github.com/skewgate/skewgate/lab/labtest"
)

var (
	out        = flag.String("out", "", "docs directory to write benchmarks.md and the chart into (make bench sets it)")
	profileDir = flag.String("profile", "", "directory to write CPU profiles of skewgate under saturation into")
)

var (
	env      *labtest.Env
	skewgate lab.Proc
	haproxy  lab.Proc
	// goProxy is bench.BareProxy: the floor of any Go L7 hop.
	goProxy lab.Proc
	// standby is node-b's skewgate, installed but not steering: what
	// mode auto is outside a skew window (this plane is always in one, so
	// it runs in mode off, whose kernel path is the same: lease 0).
	standby lab.Proc
)

// Addresses the benchmark adds: direct connections come from exempt, which
// skewgate does not steer; HAProxy listens on haproxyAddr, the bare Go
// proxy on goProxyAddr.
var (
	exempt      = netip.MustParseAddr("198.18.0.253")
	haproxyAddr = netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), 16443)
	goProxyAddr = netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), 16444)
)

// TestMain brings the lab up only to run the benchmark: go test without
// -bench (as in make test) runs the report's own tests and needs no lab.
// Started with bench.BareProxyCommand, the test binary is the bare Go
// proxy (startGoProxy).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == bench.BareProxyCommand {
		p, err := bench.ParseBareProxy(os.Args[2:])
		if err == nil {
			err = p.Serve()
		}
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	flag.Parse()
	if f := flag.Lookup("test.bench"); f == nil || f.Value.String() == "" {
		os.Exit(m.Run())
	}
	spec := lab.DefaultSpec()
	spec.InTreeProxy = true
	os.Exit(labtest.Main(m, "bench", spec, setup))
}

// setup adds the exempt source address, and starts skewgate (steering
// node-a's IP:6443) and HAProxy in front of node-a.
func setup(ctx context.Context, e *labtest.Env) error {
	env = e
	br, err := netlink.LinkByName(lab.BridgeName)
	if err != nil {
		return err
	}
	// The bridge goes at lab-down, and its addresses with it.
	if err := netlink.AddrAdd(br, &netlink.Addr{IPNet: &net.IPNet{IP: exempt.AsSlice(), Mask: net.CIDRMask(24, 32)}}); err != nil {
		return fmt.Errorf("add %s to %s: %w", exempt, lab.BridgeName, err)
	}
	mode := lab.SkewgateMode{Kubeconfig: true, Steering: true, SteeringMode: "always", Exempt: []string{exempt.String() + "/32"}}
	if skewgate, err = e.Plane.StartSkewgate(ctx, "node-a", e.Skewgate, mode, 30*time.Second); err != nil {
		return err
	}
	mode.SteeringMode = "off"
	if standby, err = e.Plane.StartSkewgate(ctx, "node-b", e.Skewgate, mode, 30*time.Second); err != nil {
		return err
	}
	if err := startHAProxy(ctx, e.Plane); err != nil {
		return err
	}
	return startGoProxy(ctx, e.Plane)
}

// startGoProxy runs bench.BareProxy (this test binary) in the root
// namespace in front of node-a's apiserver, connecting from the exempt
// address.
func startGoProxy(ctx context.Context, p *lab.Plane) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	a, _ := p.Node("node-a")
	bp := bench.BareProxy{Listen: goProxyAddr.String(), Cert: p.PKI.Serving["node-a"].CertFile, Key: p.PKI.Serving["node-a"].KeyFile,
		ClientCA: p.PKI.CAFile, Upstream: a.URL(), UpstreamCA: p.PKI.CAFile, FrontProxyCert: p.PKI.FrontProxyClient.CertFile,
		FrontProxyKey: p.PKI.FrontProxyClient.KeyFile, Source: exempt.String()}
	if goProxy, err = p.StartAux("go-proxy", self, bp.Args()); err != nil {
		return err
	}
	return waitListening(ctx, "go-proxy", goProxyAddr)
}

// waitListening waits until addr accepts connections.
func waitListening(ctx context.Context, name string, addr netip.AddrPort) error {
	for ctx.Err() == nil {
		if c, err := net.DialTimeout("tcp", addr.String(), time.Second); err == nil {
			return c.Close()
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%s not listening on %s: %w", name, addr, ctx.Err())
}

// startHAProxy runs Debian's HAProxy in TCP mode in the root namespace in
// front of node-a's apiserver, connecting from the exempt address.
func startHAProxy(ctx context.Context, p *lab.Plane) error {
	bin, err := exec.LookPath("haproxy")
	if err != nil {
		return fmt.Errorf("haproxy: %w (make bench installs the Debian package)", err)
	}
	a, _ := p.Node("node-a")
	cfg := filepath.Join(p.Dir, "haproxy.cfg")
	conf := fmt.Sprintf(`global
  maxconn 4096
defaults
  mode tcp
  timeout connect 2s
  timeout client 1h
  timeout server 1h
frontend apiserver
  bind %s
  default_backend node-a
backend node-a
  server node-a %s:%d source %s
`, haproxyAddr, a.IP, lab.APIServerPort, exempt)
	if err := os.WriteFile(cfg, []byte(conf), 0o644); err != nil {
		return err
	}
	if haproxy, err = p.StartAux("haproxy", bin, []string{"-db", "-f", cfg}); err != nil {
		return err
	}
	return waitListening(ctx, "haproxy", haproxyAddr)
}

const (
	configmaps = "/api/v1/namespaces/default/configmaps"
	workloads  = "/apis/scheduling.k8s.io/v1alpha2/namespaces/default/workloads"
)

// BenchmarkTable is `make bench`: every path of the table in one run
// (-benchtime 1x). It prints the table and, with -out, writes
// docs/benchmarks.md and the chart.
func BenchmarkTable(b *testing.B) {
	if *profileDir != "" {
		// Made now: a missing directory would fail the run at its end.
		if err := os.MkdirAll(*profileDir, 0o755); err != nil {
			b.Fatal(err)
		}
	}
	cfg := config(b)
	for range b.N {
		r, err := bench.Run(context.Background(), cfg, os.Stderr)
		if err != nil {
			b.Fatal(err)
		}
		fmt.Println(r.Summary())
		if *out != "" {
			if err := bench.WriteDocs(*out, r); err != nil {
				b.Fatal(err)
			}
		}
	}
}

func config(b *testing.B) bench.Config {
	a, _ := env.Plane.Node("node-a")
	nb, _ := env.Plane.Node("node-b")
	server, _ := env.Plane.State.Proc("node-a")
	aURL, bURL := a.URL(), nb.URL()
	direct, steered := client(b, exempt, ""), client(b, netip.Addr{}, "")
	return bench.Config{
		Paths: []bench.Path{
			{Route: "local", Name: "direct", URL: aURL + configmaps, Client: direct},
			{Route: "local", Name: "haproxy", URL: "https://" + haproxyAddr.String() + configmaps, Client: client(b, netip.Addr{}, a.IP.String()), Proxy: haproxy.PID},
			{Route: "local", Name: "go-proxy", URL: "https://" + goProxyAddr.String() + configmaps, Client: client(b, netip.Addr{}, a.IP.String()), Proxy: goProxy.PID},
			{Route: "local", Name: "skewgate", URL: aURL + configmaps, Client: steered, Proxy: skewgate.PID, Want: "local"},
			{Route: "peer", Name: "direct", URL: bURL + workloads, Client: client(b, netip.Addr{}, "")},
			{Route: "peer", Name: "in-tree", URL: aURL + workloads, Client: client(b, exempt, ""), Proxy: server.PID},
			{Route: "peer", Name: "skewgate", URL: aURL + workloads, Client: client(b, netip.Addr{}, ""), Proxy: skewgate.PID, Want: "peer"},
			// node-b's address with its skewgate in standby: the
			// kernel's lookup passes the connection to the apiserver.
			{Route: "standby", Name: "direct", URL: bURL + configmaps, Client: client(b, exempt, "")},
			{Route: "standby", Name: "skewgate", URL: bURL + configmaps, Client: client(b, netip.Addr{}, ""), Proxy: standby.PID},
		},
		Sequential: 500, Concurrency: 32, Saturation: 30 * time.Second, Rounds: 6,
		Server: server.PID, Skewgate: skewgate.PID, Admin: lab.SkewgateAdminURL(a),
		Watch:      bench.WatchLoad{Watches: 500, RPS: 200, Duration: 15 * time.Second},
		ProfileDir: *profileDir,
	}
}

// client is an HTTP/2 client with the admin's certificate, connecting from
// src (if valid) and verifying serverName (if set) instead of the URL's
// host. Each path has its own connections.
func client(b *testing.B, src netip.Addr, serverName string) *http.Client {
	caPEM, err := os.ReadFile(env.Plane.PKI.CAFile)
	if err != nil {
		b.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	cert, err := tls.LoadX509KeyPair(env.Plane.PKI.Admin.CertFile, env.Plane.PKI.Admin.KeyFile)
	if err != nil {
		b.Fatal(err)
	}
	dialer := &net.Dialer{Timeout: 5 * time.Second}
	if src.IsValid() {
		dialer.LocalAddr = &net.TCPAddr{IP: src.AsSlice()}
	}
	return &http.Client{Transport: &http.Transport{
		DialContext:         dialer.DialContext,
		TLSClientConfig:     &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{cert}, ServerName: serverName},
		ForceAttemptHTTP2:   true,
		MaxIdleConnsPerHost: 64,
	}}
}
