package proxy

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/request/headerrequest"
	x509request "k8s.io/apiserver/pkg/authentication/request/x509"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
)

// PeerProxiedHeader marks a request one apiserver (or skewgate) proxied to
// another; kube-apiserver 1.36 uses the same header.
const PeerProxiedHeader = "X-Kubernetes-Peer-Proxied"

// Caller is who sent a request, as far as skewgate can tell.
type Caller struct {
	// User is set for a client certificate from --client-ca-file, or for
	// a verified peer, whose X-Remote-* headers assert the user.
	User user.Info
	// Peer is true for a verified front proxy (another skewgate): a
	// client certificate from --requestheader-client-ca-file with an
	// allowed name.
	Peer bool
	// identity is User as identity headers, made once per connection for
	// a certificate user (nil: made per request). Read-only.
	identity http.Header
}

// callerAuth tells users, peers and everyone else apart as kube-apiserver's
// requestheader and x509 authenticators do; requests with bearer tokens
// (in Authorization or a websocket subprotocol) or no credentials pass
// unauthenticated, for the apiserver to judge.
type callerAuth struct {
	users    authenticator.Request
	clientCA dynamiccertificates.CAContentProvider
	rh       RequestHeader
	headers  authenticator.Request
	// trusted is every identity header name kube-apiserver trusts: the
	// flags' and, when watched, the cluster's published ones.
	trusted atomic.Pointer[HeaderNames]
	now     func() time.Time
	// caGeneration counts changes of either CA bundle: a verdict made
	// under an older bundle is made again.
	caGeneration atomic.Uint64
}

// RequestHeader configures recognising peers and the identity headers.
type RequestHeader struct {
	CA           dynamiccertificates.CAContentProvider // nil: no peers
	AllowedNames []string                              // empty: any name
	// Names are the identity headers skewgate sets (the first of each) and
	// reads from peers; zero: DefaultHeaderNames.
	Names HeaderNames
	// Self is skewgate's own front-proxy client certificate (nil: none),
	// which its steering probe presents: the probe is answered for it
	// even when CA or AllowedNames do not make it a peer's.
	Self dynamiccertificates.CertKeyContentProvider
}

func newCallerAuth(clientCA dynamiccertificates.CAContentProvider, rh RequestHeader) *callerAuth {
	if len(rh.Names.User) == 0 {
		rh.Names = DefaultHeaderNames()
	}
	n := rh.Names
	a := &callerAuth{
		clientCA: clientCA,
		rh:       rh,
		now:      time.Now,
		headers: headerrequest.NewDynamic(headerrequest.StaticStringSlice(n.User), headerrequest.StaticStringSlice(n.UID),
			headerrequest.StaticStringSlice(n.Group), headerrequest.StaticStringSlice(n.ExtraPrefix)),
	}
	a.trusted.Store(&n)
	a.users = x509request.NewDynamic(func() (x509.VerifyOptions, bool) {
		opts, ok := clientCA.VerifyOptions()
		opts.CurrentTime = a.now()
		return opts, ok
	}, x509request.CommonNameUserConversion)
	clientCA.AddListener(a)
	if rh.CA != nil {
		rh.CA.AddListener(a)
	}
	return a
}

// Enqueue learns that a CA bundle changed (dynamiccertificates.Listener).
func (a *callerAuth) Enqueue() { a.caGeneration.Add(1) }

// ErrUntrustedClient is returned (wrapped) for a client certificate that
// neither the client CA nor the requestheader CA accepts.
var ErrUntrustedClient = errors.New("client certificate not trusted")

// authenticate identifies the caller of r as kube-apiserver's
// authenticators would, in turn: a presented certificate that verifies
// nowhere is an error (401) unless the request carries a token, which the
// apiserver then judges (its union authenticator skips the certificate);
// a verified certificate without a common name is anonymous, as there.
// token: the request carries a token, well formed or not.
func (a *callerAuth) authenticate(r *http.Request, token bool) (Caller, error) {
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return Caller{}, nil
	}
	c, err := a.certificate(r)
	if err != nil && token {
		return Caller{}, nil
	}
	return c, err
}

// certificate identifies the caller by its client certificate.
func (a *callerAuth) certificate(r *http.Request) (Caller, error) {
	// A connection's certificate chain never changes: verify it once per
	// connection, not once per request (HTTP/2 multiplexes many), for as
	// long as the verdict holds: until the chain's first NotAfter and
	// while the CA bundles are the ones it was made under.
	v := verdictFrom(r.Context())
	if v == nil {
		return a.verify(r)
	}
	peer, u, hdr, err := v.get(a, r)
	if peer {
		return a.peerCaller(r), nil
	}
	return Caller{User: u, identity: hdr}, err
}

// verify authenticates r without a per-connection verdict.
func (a *callerAuth) verify(r *http.Request) (Caller, error) {
	peer, u, err := a.verifyChain(r)
	if peer {
		return a.peerCaller(r), nil
	}
	return Caller{User: u}, err
}

// verifyChain classifies the client certificate: a peer's, a user's, or
// untrusted.
func (a *callerAuth) verifyChain(r *http.Request) (peer bool, u user.Info, err error) {
	if a.isPeer(r.TLS.PeerCertificates) {
		return true, nil, nil
	}
	resp, ok, err := a.users.AuthenticateRequest(r)
	switch {
	case ok:
		return false, resp.User, nil
	case err == nil:
		return false, nil, nil // verified, but names nobody (no common name): anonymous
	}
	return false, nil, fmt.Errorf("%w: %v", ErrUntrustedClient, err)
}

