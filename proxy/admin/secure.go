package admin

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	"k8s.io/apiserver/pkg/authorization/path"
	"k8s.io/apiserver/pkg/authorization/union"
	genericapifilters "k8s.io/apiserver/pkg/endpoints/filters"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"

	"github.com/skewgate/skewgate/proxy/drain"
	"github.com/skewgate/skewgate/proxy/headercount"
)

// SecureOptions configure the secure admin listener the way
// kube-controller-manager's secure port is: TLS; callers authenticated by
// a client certificate or by the apiserver (TokenReview), else anonymous;
// every request authorized by the apiserver (SubjectAccessReview of the
// verb and path: RBAC nonResourceURLs), except the health paths, which
// kubelet probes reach anonymously, and system:masters.
type SecureOptions struct {
	// Address is host:port to listen on (an IPv6 host with or without
	// brackets); Listen opens it (nil: net.Listen).
	Address string
	Listen  ListenFunc
	// Loopback also serves on 127.0.0.1 at Address's port, opened with
	// LoopbackListen (nil: net.Listen): where a port-forward to the pod
	// arrives (the container runtime dials localhost:<port> in the pod's
	// network namespace, the node's for a hostNetwork pod, over IPv4), so
	// an operator who reaches only the apiserver reaches the listener
	// through it. Nothing more is open than on Address: the same
	// authentication and authorization, for callers on the node. An
	// Address that already takes 127.0.0.1 (it, 0.0.0.0, ::, or no host)
	// opens nothing more.
	Loopback       bool
	LoopbackListen ListenFunc
	// CertFile and KeyFile are the serving pair, reloaded when they change.
	CertFile, KeyFile string
	// ClientCAFile verifies callers' client certificates (optional).
	ClientCAFile string
	// Cluster reaches an apiserver that reviews tokens and access: it
	// needs create on tokenreviews and subjectaccessreviews (the
	// system:auth-delegator ClusterRole).
	Cluster *rest.Config
	// Peers, when set, lists the other apiservers to ask, in order, when
	// Cluster's does not answer (it restarts): Cluster's credentials
	// toward each (see PeerDelegates). While none answers, a positive
	// decision younger than DecisionTTL stands in, so Prometheus keeps
	// scraping through the apiservers' restarts.
	Peers func() []*rest.Config
	// DecisionTTL bounds how old a replayed decision may be
	// (DefaultDecisionTTL if zero).
	DecisionTTL time.Duration

	// now and cacheTTL are tests' seams: the decisions' clock, and the
	// webhooks' own caches (reviewCacheTTL if zero).
	now      func() time.Time
	cacheTTL time.Duration
}

// AlwaysAllowPaths answer anyone, as kube-controller-manager's: liveness
// and readiness for kubelet probes, and their named checks.
var AlwaysAllowPaths = []string{"/healthz", "/healthz/*", "/livez", "/livez/*", "/readyz", "/readyz/*"}

// ErrNoCluster means the secure listener has no apiserver to delegate to.
var ErrNoCluster = errors.New("no cluster credentials to delegate authentication and authorization to (--kubeconfig, or a pod's ServiceAccount)")

// reviewCacheTTL is how long the webhooks keep any answer, as
// kube-controller-manager's: a scrape every 15 s asks the apiserver
// about every other one.
const reviewCacheTTL = 10 * time.Second

// webhookBackoff is k8s.io/apiserver's DefaultAuthWebhookRetryBackoff.
var webhookBackoff = wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5}

