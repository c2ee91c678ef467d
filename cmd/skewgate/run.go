package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/skewgate/skewgate/admin"
	"github.com/skewgate/skewgate/forward"
	"github.com/skewgate/skewgate/membership"
	"github.com/skewgate/skewgate/proxy"
)

// runOptions are `skewgate run`'s flags, named like kube-apiserver's.
type runOptions struct {
	bindAddress        string
	securePort         int
	tlsCertFile        string
	tlsKeyFile         string
	clientCAFile       string
	requestHeaderCA    string
	requestHeaderNames []string
	proxyClientCert    string
	proxyClientKey     string
	peerCAFile         string
	localAPIServer     string
	peers              []string
	kubeconfig         string
	metricsBindAddress string
	refreshInterval    time.Duration
	stateFile          string
	steer              steerOptions
}

func newRunCmd() *cobra.Command {
	o := runOptions{bindAddress: "0.0.0.0", securePort: 16443, metricsBindAddress: "127.0.0.1:16444",
		refreshInterval: 10 * time.Second, requestHeaderNames: []string{"front-proxy-client"},
		stateFile: "/var/lib/skewgate/state.json"}
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Serve as the GVR-aware proxy in front of this node's kube-apiserver",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return run(ctx, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.bindAddress, "bind-address", o.bindAddress, "address the proxy listens on")
	f.IntVar(&o.securePort, "secure-port", o.securePort, "port the proxy listens on (TLS)")
	f.StringVar(&o.tlsCertFile, "tls-cert-file", "", "serving certificate presented to clients: the apiserver's own (required)")
	f.StringVar(&o.tlsKeyFile, "tls-private-key-file", "", "key of --tls-cert-file (required)")
	f.StringVar(&o.clientCAFile, "client-ca-file", "", "CA bundle verifying client certificates, as kube-apiserver's (required)")
	f.StringVar(&o.requestHeaderCA, "requestheader-client-ca-file", "", "CA bundle verifying peers' front-proxy certificates; without it no peer is trusted")
	f.StringSliceVar(&o.requestHeaderNames, "requestheader-allowed-names", o.requestHeaderNames, "common names of trusted peers' front-proxy certificates (empty: any)")
	f.StringVar(&o.proxyClientCert, "proxy-client-cert-file", "", "front-proxy client certificate presented to apiservers (required)")
	f.StringVar(&o.proxyClientKey, "proxy-client-key-file", "", "key of --proxy-client-cert-file (required)")
	f.StringVar(&o.peerCAFile, "peer-ca-file", "", "CA bundle verifying apiservers' serving certificates (required)")
	f.StringVar(&o.localAPIServer, "local-apiserver", "", "URL of this node's kube-apiserver, on an address that is not steered (required)")
	f.StringSliceVar(&o.peers, "peers", nil, "URLs of peer kube-apiservers, comma-separated")
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig for discovering peers from the default/kubernetes EndpointSlices (point it at the local apiserver)")
	f.StringVar(&o.metricsBindAddress, "metrics-bind-address", o.metricsBindAddress, "admin listener: /metrics, /healthz, /readyz, /debug/routes, /debug/explain")
	f.DurationVar(&o.refreshInterval, "discovery-refresh-interval", o.refreshInterval, "how often every server's discovery is re-read (conditionally, by ETag)")
	f.StringVar(&o.stateFile, "state-file", o.stateFile, "where every peer's last-known discovery is kept across restarts, so a peer that is down when skewgate starts answers 503, not 404 (empty: nothing kept)")
	o.steer.addFlags(f)
	return cmd
}

