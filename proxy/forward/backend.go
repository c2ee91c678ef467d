// Package forward sends a routed request to an apiserver over mTLS with
// apimachinery's UpgradeAwareHandler, failing over idempotent requests whose
// connection failed before any byte was sent, and answers failures with a
// content-negotiated metav1.Status.
package forward

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
)

// Trust is how skewgate authenticates to apiservers and verifies them. Both
// providers reload when their files change.
type Trust struct {
	// PeerCA verifies every apiserver's serving certificate.
	PeerCA dynamiccertificates.CAContentProvider
	// ClientCert is the front-proxy client certificate presented to every
	// apiserver; they trust the X-Remote-* headers only with it.
	ClientCert dynamiccertificates.CertKeyContentProvider
	// ServerName, if set, is the name the apiserver's certificate must
	// carry instead of the URL's host, as kubeconfig's tls-server-name:
	// kubeadm's apiserver.crt has no 127.0.0.1 SAN, but always
	// "kubernetes".
	ServerName string
	// Peer: the apiserver is another node's. Its serving certificate must
	// also prove it a kube-apiserver (ProveAPIServer), and no request
	// forwarded to it carries a bearer token (see Do).
	Peer bool
}

// Backend is one apiserver: its URL and connection pools to it.
type Backend struct {
	ID  string
	URL *url.URL
	// peer: Trust.Peer.
	peer      bool
	transport *http.Transport
	// anonymous presents no client certificate. kube-apiserver fails a
	// request whose certificate it cannot verify instead of treating it as
	// anonymous, and the front-proxy certificate without X-Remote-User is
	// exactly that: an anonymous client (a load balancer probing /readyz)
	// must reach the apiserver as anonymous, as it would directly.
	anonymous *http.Transport
	// bearer is the pool for requests without skewgate's identity that
	// carry an Authorization header. kube-apiserver may close a
	// connection after an unauthenticated request; a flood of anonymous
	// probes must not make every bearer-token request pay a new TLS
	// handshake, so the two never share connections.
	bearer *http.Transport
	conns  *connSet
	// slots bounds the requests in flight to a peer (nil: no bound); long
	// ones (watches, upgrades) do not count, as in kube-apiserver's
	// max-requests-inflight.
	slots chan struct{}
	// breaker stops sending to a peer whose exchanges keep failing (nil:
	// never stops).
	breaker *gobreaker.TwoStepCircuitBreaker[struct{}]
}

// ErrBreakerOpen is a backend skipped because its recent exchanges failed.
var ErrBreakerOpen = errors.New("circuit open: the apiserver's recent exchanges failed")

// BreakOnFailures makes b stop taking requests for 5 s after 5 exchanges in
// a row failed at the transport (a reset, a timeout, a refused dial), then
// try one: a peer that accepts connections but fails them must not take
// every request that goes its way. What the caller did (it left, its body
// was malformed, its request could not be sent) does not count. Call
// before use.
func (b *Backend) BreakOnFailures() {
	b.breaker = gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		Name:        b.ID,
		Timeout:     5 * time.Second,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= 5 },
		IsExcluded:  func(err error) bool { return errors.Is(err, context.Canceled) || errors.Is(err, errCaller) },
	})
}

// BreakerCounts are the breaker's counts since it last changed state (zero
// without a breaker), and whether it is closed: what the exchanges with b
// counted against it.
func (b *Backend) BreakerCounts() (gobreaker.Counts, bool) {
	if b.breaker == nil {
		return gobreaker.Counts{}, true
	}
	return b.breaker.Counts(), b.breaker.State() == gobreaker.StateClosed
}

// admit asks the breaker whether b takes a request now; done reports the
// outcome.
func (b *Backend) admit() (done func(error), err error) {
	if b.breaker == nil {
		return func(error) {}, nil
	}
	done, err = b.breaker.Allow()
	if err != nil {
		return nil, ErrBreakerOpen
	}
	return done, nil
}