// peerCaller reads the user a verified peer asserts; headers differ per
// request, so this is never cached.
func (a *callerAuth) peerCaller(r *http.Request) Caller {
	c := Caller{Peer: true}
	if resp, ok, _ := a.headers.AuthenticateRequest(r); ok {
		c.User = resp.User // a peer forwarding an anonymous request asserts nobody
	}
	return c
}

// connVerdict caches the verification of one connection's client
// certificate.
type connVerdict struct {
	mu         sync.Mutex
	made       bool
	until      time.Time // the verified chain's earliest NotAfter, its root's included
	generation uint64    // callerAuth.caGeneration when made
	peer       bool
	user       user.Info
	headers    http.Header // user as identity headers
	err        error
}

// get returns the connection's verdict, verifying the chain again once the
// earliest certificate of it expired or a CA bundle changed.
func (v *connVerdict) get(a *callerAuth, r *http.Request) (bool, user.Info, http.Header, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	gen, now := a.caGeneration.Load(), a.now()
	if !v.made || gen != v.generation || !now.Before(v.until) {
		v.peer, v.user, v.err = a.verifyChain(r)
		v.made, v.generation, v.until = true, gen, a.verdictExpiry(r.TLS.PeerCertificates, v.peer)
		// Escaping the extra keys costs more than the rest of the
		// identity: once per connection, not per request.
		v.headers = nil
		if v.user != nil {
			v.headers = http.Header{}
			a.rh.Names.set(v.headers, v.user)
		}
	}
	return v.peer, v.user, v.headers, v.err
}

// verdictExpiry is when a verdict on chain stops holding: the earliest
// NotAfter of the chain as verified up to its trusted root (a CA that
// expires ends the verdicts it made), or of the presented chain when it
// verifies nowhere.
func (a *callerAuth) verdictExpiry(chain []*x509.Certificate, peer bool) time.Time {
	until := earliestNotAfter(chain)
	ca := a.clientCA
	if peer {
		ca = a.rh.CA
	}
	if ca == nil {
		return until
	}
	opts, ok := ca.VerifyOptions()
	if !ok {
		return until
	}
	opts.CurrentTime = a.now()
	opts.KeyUsages = []x509.ExtKeyUsage{x509.ExtKeyUsageAny}
	opts.Intermediates = x509.NewCertPool()
	for _, c := range chain[1:] {
		opts.Intermediates.AddCert(c)
	}
	verified, err := chain[0].Verify(opts)
	if err != nil || len(verified) == 0 {
		return until
	}
	for _, c := range verified {
		if t := earliestNotAfter(c); t.Before(until) {
			until = t
		}
	}
	return until
}

func earliestNotAfter(chain []*x509.Certificate) time.Time {
	t := chain[0].NotAfter
	for _, c := range chain[1:] {
		if c.NotAfter.Before(t) {
			t = c.NotAfter
		}
	}
	return t
}

type verdictKey struct{}

// withConnVerdict is http.Server.ConnContext: a fresh verdict per
// connection.
func withConnVerdict(ctx context.Context, _ net.Conn) context.Context {
	return context.WithValue(ctx, verdictKey{}, &connVerdict{})
}

func verdictFrom(ctx context.Context) *connVerdict {
	v, _ := ctx.Value(verdictKey{}).(*connVerdict)
	return v
}

// isPeer verifies the chain against the requestheader CA and the leaf's
// common name against the allowed names, as kube-apiserver does for front
// proxies.
func (a *callerAuth) isPeer(chain []*x509.Certificate) bool {
	if a.rh.CA == nil {
		return false
	}
	opts, ok := a.rh.CA.VerifyOptions()
	if !ok {
		return false
	}
	opts.CurrentTime = a.now()
	opts.Intermediates = x509.NewCertPool()
	for _, c := range chain[1:] {
		opts.Intermediates.AddCert(c)
	}
	if _, err := chain[0].Verify(opts); err != nil {
		return false
	}
	return len(a.rh.AllowedNames) == 0 || slices.Contains(a.rh.AllowedNames, chain[0].Subject.CommonName)
}

// Trust adds the names kube-apiserver publishes to the ones stripped from
// clients (the flags' are always stripped).
func (a *callerAuth) Trust(published HeaderNames) {
	n := a.rh.Names.Union(published)
	a.trusted.Store(&n)
}

// stripIdentity removes every identity header a client could use to claim
// a user or a peer hop, under any name kube-apiserver trusts, in any case;
// skewgate sets them again from what it verified.
func (a *callerAuth) stripIdentity(h http.Header) { a.trusted.Load().strip(h) }

// setIdentity replaces whatever identity headers h has with what skewgate
// verified: a user's certificate (or a verified peer's asserted user)
// under the configured names, and the peer-proxied mark when mark is set.
func (a *callerAuth) setIdentity(h http.Header, c Caller, mark bool) {
	a.stripIdentity(h)
	switch {
	case c.identity != nil:
		for k, v := range c.identity {
			// Shared by every request of the connection, read-only: the
			// capacity is capped, so an append anywhere copies.
			h[k] = v[:len(v):len(v)]
		}
	case c.User != nil:
		a.rh.Names.set(h, c.User)
	}
	if mark {
		h.Set(PeerProxiedHeader, "true")
	}
}

// isSelf reports whether r's client certificate is skewgate's own
// (RequestHeader.Self). Presenting it proves holding its key, which can
// assert any identity to the apiservers anyway.
func (a *callerAuth) isSelf(r *http.Request) bool {
	if a.rh.Self == nil || r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return false
	}
	certPEM, _ := a.rh.Self.CurrentCertKeyContent()
	block, _ := pem.Decode(certPEM)
	return block != nil && bytes.Equal(block.Bytes, r.TLS.PeerCertificates[0].Raw)
}
