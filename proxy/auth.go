package proxy

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/request/headerrequest"
	x509request "k8s.io/apiserver/pkg/authentication/request/x509"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
)

// PeerProxiedHeader marks a request one apiserver (or skewgate) proxied to
// another; kube-apiserver 1.36 uses the same header.
const PeerProxiedHeader = "X-Kubernetes-Peer-Proxied"

// remoteHeaderPrefix covers every requestheader identity header:
// X-Remote-User, -Uid, -Group and -Extra-*.
const remoteHeaderPrefix = "X-Remote-"

// Caller is who sent a request, as far as skewgate can tell.
type Caller struct {
	// User is set for a client certificate from --client-ca-file, or for
	// a verified peer, whose X-Remote-* headers assert the user.
	User user.Info
	// Peer is true for a verified front proxy (another skewgate): a
	// client certificate from --requestheader-client-ca-file with an
	// allowed name.
	Peer bool
}

// callerAuth tells users, peers and everyone else apart as kube-apiserver's
// requestheader and x509 authenticators do; requests with bearer tokens or
// no credentials pass unauthenticated, for the apiserver to judge.
type callerAuth struct {
	users   authenticator.Request
	rh      RequestHeader
	headers authenticator.Request
}

// RequestHeader configures recognising peers.
type RequestHeader struct {
	CA           dynamiccertificates.CAContentProvider // nil: no peers
	AllowedNames []string                              // empty: any name
}

func newCallerAuth(clientCA dynamiccertificates.CAContentProvider, rh RequestHeader) *callerAuth {
	static := func(v ...string) headerrequest.StringSliceProvider { return headerrequest.StaticStringSlice(v) }
	return &callerAuth{
		users: x509request.NewDynamic(clientCA.VerifyOptions, x509request.CommonNameUserConversion),
		rh:    rh,
		headers: headerrequest.NewDynamic(static("X-Remote-User"), static("X-Remote-Uid"),
			static("X-Remote-Group"), static("X-Remote-Extra-")),
	}
}

// ErrUntrustedClient is returned (wrapped) for a client certificate that
// neither the client CA nor the requestheader CA accepts.
var ErrUntrustedClient = errors.New("client certificate not trusted")

// authenticate identifies the caller of r. A presented certificate that
// verifies nowhere is an error: skewgate answers 401 with the reason rather
// than silently demoting the caller to anonymous.
func (a *callerAuth) authenticate(r *http.Request) (Caller, error) {
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return Caller{}, nil
	}
	// A connection's certificate chain never changes: verify it once per
	// connection, not once per request (HTTP/2 multiplexes many).
	v := verdictFrom(r.Context())
	if v == nil {
		return a.verify(r)
	}
	v.once.Do(func() { v.peer, v.user, v.err = a.verifyChain(r) })
	if v.peer {
		return a.peerCaller(r), nil
	}
	return Caller{User: v.user}, v.err
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
	if ok {
		return false, resp.User, nil
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
	once sync.Once
	peer bool
	user user.Info
	err  error
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
	opts.Intermediates = x509.NewCertPool()
	for _, c := range chain[1:] {
		opts.Intermediates.AddCert(c)
	}
	if _, err := chain[0].Verify(opts); err != nil {
		return false
	}
	return len(a.rh.AllowedNames) == 0 || slices.Contains(a.rh.AllowedNames, chain[0].Subject.CommonName)
}

// stripIdentity removes every identity header a client could use to claim
// a user or a peer hop; skewgate sets them again from what it verified.
func stripIdentity(h http.Header) {
	for k := range h {
		if strings.HasPrefix(http.CanonicalHeaderKey(k), remoteHeaderPrefix) {
			delete(h, k)
		}
	}
	h.Del(PeerProxiedHeader)
}