// LimitInFlight bounds b's short requests in flight to n: a slow peer must
// not take every goroutine and socket of skewgate. Call before use.
func (b *Backend) LimitInFlight(n int) {
	if n > 0 {
		b.slots = make(chan struct{}, n)
	}
}

// acquire takes a slot, or reports that b is at its limit.
func (b *Backend) acquire() (release func(), ok bool) {
	if b.slots == nil {
		return func() {}, true
	}
	select {
	case b.slots <- struct{}{}:
		return func() { <-b.slots }, true
	default:
		return nil, false
	}
}

// DialTimeout bounds connecting to an apiserver: a dead peer must not hold
// a request (or a failover) for long.
const DialTimeout = 2 * time.Second

// NewBackend returns a backend for the apiserver at u whose serving
// certificate must be valid for u's host under trust.PeerCA.
func NewBackend(id string, u *url.URL, trust Trust) *Backend {
	anon := trust
	anon.ClientCert = nil
	conns := &connSet{open: map[net.Conn]struct{}{}}
	b := &Backend{ID: id, URL: u, peer: trust.Peer, transport: newTransport(u, trust), anonymous: newTransport(u, anon), bearer: newTransport(u, anon), conns: conns}
	for _, tr := range b.pools() {
		tr.DialContext = conns.dial(tr.DialContext)
	}
	return b
}

// HTTP/2 health checks: a connection that received nothing for
// pingAfter is pinged, and closed when no answer comes within pingTimeout,
// so a watch through a black-holed apiserver ends within seconds, not when
// TCP gives up minutes later, and its client re-lists elsewhere.
var (
	pingAfter   = 10 * time.Second
	pingTimeout = 5 * time.Second
)

// streamWindow is how much of an answer an apiserver may send ahead of
// what skewgate's client has read: it all waits in skewgate's memory.
// Go's default, 4 MiB per stream, let each watch of a large object hold
// megabytes for a slow client; 256 KiB still carries 250 MiB/s per stream
// at 1 ms round trip.
const streamWindow = 256 << 10

func newTransport(u *url.URL, trust Trust) *http.Transport {
	dialer := &net.Dialer{Timeout: DialTimeout, KeepAlive: 30 * time.Second}
	return &http.Transport{
		Proxy:               nil, // apiservers are reached directly, never via $HTTPS_PROXY
		HTTP2:               &http.HTTP2Config{SendPingTimeout: pingAfter, PingTimeout: pingTimeout, MaxReceiveBufferPerStream: streamWindow},
		DialContext:         dialer.DialContext,
		TLSClientConfig:     tlsConfig(u.Hostname(), trust),
		TLSHandshakeTimeout: 5 * time.Second,
		ForceAttemptHTTP2:   true,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     90 * time.Second,
	}
}

func (b *Backend) pools() []*http.Transport {
	return []*http.Transport{b.transport, b.anonymous, b.bearer}
}

// transportFor is the pool for a request with skewgate's identity, or
// without it with or without a bearer token.
func (b *Backend) transportFor(anonymous, bearer bool) *http.Transport {
	switch {
	case !anonymous:
		return b.transport
	case bearer:
		return b.bearer
	}
	return b.anonymous
}

// Transport is the backend's round tripper, for skewgate's own requests
// (probes, discovery).
func (b *Backend) Transport() http.RoundTripper { return b.transport }

// CloseIdle drops the backend's idle connections.
func (b *Backend) CloseIdle() {
	for _, tr := range b.pools() {
		tr.CloseIdleConnections()
	}
}

// CloseAll closes every connection to the backend, busy ones included:
// when a server leaves routing, the watches and long requests through it
// end at once, cleanly for their clients, which re-list elsewhere.
func (b *Backend) CloseAll() {
	b.CloseIdle()
	b.conns.closeAll()
}

