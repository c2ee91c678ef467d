package proxy

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

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
	if a.isPeer(r.TLS.PeerCertificates) {
		c := Caller{Peer: true}
		if resp, ok, _ := a.headers.AuthenticateRequest(r); ok {
			c.User = resp.User // a peer forwarding an anonymous request asserts nobody
		}
		return c, nil
	}
	resp, ok, err := a.users.AuthenticateRequest(r)
	if ok {
		return Caller{User: resp.User}, nil
	}
	return Caller{}, fmt.Errorf("%w: %v", ErrUntrustedClient, err)
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