func run(ctx context.Context, o runOptions) error {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	certs, err := loadCerts(ctx, o)
	if err != nil {
		return err
	}
	local, peers, err := parseServers(o.localAPIServer, o.peers)
	if err != nil {
		return err
	}
	if peers, err = withoutSelf(peers, log); err != nil {
		return err
	}
	trust := forward.Trust{PeerCA: certs.peerCA, ClientCert: certs.proxyClient}
	members, err := membership.New(membership.Config{Local: local, Peers: peers, RefreshInterval: o.refreshInterval, Trust: trust})
	if err != nil {
		return err
	}
	if err := checkReachable(ctx, local, forward.NewBackend("check", local, trust)); err != nil {
		return err
	}
	if o.stateFile != "" {
		restoreState(ctx, members, o.stateFile, log)
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), members)
	handler := proxy.NewHandler(members, certs.clientCA, proxy.RequestHeader{CA: certs.requestHeaderCA, AllowedNames: o.requestHeaderNames}, proxy.NewMetrics(reg))

	addr := net.JoinHostPort(o.bindAddress, strconv.Itoa(o.securePort))
	var peerHosts []string
	for _, p := range peers {
		peerHosts = append(peerHosts, p.Hostname())
	}
	ln, steering, err := o.steer.listen(addr, local.Host, peerHosts, reg)
	if err != nil {
		return err
	}
	defer steering.close()
	go steering.engage(ctx, members.Ready, members.Table, trust, reg, log)
	// After steering: connstat must see the first connections to every
	// apiserver, which the probes open and HTTP/2 then keeps.
	go members.Run(ctx)
	if o.kubeconfig != "" {
		if err := watchCluster(ctx, o.kubeconfig, members, peers, log); err != nil {
			ln.Close()
			return err
		}
	}
	extra := map[string]admin.Extra{"steering": steering.status}
	adminSrv, err := serveAdmin(o.metricsBindAddress, admin.Handler(members, reg, extra))
	if err != nil {
		ln.Close()
		return err
	}
	defer adminSrv.Close()
	log.Info("serving", "address", ln.Addr().String(), "local", local.String(), "peers", len(peers), "admin", o.metricsBindAddress)
	err = proxy.Serve(ctx, ln, handler, proxy.TLS{Serving: certs.serving, ClientCAs: certs.allClientCAs})
	if o.stateFile != "" {
		if serr := members.SaveState(o.stateFile); serr != nil {
			log.Warn("state not saved", "err", serr)
		}
	}
	return err
}

// restoreState reads the previous run's peers and keeps saving this run's
// every 10 s (only when changed). A state file that cannot be read or
// written costs only the restart protection: a warning, never a failure.
func restoreState(ctx context.Context, m *membership.Members, path string, log *slog.Logger) {
	if n, err := m.Restore(path); err != nil {
		log.Warn("state file not restored", "err", err)
	} else if n > 0 {
		log.Info("restored peers from the state file", "peers", n, "file", path)
	}
	go func() {
		var lastErr string
		tick := time.NewTicker(10 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			err := m.SaveState(path)
			switch {
			case err != nil && err.Error() != lastErr:
				log.Warn("state not saved", "err", err)
			case err == nil && lastErr != "":
				log.Info("state saved again", "file", path)
			}
			lastErr = ""
			if err != nil {
				lastErr = err.Error()
			}
		}
	}()
}

// certs are the reloadable certificate sources.
type certs struct {
	serving         *dynamiccertificates.DynamicCertKeyPairContent
	proxyClient     *dynamiccertificates.DynamicCertKeyPairContent
	clientCA        *dynamiccertificates.DynamicFileCAContent
	peerCA          *dynamiccertificates.DynamicFileCAContent
	requestHeaderCA dynamiccertificates.CAContentProvider
	allClientCAs    dynamiccertificates.CAContentProvider
}