// ServeSecure serves h on o.Address behind authentication and
// authorization until ctx ends. It returns an error wrapping ErrNoCluster
// without o.Cluster, or for an address, certificate or CA it cannot use;
// a review no apiserver answers, with no recent positive decision for it,
// is a 401 or 403, never an open door.
func ServeSecure(ctx context.Context, o SecureOptions, h http.Handler) (*http.Server, error) {
	if o.Cluster == nil {
		return nil, ErrNoCluster
	}
	if o.cacheTTL == 0 {
		o.cacheTTL = reviewCacheTTL
	}
	reviews := newReviewTransport(o.Cluster, o.Peers, o.DecisionTTL, o.now)
	cs, err := kubernetes.NewForConfig(reviews.clientConfig())
	if err != nil {
		return nil, fmt.Errorf("admin delegation: %w", err)
	}
	serving, err := dynamiccertificates.NewDynamicServingContentFromFiles("admin-serving", o.CertFile, o.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("admin serving certificate: %w", err)
	}
	authn := authenticatorfactory.DelegatingAuthenticatorConfig{
		Anonymous:                &apiserver.AnonymousAuthConfig{Enabled: true},
		TokenAccessReviewClient:  cs.AuthenticationV1(),
		TokenAccessReviewTimeout: 10 * time.Second,
		WebhookRetryBackoff:      &webhookBackoff,
		CacheTTL:                 o.cacheTTL,
	}
	var clientCA *dynamiccertificates.DynamicFileCAContent
	if o.ClientCAFile != "" {
		if clientCA, err = dynamiccertificates.NewDynamicCAContentFromFile("admin-client-ca", o.ClientCAFile); err != nil {
			return nil, fmt.Errorf("admin client CA: %w", err)
		}
		authn.ClientCertificateCAContentProvider = clientCA
	}
	reqAuthn, _, err := authn.New()
	if err != nil {
		return nil, fmt.Errorf("admin authentication: %w", err)
	}
	authz, err := delegatedAuthorizer(cs, o.cacheTTL)
	if err != nil {
		return nil, err
	}
	tc, err := tlsConfig(ctx, serving, clientCA)
	if err != nil {
		return nil, err
	}
	ln, err := orListen(o.Listen)(hostPort(o.Address))
	if err != nil {
		return nil, fmt.Errorf("secure admin listener: %w", err)
	}
	lns := []net.Listener{ln}
	if addr, ok := loopbackTwin(ln.Addr()); o.Loopback && ok {
		lb, err := orListen(o.LoopbackListen)(addr)
		if err != nil {
			ln.Close()
			return nil, fmt.Errorf("secure admin listener on loopback: %w", err)
		}
		lns = append(lns, lb)
	}
	handler := withAuth(h, reqAuthn, authz)
	var first *http.Server
	for _, l := range lns {
		hs := &http.Server{
			Handler:           handler,
			TLSConfig:         tc,
			ReadHeaderTimeout: 10 * time.Second,
			WriteTimeout:      2 * time.Minute, // a 30 s CPU profile
			IdleTimeout:       90 * time.Second,
		}
		// Its requestheader authentication takes one X-Remote-Group line
		// per group, as kube-controller-manager's secure port does.
		headercount.Set(hs)
		srv := drain.Track(hs)
		go srv.ServeTLS(l, "", "")
		stopWith(ctx, srv, l)
		if first == nil {
			first = srv.Server
		}
	}
	return first, nil
}

func orListen(f ListenFunc) ListenFunc {
	if f == nil {
		return tcpListen
	}
	return f
}

// loopbackTwin is 127.0.0.1 at the port of a listener on addr, unless
// that listener takes connections to 127.0.0.1 already: on 127.0.0.1
// itself, or unspecified (0.0.0.0, and :: on Linux, which takes IPv4
// too unless bindv6only is set, as it is not by default).
func loopbackTwin(addr net.Addr) (string, bool) {
	ap, err := netip.ParseAddrPort(addr.String())
	if err != nil {
		return "", false
	}
	ip := ap.Addr().Unmap()
	if ip.IsUnspecified() || ip == netip.AddrFrom4([4]byte{127, 0, 0, 1}) {
		return "", false
	}
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), ap.Port()).String(), true
}

// hostPort brackets an IPv6 address that came without them, as
// "$(NODE_IP):16444" does on an IPv6 node; anything else is left to
// net.Listen to judge.
func hostPort(addr string) string {
	i := strings.LastIndex(addr, ":")
	if i < 0 {
		return addr
	}
	if ip, err := netip.ParseAddr(addr[:i]); err == nil && ip.Is6() {
		return net.JoinHostPort(addr[:i], addr[i+1:])
	}
	return addr
}

// delegatedAuthorizer allows system:masters and the health paths, and asks
// the apiserver about everything else.
func delegatedAuthorizer(cs kubernetes.Interface, cacheTTL time.Duration) (authorizer.Authorizer, error) {
	paths, err := path.NewAuthorizer(AlwaysAllowPaths)
	if err != nil {
		return nil, err
	}
	webhook, err := authorizerfactory.DelegatingAuthorizerConfig{
		SubjectAccessReviewClient: cs.AuthorizationV1(),
		AllowCacheTTL:             cacheTTL,
		DenyCacheTTL:              cacheTTL,
		WebhookRetryBackoff:       &webhookBackoff,
	}.New()
	if err != nil {
		return nil, fmt.Errorf("admin authorization: %w", err)
	}
	return union.New(
		union.NamedAuthorizer{AuthorizerName: "kubernetes.io/always-allow-groups", Authorizer: authorizerfactory.NewPrivilegedGroups("system:masters")},
		union.NamedAuthorizer{AuthorizerName: "kubernetes.io/always-allow-paths", Authorizer: paths},
		union.NamedAuthorizer{AuthorizerName: "kubernetes.io/webhook", Authorizer: webhook},
	)
}