// connSet tracks a backend's open connections.
type connSet struct {
	mu   sync.Mutex
	open map[net.Conn]struct{}
}

type dialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

func (s *connSet) dial(next dialFunc) dialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := next(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		tc := &trackedConn{Conn: c, set: s}
		s.mu.Lock()
		s.open[tc] = struct{}{}
		s.mu.Unlock()
		return tc, nil
	}
}

func (s *connSet) closeAll() {
	s.mu.Lock()
	conns := make([]net.Conn, 0, len(s.open))
	for c := range s.open {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

// trackedConn leaves its set when closed, and remembers whether the
// connection broke under skewgate: the evidence that blames a server for
// an exchange on it (see blame).
type trackedConn struct {
	net.Conn
	set    *connSet
	once   sync.Once
	closed atomic.Bool // skewgate closed it
	broken atomic.Bool // a read or write failed while skewgate had not closed it
}

func (c *trackedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.note(err)
	return n, err
}

func (c *trackedConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.note(err)
	return n, err
}

// note records err as the connection breaking: the server closed it (EOF),
// reset it, or it timed out. An error after skewgate's own Close is none
// of the server's doing.
func (c *trackedConn) note(err error) {
	if err != nil && !c.closed.Load() {
		c.broken.Store(true)
	}
}

func (c *trackedConn) Close() error {
	c.closed.Store(true)
	c.once.Do(func() {
		c.set.mu.Lock()
		delete(c.set.open, c)
		c.set.mu.Unlock()
	})
	return c.Conn.Close()
}

// tlsConfig verifies the server against the current CA bundle on every
// handshake (so a rotated CA file takes effect without a restart) and
// presents the current client certificate, if trust has one.
func tlsConfig(host string, trust Trust) *tls.Config {
	if trust.ServerName != "" {
		host = trust.ServerName
	}
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		ServerName: host,
		// Verification is not skipped: VerifyConnection does it against
		// the reloadable CA, which a static RootCAs pool could not.
		InsecureSkipVerify: true,
		VerifyConnection:   func(cs tls.ConnectionState) error { return verifyServer(cs, host, trust.PeerCA, trust.Peer) },
	}
	if trust.ClientCert != nil {
		certs := &certCache{provider: trust.ClientCert}
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return certs.get() }
	}
	return cfg
}

// ErrUntrustedServer is returned (wrapped) when an apiserver's certificate
// does not verify against the peer CA.
var ErrUntrustedServer = errors.New("apiserver certificate not trusted")

func verifyServer(cs tls.ConnectionState, host string, ca dynamiccertificates.CAContentProvider, peer bool) error {
	opts, ok := ca.VerifyOptions()
	if !ok || len(cs.PeerCertificates) == 0 {
		return fmt.Errorf("%w: no peer CA or no certificate from %s", ErrUntrustedServer, host)
	}
	opts.DNSName = host
	opts.KeyUsages = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	opts.Intermediates = x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		opts.Intermediates.AddCert(c)
	}
	if _, err := cs.PeerCertificates[0].Verify(opts); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrUntrustedServer, host, err)
	}
	if peer {
		if err := ProveAPIServer(cs.PeerCertificates[0], opts); err != nil {
			return fmt.Errorf("%w: %s: %v", ErrUntrustedServer, host, err)
		}
	}
	return nil
}

// APIServerName is the name every kube-apiserver's serving certificate
// carries: kubeadm's apiserver.crt, the self-signed one kube-apiserver
// makes, and every installer's, for in-cluster clients. The in-tree Mixed
// Version Proxy verifies its peers by exactly this name.
const APIServerName = "kubernetes.default.svc"

// nodesGroup is the organization of every certificate the cluster CA signs
// for a kubelet (the kubernetes.io/kubelet-serving signer requires it).
const nodesGroup = "system:nodes"

