package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"
	cliflag "k8s.io/component-base/cli/flag"

	"github.com/skewgate/skewgate/proxy/forward"
	"github.com/skewgate/skewgate/proxy/membership"
	"github.com/skewgate/skewgate/proxy/upgrade"
)

// Config is the request side of one node, as `skewgate run` configures it.
type Config struct {
	Certs CertFiles
	// RequestHeaderAllowedNames are the common names of trusted peers'
	// front-proxy certificates (empty: any the CA signed).
	RequestHeaderAllowedNames []string
	// HeaderNames are kube-apiserver's --requestheader-*-headers: the
	// identity headers skewgate sets and strips. With a Kubeconfig the
	// names the cluster publishes are stripped too.
	HeaderNames    HeaderNames
	LocalAPIServer string // URL, on an address that is not steered
	// LocalServerName is the name the local apiserver's serving
	// certificate is verified by; empty: the URL's host, or "kubernetes"
	// when that is a loopback address (kubeadm's apiserver.crt carries
	// "kubernetes" and no loopback address).
	LocalServerName string
	Peers           []string // URLs
	// Kubeconfig finds peers in the cluster. Empty: in a pod (a
	// ServiceAccount token in ServiceAccountDir) the ServiceAccount's
	// token and CA toward LocalAPIServer, else only Peers.
	Kubeconfig string
	// ServiceAccountDir holds the ServiceAccount's token and ca.crt;
	// empty: DefaultServiceAccountDir.
	ServiceAccountDir string
	RefreshInterval   time.Duration
	// WindowHold is how long the skew window stays open after the
	// apiservers last differed (steering mode auto).
	WindowHold time.Duration
	// StateFile keeps every server's last-known discovery and the
	// rollback graces across restarts (empty: nothing kept).
	StateFile string
	// RollbackGrace is --rollback-grace: how long rule 5 holds what a
	// server served after it departed, went down or came back serving
	// less (0: not at all).
	RollbackGrace time.Duration
	UserAgent     string
	Log           *slog.Logger
	// TLSMinVersion and TLSCipherSuites are named like kube-apiserver's
	// flags (VersionTLS12, TLS_ECDHE_…); empty: Go's defaults.
	TLSMinVersion   string
	TLSCipherSuites []string
	// HTTP2MaxStreams bounds concurrent streams per client connection.
	HTTP2MaxStreams int
	// NodeName is this node's name (the kubelet's): its upgrade lease's
	// holder. Empty: the host name, lowercased, as the kubelet defaults.
	NodeName string
	// APIServerManifest is the kube-apiserver static-pod manifest whose
	// image tag announces this node's upgrade (empty: not watched).
	APIServerManifest string
	// KubeadmAnnouncement: kubeadm's upgrade health-check Job
	// (kube-system/upgrade-health-check-*) opens every node's skew window
	// as `kubeadm upgrade apply` (or plan) starts, before any apiserver
	// stops (proxy/upgrade/announce.go).
	KubeadmAnnouncement bool
	// LocalMaxInFlight bounds the short requests in flight to the local
	// apiserver (0: no bound), as PeerMaxInFlight does each peer's: past
	// it callers get a retryable 429, and skewgate's goroutines, sockets
	// and body copies stay bounded when a node's load piles up.
	LocalMaxInFlight int
	// MaxConns bounds the client connections open at once before skewgate
	// sheds load (0: no bound; see Load).
	MaxConns int64
}

// Proxy is the request side, loaded and checked: certificates read, the
// local apiserver reached, the previous run's peers restored.
type Proxy struct {
	cfg     Config
	certs   *Certs
	trust   forward.Trust
	local   *url.URL
	peers   []*url.URL
	Members *membership.Members
	// Load is what skewgate carries against its bounds, for shedding.
	Load *Load
	// admission counts in Load only the connections whose caller proved
	// who it is.
	admission *Admission
	// Upgrade says whether some node's apiserver upgrade has begun, as
	// early as kubeadm's manifest shows it; Members' window reads it.
	Upgrade *upgrade.Signal
	// Switch is the cluster's steering mode (kube-system/skewgate), with
	// cluster credentials.
	Switch  SteeringSwitch
	handler *Handler
	// cluster is how skewgate reads the cluster (nil: it does not).
	cluster       *rest.Config
	clusterSource clusterSource
}