// loadCerts reads every certificate flag, failing with one line naming the
// flag, and starts watching the files so rotations take effect.
func loadCerts(ctx context.Context, o runOptions) (*certs, error) {
	required := []struct{ flag, value string }{
		{"--tls-cert-file", o.tlsCertFile}, {"--tls-private-key-file", o.tlsKeyFile},
		{"--client-ca-file", o.clientCAFile}, {"--proxy-client-cert-file", o.proxyClientCert},
		{"--proxy-client-key-file", o.proxyClientKey}, {"--peer-ca-file", o.peerCAFile},
		{"--local-apiserver", o.localAPIServer},
	}
	for _, r := range required {
		if r.value == "" {
			return nil, fmt.Errorf("%s is required", r.flag)
		}
	}
	c := &certs{}
	var err error
	if c.serving, err = dynamiccertificates.NewDynamicServingContentFromFiles("serving", o.tlsCertFile, o.tlsKeyFile); err != nil {
		return nil, fmt.Errorf("--tls-cert-file/--tls-private-key-file: %w", err)
	}
	if c.proxyClient, err = dynamiccertificates.NewDynamicServingContentFromFiles("proxy-client", o.proxyClientCert, o.proxyClientKey); err != nil {
		return nil, fmt.Errorf("--proxy-client-cert-file/--proxy-client-key-file: %w", err)
	}
	if c.clientCA, err = dynamiccertificates.NewDynamicCAContentFromFile("client-ca", o.clientCAFile); err != nil {
		return nil, fmt.Errorf("--client-ca-file: %w", err)
	}
	if c.peerCA, err = dynamiccertificates.NewDynamicCAContentFromFile("peer-ca", o.peerCAFile); err != nil {
		return nil, fmt.Errorf("--peer-ca-file: %w", err)
	}
	c.allClientCAs = c.clientCA
	reloaders := []interface{ Run(context.Context, int) }{c.serving, c.proxyClient, c.clientCA, c.peerCA}
	if o.requestHeaderCA != "" {
		rh, err := dynamiccertificates.NewDynamicCAContentFromFile("requestheader-client-ca", o.requestHeaderCA)
		if err != nil {
			return nil, fmt.Errorf("--requestheader-client-ca-file: %w", err)
		}
		c.requestHeaderCA = rh
		c.allClientCAs = dynamiccertificates.NewUnionCAContentProvider(c.clientCA, rh)
		reloaders = append(reloaders, rh)
	}
	for _, r := range reloaders {
		go r.Run(ctx, 1)
	}
	return c, nil
}

// withoutSelf drops the --peers entries that are addresses of this node:
// the same --peers list on every node is common, and this node's apiserver
// is the local one, not a peer (nor a source to exempt from steering).
func withoutSelf(peers []*url.URL, log *slog.Logger) ([]*url.URL, error) {
	self, err := membership.LocalAddrs()
	if err != nil {
		return nil, err
	}
	out := peers[:0:0]
	for _, p := range peers {
		if ip, err := netip.ParseAddr(p.Hostname()); err == nil && self(ip) {
			log.Info("--peers names this node: left out", "peer", p.String())
			continue
		}
		out = append(out, p)
	}
	return out, nil
}

func parseServers(local string, peers []string) (*url.URL, []*url.URL, error) {
	lu, err := parseServer("--local-apiserver", local)
	if err != nil {
		return nil, nil, err
	}
	var pus []*url.URL
	for _, p := range peers {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		pu, err := parseServer("--peers", p)
		if err != nil {
			return nil, nil, err
		}
		pus = append(pus, pu)
	}
	return lu, pus, nil
}

func parseServer(flag, s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "https" || u.Host == "" || (u.Path != "" && u.Path != "/") {
		return nil, fmt.Errorf("%s %q: want https://host:port", flag, s)
	}
	u.Path = ""
	if u.Port() == "" {
		u.Host = net.JoinHostPort(u.Hostname(), "443")
	}
	return u, nil
}

// checkReachable fails start-up with one line when the local apiserver
// cannot be reached or does not present a certificate the peer CA trusts.
func checkReachable(ctx context.Context, u *url.URL, b *forward.Backend) error {
	defer b.CloseIdle()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String()+"/healthz", nil)
	if err != nil {
		return err
	}
	resp, err := b.Transport().RoundTrip(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("local apiserver %s unreachable: %w", u, err)
	}
	resp.Body.Close()
	return nil
}

func serveAdmin(addr string, h http.Handler) (*http.Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-bind-address: %w", err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	return srv, nil
}

// watchCluster adds the peers the cluster lists (the default/kubernetes
// EndpointSlices and the apiserver identity leases) to the --peers ones,
// following them as apiservers come and go.
func watchCluster(ctx context.Context, kubeconfig string, m *membership.Members, static []*url.URL, log *slog.Logger) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("--kubeconfig: %w", err)
	}
	cfg.UserAgent = "skewgate"
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("--kubeconfig: %w", err)
	}
	self, err := membership.LocalAddrs()
	if err != nil {
		return err
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	// The informer lives on ctx; only the initial sync is bounded.
	synced := make(chan error, 1)
	go func() { synced <- m.WatchCluster(ctx, client, static, self, log) }()
	select {
	case err := <-synced:
		if err != nil {
			return fmt.Errorf("--kubeconfig %s: %w", kubeconfig, err)
		}
		return nil
	case <-sctx.Done():
		return fmt.Errorf("--kubeconfig %s: the cluster's apiservers not synced within 30s", kubeconfig)
	}
}