// ProveAPIServer reports why leaf, already verified under opts for the
// address skewgate dialed, is not a kube-apiserver's serving certificate:
// it must be valid for APIServerName too, and must not be a node's. The
// cluster CA signs serving certificates for kubelets as well (the
// kubelet-serving signer, through the CSR API); such a certificate is valid
// for the kubelet's address, so a writer of apiserver leases or endpoints
// could point skewgate at a kubelet. The signer requires the subject
// O=system:nodes, CN=system:node:<name>; kube-apiserver's certificate is
// never a node's, and only a holder of the CA key or of an apiserver's key
// has one that names APIServerName and is not a node's.
func ProveAPIServer(leaf *x509.Certificate, opts x509.VerifyOptions) error {
	if slices.Contains(leaf.Subject.Organization, nodesGroup) || strings.HasPrefix(leaf.Subject.CommonName, "system:node:") {
		return fmt.Errorf("a node's certificate (%s), not an apiserver's", leaf.Subject)
	}
	opts.DNSName = APIServerName
	if _, err := leaf.Verify(opts); err != nil {
		return fmt.Errorf("not an apiserver's certificate: %w", err)
	}
	return nil
}

// certCache parses the client key pair once per content change, not per
// handshake.
type certCache struct {
	provider dynamiccertificates.CertKeyContentProvider
	mu       sync.Mutex
	certPEM  []byte
	cert     *tls.Certificate
}

func (c *certCache) get() (*tls.Certificate, error) {
	certPEM, keyPEM := c.provider.CurrentCertKeyContent()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cert != nil && string(certPEM) == string(c.certPEM) {
		return c.cert, nil
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("proxy client certificate: %w", err)
	}
	c.certPEM, c.cert = certPEM, &cert
	return c.cert, nil
}

// ErrTokenToPeer is a request to a peer that would have carried a bearer
// token (in Authorization or a websocket bearer subprotocol): it is not
// sent. A caller's token is for the apiservers that
// authenticate it, the node's own first; to a peer a caller's request goes
// with the identity an apiserver's review of the token returned, as
// requestheader headers under the front-proxy certificate, as the in-tree
// Mixed Version Proxy sends it. Only a SelfSubjectReview (Review) carries a
// token to a peer, whose certificate proved it an apiserver.
var ErrTokenToPeer = errors.New("a bearer token is never forwarded to a peer apiserver")

// Do sends a copy of req (its path, query and headers) to the backend,
// with setIdentity (if set) applied to the copy's headers last. It refuses
// (ErrTokenToPeer) to send a peer a request that still carries a
// credential (see StripCredentials).
func (b *Backend) Do(req *http.Request, anonymous bool, setIdentity func(http.Header)) (*http.Response, error) {
	return b.do(req, anonymous, setIdentity, false)
}

func (b *Backend) do(req *http.Request, anonymous bool, setIdentity func(http.Header), review bool) (*http.Response, error) {
	out := req.Clone(req.Context())
	out.URL.Scheme, out.URL.Host, out.Host, out.RequestURI = b.URL.Scheme, b.URL.Host, "", ""
	if setIdentity != nil {
		setIdentity(out.Header)
	}
	if b.refusesToken(out.Header, review) {
		return nil, ErrTokenToPeer
	}
	return b.transportFor(anonymous, out.Header.Get("Authorization") != "").RoundTrip(out)
}

// refusesToken reports whether a request with headers h may not go to b:
// b is a peer, h carries a credential, and the request is no token review.
func (b *Backend) refusesToken(h http.Header, review bool) bool {
	return b.peer && !review && carriesCredential(h)
}

// IsPeer reports whether b is another node's apiserver (Trust.Peer).
func (b *Backend) IsPeer() bool { return b.peer }

// route is the X-Skewgate-Route value of an answer b gave: who answered,
// not who was planned (a local request the local server failed may be
// answered by a peer).
func (b *Backend) route() string {
	if b.peer {
		return "peer"
	}
	return "local"
}
