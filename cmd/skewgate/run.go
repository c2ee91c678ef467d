package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
	"golang.org/x/term"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	cliflag "k8s.io/component-base/cli/flag"
	logsapi "k8s.io/component-base/logs/api/v1"
	_ "k8s.io/component-base/logs/json/register" // --logging-format=json

	"github.com/skewgate/skewgate/agent"
	"github.com/skewgate/skewgate/proxy"
	"github.com/skewgate/skewgate/proxy/admin"
	"github.com/skewgate/skewgate/proxy/membership"
)

// runOptions are `skewgate run`'s flags, named like kube-apiserver's.
type runOptions struct {
	bindAddress string
	securePort  int
	proxy       proxy.Config
	node        agent.NodeConfig
	adminAddr   string
	secureAdmin string
	// adminLoopback serves the secure admin listener on 127.0.0.1 too.
	adminLoopback bool
	profiling     bool
	mode          string
	logging       *logsapi.LoggingConfiguration
	// localFrom says where the local apiserver's URL came from, for the log.
	localFrom string
	// handOver and handOverWait: see Succession.
	handOver     bool
	handOverWait time.Duration
}

func newRunCmd() *cobra.Command {
	o := &runOptions{securePort: 16443, handOver: true, adminAddr: "127.0.0.1:16444", mode: string(agent.ModeAuto),
		logging: logsapi.NewLoggingConfiguration()}
	o.proxy = proxy.Config{RefreshInterval: 10 * time.Second, WindowHold: 10 * time.Minute, RollbackGrace: membership.DefaultGrace, RequestHeaderAllowedNames: []string{"front-proxy-client"},
		StateFile: "/var/lib/skewgate/state.json", HeaderNames: proxy.DefaultHeaderNames(),
		APIServerManifest: "/etc/kubernetes/manifests/kube-apiserver.yaml"}
	o.node = agent.NodeConfig{PinPath: "/sys/fs/bpf/skewgate"}
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Serve as the GVR-aware proxy in front of this node's kube-apiserver",
		Long: `run serves as the GVR-aware proxy in front of this node's kube-apiserver:
a request the local server does not serve goes to a peer that does, over
mTLS, with the caller's identity. With --steering, new connections to the
node's apiserver address are steered into it with eBPF, failing open.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.validate(); err != nil {
				return usageError{cmd.CommandPath(), err}
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return run(ctx, o)
		},
	}
	fss := o.flags()
	for _, fs := range fss.FlagSets {
		cmd.Flags().AddFlagSet(fs)
	}
	cols, _, _ := term.GetSize(int(os.Stdout.Fd()))
	cliflag.SetUsageAndHelpFunc(cmd, fss, cols)
	return cmd
}

func (o *runOptions) flags() cliflag.NamedFlagSets {
	var fss cliflag.NamedFlagSets
	f := fss.FlagSet("serving")
	f.StringVar(&o.bindAddress, "bind-address", o.bindAddress, "address the proxy listens on (default: with --steering "+agent.LoopbackBoth+
		", loopback on a socket steering delivers IPv4 and IPv6 connections into, so that clients reach it only through steering; without, 0.0.0.0, for a load balancer)")
	f.IntVar(&o.securePort, "secure-port", o.securePort, "port the proxy listens on (TLS)")
	f.StringVar(&o.proxy.Certs.TLSCert, "tls-cert-file", "", "serving certificate presented to clients: the apiserver's own (required)")
	f.StringVar(&o.proxy.Certs.TLSKey, "tls-private-key-file", "", "key of --tls-cert-file (required)")
	f.StringVar(&o.proxy.TLSMinVersion, "tls-min-version", "", "minimum TLS version, as kube-apiserver's flag: "+strings.Join(cliflag.TLSPossibleVersions(), ", ")+" (default VersionTLS12)")
	f.StringSliceVar(&o.proxy.TLSCipherSuites, "tls-cipher-suites", nil, "cipher suites, as kube-apiserver's flag (default: Go's); possible: "+strings.Join(cliflag.PreferredTLSCipherNames(), ", "))
	f.IntVar(&o.proxy.HTTP2MaxStreams, "http2-max-streams-per-connection", 1000, "HTTP/2 concurrent streams per client connection, as kube-apiserver's flag")
	f.Int64Var(&o.proxy.MaxConns, "max-connections", 20000, "client connections open at once whose caller proved who it is (a verified client certificate, or a token an apiserver accepted; others are bounded per source address and never count) before skewgate sheds load by failing open: steering is withdrawn (new connections reach the apiserver directly) and steered connections are handed back until fewer than 80 % remain (also past 90 % of the soft memory limit); 0 for no bound")
	f.IntVar(&o.proxy.LocalMaxInFlight, "local-max-requests-inflight", 0, "short requests in flight to the local apiserver, including their time in its API Priority and Fairness queues (0: no bound, the default: APF decides who waits); past it callers get 429 with Retry-After, except requests APF exempts or isolates (system:masters, system:nodes, Leases, kube-controller-manager, kube-scheduler, kube-system service accounts, probes)")

	f = fss.FlagSet("authentication")
	f.StringVar(&o.proxy.Certs.ClientCA, "client-ca-file", "", "CA bundle verifying client certificates, as kube-apiserver's (required)")
	f.StringVar(&o.proxy.Certs.RequestHeaderCA, "requestheader-client-ca-file", "", "CA bundle verifying peers' front-proxy certificates; without it no peer is trusted")
	f.StringSliceVar(&o.proxy.RequestHeaderAllowedNames, "requestheader-allowed-names", o.proxy.RequestHeaderAllowedNames, "common names of trusted peers' front-proxy certificates (empty: any)")
	f.StringSliceVar(&o.proxy.HeaderNames.User, "requestheader-username-headers", o.proxy.HeaderNames.User, "kube-apiserver's: the user headers skewgate sets (the first) and strips from clients (all)")
	f.StringSliceVar(&o.proxy.HeaderNames.UID, "requestheader-uid-headers", o.proxy.HeaderNames.UID, "kube-apiserver's: the UID headers skewgate sets (the first) and strips (all)")
	f.StringSliceVar(&o.proxy.HeaderNames.Group, "requestheader-group-headers", o.proxy.HeaderNames.Group, "kube-apiserver's: the group headers skewgate sets (the first) and strips (all); with --kubeconfig or in a pod, every name in kube-system/extension-apiserver-authentication is stripped too")
	f.StringSliceVar(&o.proxy.HeaderNames.ExtraPrefix, "requestheader-extra-headers-prefix", o.proxy.HeaderNames.ExtraPrefix, "kube-apiserver's: the extra header prefixes skewgate sets (the first) and strips (all)")
	f.StringVar(&o.proxy.Certs.ProxyClientCert, "proxy-client-cert-file", "", "front-proxy client certificate presented to apiservers (required)")
	f.StringVar(&o.proxy.Certs.ProxyClientKey, "proxy-client-key-file", "", "key of --proxy-client-cert-file (required)")

	f = fss.FlagSet("peers")
	f.StringVar(&o.proxy.Certs.PeerCA, "peer-ca-file", "", "CA bundle verifying apiservers' serving certificates (required)")
	f.StringVar(&o.proxy.LocalAPIServer, "local-apiserver", "", "URL of this node's kube-apiserver, on an address that is not steered (default: https://127.0.0.1:<port>, the port --apiserver-manifest's kube-apiserver --secure-port names, else 6443); "+
		"refused when the manifest says the apiserver serves on another port (an HAProxy on 6443 in front of kubeadm's bindPort 6444) or binds another address")
	f.StringVar(&o.proxy.LocalServerName, "local-apiserver-server-name", "", "name the local apiserver's serving certificate must carry, as kubeconfig's tls-server-name (default: the URL's host, or \"kubernetes\" for a loopback address: kubeadm's apiserver.crt has no 127.0.0.1)")
	f.StringSliceVar(&o.proxy.Peers, "peers", nil, "URLs of peer kube-apiservers, comma-separated")
	f.StringVar(&o.proxy.Kubeconfig, "kubeconfig", "", "kubeconfig for discovering peers from the default/kubernetes EndpointSlices and apiserver identity leases (point it at the local apiserver); without it, in a pod, the ServiceAccount's token and CA toward --local-apiserver")
	f.DurationVar(&o.proxy.RefreshInterval, "discovery-refresh-interval", o.proxy.RefreshInterval, "how often every server's discovery is re-read (conditionally, by ETag)")
	f.StringVar(&o.proxy.StateFile, "state-file", o.proxy.StateFile, "where every server's last-known discovery and the rollback graces are kept across restarts, so a peer that is down when skewgate starts, or a type a rollback took away, answers 503, not 404, for the rest of its grace (empty: nothing kept)")
	f.DurationVar(&o.proxy.RollbackGrace, "rollback-grace", o.proxy.RollbackGrace, "how long a type that a server served answers 503 with Retry-After (rule 5), not 404, after the server departed, went down or came back serving less (a rollback); 0: no grace. The ConfigMap kube-system/skewgate (key rollback-grace-until, an RFC 3339 time) ends or extends it on every node at once")

	f = fss.FlagSet("steering")
	f.BoolVar(&o.node.Steering, "steering", false, "install eBPF (sk_lookup) steering of new connections for --steer-address into the proxy, failing open; --steering-mode says when it steers")
	f.StringVar(&o.mode, "steering-mode", o.mode, "when to steer: always; auto (during a skew window: an upgrade or rollback shows — the apiservers differ in version or in what their binaries serve, or an apiserver upgrade has begun — and --steering-window-hold after they agree; and while the local apiserver is away and a peer is ready); off. The ConfigMap kube-system/skewgate (key steering) wins for the whole cluster")
	f.BoolVar(&o.handOver, "handover", o.handOver, "hand the listening sockets over between the skewgate running on the node and the next one started beside it (a rollout, a deleted pod's replacement with the DaemonSet's maxSurge), through a unix socket beside --state-file: the steered socket never closes, so no client connection falls open to the apiserver during a restart")
	f.DurationVar(&o.handOverWait, "handover-wait", 0, "on SIGTERM, how long to keep serving while waiting for a successor to take the listening sockets (--handover) before withdrawing steering; the DaemonSet, whose maxSurge starts a deleted pod's replacement beside it, sets 20s (0: withdraw at once)")
	f.BoolVar(&o.node.ResetDirect, "steering-reset-direct", true, "when steering engages after a standby for an upgrade (a skew window opened, or the cluster switch armed it; not rule 3a alone), end the connections the apiserver accepted directly meanwhile once each is quiet (nothing queued or unacknowledged, and no data from its client for --steering-reset-quiet), paced, so their clients reconnect through skewgate; "+
		"no request is cut in flight, a quiet watch is and resumes from its resourceVersion; a client that keeps talking (client-go's PINGs, its next requests) stays until the apiserver's GOAWAY moves it (kube-apiserver --goaway-chance)")
	f.DurationVar(&o.node.ResetQuiet, "steering-reset-quiet", 0, "how long a direct connection's client must have sent no data before --steering-reset-direct ends it; must exceed the apiserver's --request-timeout, within which it answers every request that is not long-running, APF's queue time included "+
		"(default: --apiserver-manifest's --request-timeout × 1.5, at least 90s)")
	f.StringVar(&o.proxy.APIServerManifest, "apiserver-manifest", o.proxy.APIServerManifest, "kube-apiserver static-pod manifest: when its image tag names another version than the local apiserver runs (kubeadm upgrade or rollback, before the kubelet restarts it), "+
		"every node's skew window opens, through a Lease skewgate/skewgate-upgrade-<node> (namespace skewgate, which the manifests create) (a missing file: not a kubeadm node, logged once; empty: not watched)")
	f.BoolVar(&o.proxy.KubeadmAnnouncement, "kubeadm-announcement", true, "open every node's skew window as kubeadm announces an upgrade, before any apiserver stops: the Job kube-system/upgrade-health-check-<ms> that `kubeadm upgrade apply` (and `plan`) creates in its preflight, counted from its creation for 2 minutes while it exists (needs list and watch on jobs in kube-system; refused, the manifest and the Leases remain the signals)")
	f.StringVar(&o.proxy.NodeName, "node-name", "", "this node's name, as the kubelet's: the holder of its upgrade Lease (default: the host name, lowercased)")
	f.DurationVar(&o.proxy.WindowHold, "steering-window-hold", o.proxy.WindowHold, "how long a skew window stays open after the apiservers last differed (mode auto); longer while a rollback grace that began in the window holds a type")
	f.StringSliceVar(&o.node.Addresses, "steer-address", nil, "address:port list whose new connections are steered, overriding the default: what the apiserver serves, as --apiserver-manifest says — "+
		"every global address this node holds on any interface (the advertise address, a VIP while this node holds it, on lo too, other NICs', IPv6 ones; not kube-ipvs0's Service IPs), followed as they change, "+
		"or its --bind-address alone — on its --secure-port (without a manifest: every address, on --local-apiserver's port)")
	f.StringVar(&o.node.PinPath, "pin-path", o.node.PinPath, "bpffs directory for skewgate's maps, programs and links")
	f.StringVar(&o.node.CgroupRoot, "cgroup-root", "", "cgroup v2 root connstat attaches to, e.g. the host's /sys/fs/cgroup mounted into a pod (a cgroup v1 hybrid host's unified/ is found) (default: this mount namespace's cgroup2 mount)")
	f.StringSliceVar(&o.node.Exempt, "steer-exempt", nil, "source addresses or CIDRs whose connections are never steered, comma-separated")
	f.BoolVar(&o.node.ExemptPeers, "steer-exempt-peers", false, "never steer connections from peer apiservers' addresses, so a peer's forwarded request skips this node's skewgate; "+
		"only for peers whose addresses carry nothing else: a load balancer on a peer node would bypass skewgate too")

	f = fss.FlagSet("admin")
	f.StringVar(&o.secureAdmin, "secure-admin-address", "", "ip:port of the admin listener as kube-controller-manager serves its secure port: TLS with the --tls-cert-file pair, "+
		"callers authenticated by --client-ca-file or the apiserver (TokenReview) and authorized by it (SubjectAccessReview: RBAC nonResourceURLs), /healthz, /livez and /readyz open to anyone; "+
		"while the local apiserver does not answer, a healthy peer reviews (its certificate must name kubernetes.default.svc), and while none does, a positive decision up to 5 minutes old stands in; "+
		"it delegates with skewgate's cluster credentials (--kubeconfig or the pod's ServiceAccount), which need the system:auth-delegator ClusterRole (empty: none)")
	f.BoolVar(&o.adminLoopback, "secure-admin-loopback", false, "serve the secure admin listener on 127.0.0.1 too, at --secure-admin-address's port, with the same authentication and authorization: "+
		"where a port-forward to the pod arrives (the container runtime dials localhost in the pod's network namespace, the node's with hostNetwork), "+
		"so `kubectl skewgate --through-apiserver` reaches it from where only the apiserver is reachable")
	f.StringVar(&o.adminAddr, "metrics-bind-address", o.adminAddr, "plain-HTTP admin listener without authentication, for labs: keep it on loopback, anyone who reaches it reads every endpoint (empty: none)")
	f.BoolVar(&o.profiling, "profiling", false, "serve /debug/pprof on the admin listener")

	logsapi.AddFlags(o.logging, fss.FlagSet("logging"))
	return fss
}

// validate reports every missing or invalid flag at once, and applies the
// logging flags: from here on slog and klog write through one logger.
func (o *runOptions) validate() error {
	errs := o.resolveLocal()
	errs = append(errs, o.proxy.Validate()...)
	if o.securePort < 1 || o.securePort > 65535 {
		errs = append(errs, fmt.Errorf("--secure-port %d: want 1-65535", o.securePort))
	}
	if err := o.checkAdminLoopback(); err != nil {
		errs = append(errs, err)
	}
	if o.node.Steering && o.proxy.LocalAPIServer != "" {
		tc := agent.TargetConfig{Addresses: o.node.Addresses, Local: localHostPort(o.proxy.LocalAPIServer), Exempt: o.node.Exempt, Serving: o.node.Serving}
		if _, _, err := agent.Targets(tc); err != nil {
			errs = append(errs, err)
		}
	}
	if _, err := agent.ParseMode(o.mode); err != nil {
		errs = append(errs, fmt.Errorf("--steering-mode: %w", err))
	}
	if err := o.resolveQuiet(); err != nil {
		errs = append(errs, err)
	}
	if o.proxy.WindowHold <= 0 {
		errs = append(errs, fmt.Errorf("--steering-window-hold %s: want a positive duration", o.proxy.WindowHold))
	}
	if o.node.Steering && o.node.CgroupRoot != "" {
		if _, err := agent.CgroupRoot(o.node.CgroupRoot); err != nil {
			errs = append(errs, fmt.Errorf("--cgroup-root: %w", err))
		}
	}
	if err := logsapi.ValidateAndApply(o.logging, nil); err != nil {
		errs = append(errs, fmt.Errorf("logging flags: %w", err))
	}
	return utilerrors.NewAggregate(errs)
}

// checkAdminLoopback refuses --secure-admin-loopback without a secure
// listener, or with the plain one on the same loopback port (its default,
// 127.0.0.1:16444, is the secure one's in the manifests): one of the two
// would fail to bind.
func (o *runOptions) checkAdminLoopback() error {
	if !o.adminLoopback {
		return nil
	}
	if o.secureAdmin == "" {
		return errors.New("--secure-admin-loopback: no --secure-admin-address to serve on loopback too")
	}
	_, port, err := net.SplitHostPort(o.secureAdmin)
	if err != nil {
		return nil // ServeSecure says what is wrong with it
	}
	if h, p, err := net.SplitHostPort(o.adminAddr); err == nil && p == port && (h == "" || h == "127.0.0.1" || h == "0.0.0.0" || h == "::" || h == "localhost") {
		return fmt.Errorf("--secure-admin-loopback serves 127.0.0.1:%s, which --metrics-bind-address=%s takes: set --metrics-bind-address= (or another port)", port, o.adminAddr)
	}
	return nil
}

// resolveLocal reads where the node's apiserver serves from its manifest
// (--apiserver-manifest) and checks --local-apiserver against it, or
// derives it when not given: loopback on the manifest's --secure-port, or
// kube-apiserver's default 6443 without a manifest. A --local-apiserver on
// another port than the manifest's is refused: on a node where kubeadm's
// bindPort is 6444 behind an HAProxy on 6443, skewgate would otherwise
// take HAProxy (any apiserver) for its own.
func (o *runOptions) resolveLocal() []error {
	srv, err := agent.ReadServing(o.proxy.APIServerManifest)
	if err != nil {
		return []error{fmt.Errorf("%w (--apiserver-manifest=\"\" does without it)", err)}
	}
	o.node.Serving = srv
	switch {
	case o.proxy.LocalAPIServer != "" && srv != nil:
		if err := srv.CheckLocal(localHostPort(o.proxy.LocalAPIServer)); err != nil {
			return []error{err}
		}
		o.localFrom = "--local-apiserver, checked against " + srv.Manifest
	case o.proxy.LocalAPIServer != "":
		o.localFrom = "--local-apiserver"
	case srv != nil:
		if o.proxy.LocalAPIServer, err = srv.LocalURL(o.node.Steering); err != nil {
			return []error{fmt.Errorf("--local-apiserver not set and %w", err)}
		}
		o.localFrom = srv.Manifest
	default:
		o.proxy.LocalAPIServer = fmt.Sprintf("https://127.0.0.1:%d", agent.DefaultAPIServerPort)
		o.localFrom = "kube-apiserver's default port: no --local-apiserver, no manifest at --apiserver-manifest"
	}
	return nil
}

// registerProcess registers what the command exports itself: Go's and the
// process's collectors and skewgate_build_info. The proxy and the agent
// register theirs; docs/metrics.md lists all of them.
func registerProcess(reg prometheus.Registerer) {
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), buildInfoGauge())
}

// resolveQuiet sets --steering-reset-quiet from the apiserver's request
// timeout (resolveLocal read its manifest first), or checks it against it.
func (o *runOptions) resolveQuiet() error {
	quiet, err := agent.ResetQuiet(o.node.ResetQuiet, o.node.Serving)
	o.node.ResetQuiet = quiet
	return err
}

// run composes the two halves: the proxy (request side) and the agent's
// node (kernel side), which meet only through the node's seams.
func run(ctx context.Context, o *runOptions) error {
	log := slog.Default()
	tuneGC(log)
	reg := prometheus.NewRegistry()
	registerProcess(reg)
	o.proxy.UserAgent, o.proxy.Log = userAgent(), log
	// A skewgate already running on the node (a rollout, or a deleted pod's
	// replacement started beside it) hands its listening sockets over: no
	// connection falls open to the apiserver between the two.
	succ, err := agent.NewSuccession(o.handOverSocket(), o.handOverWait, log)
	if err != nil {
		return err
	}
	sig := ctx
	ctx = succ.Context(sig)
	p, err := proxy.New(ctx, o.proxy, reg)
	if err != nil {
		return err
	}
	o.node.Local, o.node.Ready, o.node.PeerAddrs, o.node.Probe, o.node.Log = p.LocalHost(), p.Members.Ready, p.Members.PeerAddrs, p.Probe, log
	o.node.Mode, o.node.Window, o.node.Shed = steeringMode(p, agent.Mode(o.mode)), skewWindow(p), p.Load.Shedding
	o.node.Held = p.Members.Held
	addr := net.JoinHostPort(o.listenHost(), strconv.Itoa(o.securePort))
	if o.node.Inherited, err = succ.Listen("proxy", addr); err != nil {
		return fmt.Errorf("--bind-address/--secure-port: %w", err)
	}
	if o.node.Predecessor = succ.Predecessor(); succ.Inherited() && o.node.Predecessor == 0 {
		o.node.Predecessor = -1
	}
	node, err := agent.Listen(addr, o.node, reg)
	if err != nil {
		o.node.Inherited.Close()
		return err
	}
	defer node.Close()
	go node.Engage(ctx)
	// After the node: connstat must see the first connections to every
	// apiserver, which the probes open and HTTP/2 then keeps.
	if err := p.Start(ctx); err != nil {
		node.Listener().Close()
		return err
	}
	if err := serveAdmin(ctx, o, p, succ, admin.Handler(p.Members, reg,
		admin.Options{Steering: func() *admin.SteeringView {
			_, fromSwitch := p.Switch.Mode()
			return steeringView(node.Status(), fromSwitch)
		}, Profiling: o.profiling, Version: buildVersion().Version}), log); err != nil {
		node.Listener().Close()
		return err
	}
	if succ.Inherited() {
		// The predecessor serves until this process is ready to: what
		// every server serves read, steering installed.
		node.WaitEngaged(ctx)
	}
	if err := succ.Serving(ctx); err != nil {
		log.Warn("no successor can take this process's sockets", "err", err)
	}
	log.Info("serving", "version", buildVersion().Version, "address", node.Listener().Addr().String(), "inherited", succ.Inherited(),
		"local", o.proxy.LocalAPIServer, "localFrom", o.localFrom, "peers", p.PeerCount(), "admin", o.adminAddr, "secureAdmin", o.secureAdmin)
	// Handed over, the steered socket is the successor's too: steering
	// stays, this process stops accepting at once (the successor accepts
	// from the same queue) and only its own connections end, gracefully.
	withdraw := func() (queued bool) {
		if succ.HandedOver() {
			return false
		}
		node.Withdraw()
		return true
	}
	err = p.Serve(ctx, node.Listener(), withdraw, &proxy.HandBack{Releasing: node.Releasing, Steered: node.Steers})
	if succ.HandedOver() && sig.Err() == nil {
		// A rollout's successor serves: exiting now would have the
		// kubelet restart this container, which would take the sockets
		// back. The DaemonSet deletes this pod once the successor is
		// ready.
		log.Info("handed over to the successor; idle until stopped")
		<-sig.Done()
	}
	return err
}

// listenHost is --bind-address, or its default: with steering, where only
// steering (and loopback) reaches the proxy; without, every address, where
// a load balancer reaches it.
func (o *runOptions) listenHost() string {
	switch {
	case o.bindAddress != "":
		return o.bindAddress
	case o.node.Steering:
		return agent.LoopbackBoth
	}
	return "0.0.0.0"
}

// handOverSocket is where this skewgate offers its sockets to a successor
// and looks for a predecessor's: beside the state file (per node in the
// lab, where nodes share a file system), or nowhere with --handover=false
// or no state file.
func (o *runOptions) handOverSocket() string {
	if !o.handOver || o.proxy.StateFile == "" {
		return ""
	}
	return handOverSocketOf(o.proxy.StateFile)
}

// handOverSocketOf is the hand-over socket beside stateFile, where run
// makes it and uninstall removes it.
func handOverSocketOf(stateFile string) string {
	return strings.TrimSuffix(stateFile, filepath.Ext(stateFile)) + ".handover.sock"
}

// serveAdmin starts the admin listeners the flags ask for, until ctx ends.
func serveAdmin(ctx context.Context, o *runOptions, p *proxy.Proxy, succ *agent.Succession, h http.Handler, log *slog.Logger) error {
	listen := func(name string) admin.ListenFunc {
		return func(addr string) (net.Listener, error) { return succ.Listen(name, addr) }
	}
	if o.secureAdmin != "" {
		rc, err := p.ClusterConfig()
		if err != nil {
			return err
		}
		// The node's apiserver first; while it restarts, the healthy peers,
		// then recent positive decisions: the scrape that would show it
		// down must not fail with it.
		if _, err := admin.ServeSecure(ctx, admin.SecureOptions{Address: o.secureAdmin, CertFile: o.proxy.Certs.TLSCert,
			KeyFile: o.proxy.Certs.TLSKey, ClientCAFile: o.proxy.Certs.ClientCA, Cluster: rc,
			Peers: admin.PeerDelegates(rc, p.Members), Listen: listen("secure-admin"),
			Loopback: o.adminLoopback, LoopbackListen: listen("secure-admin-loopback")}, h); err != nil {
			return fmt.Errorf("--secure-admin-address: %w", err)
		}
	}
	if o.adminAddr != "" {
		if err := admin.Serve(ctx, o.adminAddr, listen("admin"), h, log); err != nil {
			return err
		}
	}
	return nil
}

// localHostPort is the host:port of a --local-apiserver URL, or "".
func localHostPort(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return ""
	}
	return u.Host
}

// steeringMode is the cluster's mode (kube-system/skewgate) when it sets
// one, else the flag's.
func steeringMode(p *proxy.Proxy, flag agent.Mode) func() agent.Mode {
	return func() agent.Mode {
		if m, ok := p.Switch.Mode(); ok {
			return agent.Mode(m)
		}
		return flag
	}
}

// skewWindow is the proxy's skew window as the agent reads it.
func skewWindow(p *proxy.Proxy) func() agent.Window {
	return func() agent.Window {
		w := p.Members.Window()
		return agent.Window{Open: w.Open, Reason: w.Reason, Until: w.Until, LocalAway: p.Members.LocalAway()}
	}
}