// tlsConfig serves the pair and asks for (never requires) a client
// certificate, both reloaded as the files change.
func tlsConfig(ctx context.Context, serving *dynamiccertificates.DynamicCertKeyPairContent, clientCA *dynamiccertificates.DynamicFileCAContent) (*tls.Config, error) {
	base := &tls.Config{MinVersion: tls.VersionTLS12, ClientAuth: tls.RequestClientCert, NextProtos: []string{"h2", "http/1.1"}}
	var ca dynamiccertificates.CAContentProvider
	if clientCA != nil {
		ca = clientCA
	}
	ctrl := dynamiccertificates.NewDynamicServingCertificateController(base, ca, serving, nil, nil)
	if err := ctrl.RunOnce(); err != nil {
		return nil, fmt.Errorf("admin serving certificate: %w", err)
	}
	serving.AddListener(ctrl)
	go serving.Run(ctx, 1)
	if clientCA != nil {
		clientCA.AddListener(ctrl)
		go clientCA.Run(ctx, 1)
	}
	go ctrl.Run(1, ctx.Done())
	return &tls.Config{GetConfigForClient: ctrl.GetConfigForClient}, nil
}

// withAuth is kube-controller-manager's handler chain
// (k8s.io/controller-manager/app.BuildHandlerChain): a caller is
// authenticated (401 when its credentials fail), then authorized for the
// request's verb and path (403 otherwise), answered with metav1.Status.
func withAuth(h http.Handler, authn authenticator.Request, authz authorizer.Authorizer) http.Handler {
	resolver := &apirequest.RequestInfoFactory{}
	h = withTerseHealth(h)
	h = genericapifilters.WithAuthorization(h, authz, scheme.Codecs)
	h = genericapifilters.WithAuthentication(h, authn, genericapifilters.Unauthorized(scheme.Codecs), nil, nil)
	h = genericapifilters.WithRequestInfo(h, resolver)
	return genericapifilters.WithCacheControl(h)
}

// withTerseHealth answers an anonymous caller's health request with its
// status and "ok" or "not ok", nothing more. The health paths are open to
// anyone for kubelet probes and load balancers, which read only the status;
// the checks' output names the apiservers and their state (a failing
// /readyz/discovery says whose discovery is missing), which is for
// authenticated callers, as everything else on this listener.
func withTerseHealth(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !healthPath(r.URL.Path) || !anonymous(r) {
			h.ServeHTTP(w, r)
			return
		}
		status := &statusOnly{header: http.Header{}}
		h.ServeHTTP(status, r)
		if status.code == 0 {
			status.code = http.StatusOK
		}
		body := "ok\n"
		if status.code >= 300 {
			body = "not ok\n"
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Cache-Control", "no-cache, private")
		w.WriteHeader(status.code)
		_, _ = io.WriteString(w, body)
	})
}

// healthPath reports whether p is one of AlwaysAllowPaths.
func healthPath(p string) bool {
	for _, base := range []string{"/healthz", "/livez", "/readyz"} {
		if p == base || strings.HasPrefix(p, base+"/") {
			return true
		}
	}
	return false
}

// anonymous reports whether r's caller was authenticated as nobody; one
// without a user in its context (no authentication ran) counts as anonymous.
func anonymous(r *http.Request) bool {
	u, ok := apirequest.UserFrom(r.Context())
	if !ok || u.GetName() == user.Anonymous {
		return true
	}
	return slices.Contains(u.GetGroups(), user.AllUnauthenticated)
}

// statusOnly keeps the status a handler wrote and drops its headers and
// body; a handler that wrote no status answered 200.
type statusOnly struct {
	header http.Header
	code   int
}

func (s *statusOnly) Header() http.Header { return s.header }

func (s *statusOnly) WriteHeader(code int) {
	if s.code == 0 {
		s.code = code
	}
}

func (s *statusOnly) Write(b []byte) (int, error) {
	s.WriteHeader(http.StatusOK)
	return len(b), nil
}