// New loads cfg and checks that the local apiserver answers with a
// certificate the peer CA trusts. Its errors name the flags at fault.
func New(ctx context.Context, cfg Config, reg prometheus.Registerer) (*Proxy, error) {
	certs, err := LoadCerts(ctx, cfg.Certs)
	if err != nil {
		return nil, err
	}
	local, peers, err := membership.ParseServers(cfg.LocalAPIServer, cfg.Peers)
	if err != nil {
		return nil, err
	}
	self, err := membership.LocalAddrs()
	if err != nil {
		return nil, err
	}
	p := &Proxy{cfg: cfg, certs: certs, local: local, peers: membership.WithoutSelf(peers, self, cfg.Log)}
	p.trust = forward.Trust{PeerCA: certs.PeerCA, ClientCert: certs.ProxyClient}
	if p.Upgrade, err = p.newUpgradeSignal(cfg); err != nil {
		return nil, err
	}
	p.Members, err = membership.New(membership.Config{Local: local, LocalServerName: localServerName(cfg.LocalServerName, local), Peers: p.peers, RefreshInterval: cfg.RefreshInterval, WindowHold: cfg.WindowHold, Grace: memberGrace(cfg.RollbackGrace), Trust: p.trust, UserAgent: cfg.UserAgent, Log: cfg.Log,
		UpgradeSignal: p.Upgrade.Signal})
	if err != nil {
		return nil, err
	}
	if local := p.Members.Backends([]string{p.Members.LocalID()}); len(local) == 1 {
		local[0].LimitInFlight(cfg.LocalMaxInFlight) // before any request
	}
	check := p.trust
	check.ServerName = localServerName(cfg.LocalServerName, local)
	if err := forward.CheckReachable(ctx, forward.NewBackend("check", local, check)); err != nil {
		// A local server that is down (restarting with its node's
		// upgrade) is no reason not to serve through peers; one whose
		// certificate the peer CA does not trust is a wrong flag.
		if errors.Is(err, forward.ErrUntrustedServer) {
			return nil, err
		}
		cfg.Log.Warn("local apiserver not reachable yet; serving through peers until it is", "err", err)
	}
	if p.cluster, p.clusterSource, err = clusterConfig(cfg, local, cfg.serviceAccountDir()); err != nil {
		return nil, err
	}
	if p.cluster != nil {
		// Peers restored from the state file and not yet listed look
		// departed until the cluster's list is read: not ready before.
		p.Members.AwaitCluster()
	}
	if cfg.StateFile != "" {
		p.Members.KeepState(ctx, cfg.StateFile, cfg.Log)
	}
	p.Load = &Load{MaxConns: cfg.MaxConns}
	p.admission = NewAdmission(p.Load)
	metrics := register(reg, p.Members, certs, p.Load, p.admission, &p.Switch)
	rh := RequestHeader{CA: certs.RequestHeaderCA, AllowedNames: cfg.RequestHeaderAllowedNames, Names: cfg.HeaderNames, Self: p.trust.ClientCert}
	p.handler = NewHandler(p.Members, certs.ClientCA, rh, metrics)
	return p, nil
}

// LocalHost is the local apiserver's host:port.
func (p *Proxy) LocalHost() string { return p.local.Host }

// PeerCount is how many peers were named on the command line.
func (p *Proxy) PeerCount() int { return len(p.peers) }

// Probe returns a check that a new connection to dial is answered by this
// proxy, for a request addressed to steered (the agent's steering probe).
func (p *Proxy) Probe(dial, steered netip.AddrPort) func(context.Context) error {
	return forward.ProxyProbe(dial, steered, p.trust, p.cfg.UserAgent)
}

// Start probes every member and, with cluster credentials (a Kubeconfig,
// or in a pod its ServiceAccount: see clusterConfig), follows the cluster's
// apiservers and the identity headers they trust; it returns once both are
// read, or why they cannot be.
func (p *Proxy) Start(ctx context.Context) error {
	go p.Members.Run(ctx)
	rc, source := p.cluster, p.clusterSource
	if rc == nil {
		go p.Upgrade.Run(ctx, nil) // this node's manifest only
		return nil
	}
	p.cfg.Log.Info("following the cluster's apiservers", "credentials", source)
	if rc.Host == p.local.String() {
		// Through a peer while the local apiserver is away.
		rc = failoverConfig(rc, p.Members)
	}
	client, err := clusterClient(rc, p.cfg.UserAgent)
	if err != nil {
		return fmt.Errorf("%s: %w", source, err)
	}
	go p.Upgrade.Run(ctx, client)
	if err := p.watchHeaderNames(ctx, client); err != nil {
		return fmt.Errorf("%s: %w", source, err)
	}
	if err := p.Members.WatchClusterSynced(ctx, client, p.peers, p.cfg.Log); err != nil {
		return fmt.Errorf("%s: %w", source, err)
	}
	p.watchSwitch(ctx, client)
	p.Members.ClusterListed()
	// Not awaited: until the APIServices are read, the state file's groups
	// and the compiled ones count.
	go p.watchBuiltIn(ctx, rc)
	return nil
}

// Serve serves clients on ln until ctx ends, then saves the state file.
// withdraw, if set, runs first when ctx ends: it stops new connections
// from reaching ln (steering), so none is left in ln's accept queue when
// it closes (see TLS.Withdraw).
//
// hb, if set, hands steered connections back once steering is no longer
// wanted (see HandBack).
func (p *Proxy) Serve(ctx context.Context, ln net.Listener, withdraw func() (queued bool), hb *HandBack) error {
	t, err := p.cfg.tls()
	if err != nil {
		return err
	}
	if hb != nil {
		p.handler.handBack, hb.counted = hb, p.handler.metrics.handBack
		go hb.run(ctx)
	}
	t.Serving, t.ClientCAs, t.Withdraw, t.EndLongRunning = p.certs.Serving, p.certs.AllClientCAs, withdraw, p.handler.EndLongRunning
	t.Admission = p.admission
	err = Serve(ctx, ln, p.handler, t)
	if p.cfg.StateFile != "" {
		if serr := p.Members.SaveState(p.cfg.StateFile); serr != nil {
			p.cfg.Log.Warn("state not saved", "err", serr)
		}
	}
	return err
}

// Validate reports every missing or invalid setting at once, each naming
// its flag.
func (c Config) Validate() []error {
	errs := append(c.Certs.Validate(), c.HeaderNames.Validate()...)
	if c.LocalAPIServer == "" {
		errs = append(errs, errors.New("--local-apiserver is required"))
	} else if _, _, err := membership.ParseServers(c.LocalAPIServer, nil); err != nil {
		errs = append(errs, err)
	}
	for _, p := range c.Peers {
		if _, _, err := membership.ParseServers("https://127.0.0.1:6443", []string{p}); err != nil {
			errs = append(errs, err)
		}
	}
	if _, err := c.tls(); err != nil {
		errs = append(errs, err)
	}
	if c.HTTP2MaxStreams < 0 {
		errs = append(errs, fmt.Errorf("--http2-max-streams-per-connection %d: want 0 (Go's default) or more", c.HTTP2MaxStreams))
	}
	if c.RollbackGrace < 0 {
		errs = append(errs, fmt.Errorf("--rollback-grace %s: want 0 (no grace) or a positive duration", c.RollbackGrace))
	}
	if c.MaxConns < 0 {
		errs = append(errs, fmt.Errorf("--max-connections %d: want 0 (no bound) or more", c.MaxConns))
	}
	if c.LocalMaxInFlight < 0 {
		errs = append(errs, fmt.Errorf("--local-max-requests-inflight %d: want 0 (no bound) or more", c.LocalMaxInFlight))
	}
	if c.RefreshInterval <= 0 {
		errs = append(errs, fmt.Errorf("--discovery-refresh-interval %s: want a positive duration", c.RefreshInterval))
	}
	return errs
}

// tls reads the TLS policy flags with component-base's parsers, so they
// take exactly kube-apiserver's values.
func (c Config) tls() (TLS, error) {
	t := TLS{MaxStreams: c.HTTP2MaxStreams}
	if c.TLSMinVersion != "" {
		v, err := cliflag.TLSVersion(c.TLSMinVersion)
		if err != nil {
			return t, fmt.Errorf("--tls-min-version: %w", err)
		}
		t.MinVersion = v
	}
	if len(c.TLSCipherSuites) > 0 {
		suites, err := cliflag.TLSCipherSuites(c.TLSCipherSuites)
		if err != nil {
			return t, fmt.Errorf("--tls-cipher-suites: %w", err)
		}
		t.CipherSuites = suites
	}
	return t, nil
}

func (c Config) serviceAccountDir() string {
	if c.ServiceAccountDir == "" {
		return DefaultServiceAccountDir
	}
	return c.ServiceAccountDir
}

// memberGrace is --rollback-grace as membership takes it: there zero is
// the default, and NoGrace none.
func memberGrace(flag time.Duration) time.Duration {
	if flag == 0 {
		return membership.NoGrace
	}
	return flag
}

// localServerName is the name the local apiserver is verified by.
func localServerName(flag string, local *url.URL) string {
	if flag != "" {
		return flag
	}
	if ip, err := netip.ParseAddr(local.Hostname()); err == nil && ip.IsLoopback() {
		return "kubernetes"
	}
	return ""
}
