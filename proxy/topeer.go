package proxy

import (
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/skewgate/skewgate/proxy/forward"
)

// A bearer token never leaves for a peer. Anyone who may write leases in
// kube-system can list an address as a peer (docs/security.md), and a
// caller's token is a credential for every apiserver: kube-controller-
// manager's controllers' tokens would go wherever merged discovery sends
// their lists. So, as kube-apiserver's in-tree Mixed Version Proxy does, a
// request for a peer carries the caller's identity, not its credential: an
// apiserver trusted with the token (the local one, or a peer whose
// certificate proved it an apiserver) reviews it, and the peer gets the
// user the review named as requestheader headers under the front-proxy
// certificate, exactly as a certificate caller's. The local apiserver is
// the node's own: the token goes to it untouched.

// hasToken reports whether the request carries a token, well formed or
// not.
func (x *exchange) hasToken() bool { return x.token != "" || x.tokenErr != nil }

// bearer reports whether the caller presents a token skewgate did not
// verify (no certificate user, not a peer). A certificate user's token
// the apiserver never reads: its x509 authenticator comes first.
func (x *exchange) bearer() bool {
	return x.caller.User == nil && !x.caller.Peer && x.hasToken()
}

// reviewToken makes sure a bearer caller's token was reviewed before its
// request goes to a peer. It reports false after answering: 401 for a
// token the apiservers reject, and a reason-free 429 or 503 when none
// could judge it — never the request with its token instead.
func (h *Handler) reviewToken(w http.ResponseWriter, r *http.Request, x *exchange) bool {
	if x.reviewed != nil || !x.bearer() {
		return true
	}
	if x.tokenErr != nil { // kube-apiserver's answer to it, wherever it went
		reject(w, r, apierrors.NewUnauthorized("Unauthorized"))
		return false
	}
	v := h.tokenVerdict(r.Context(), x.token)
	switch {
	case v.status == http.StatusCreated && v.user.User != nil:
		x.reviewed, x.tokenAccepted = &v.user, true
		return true
	case v.status == http.StatusUnauthorized:
		reject(w, r, apierrors.NewUnauthorized("Unauthorized"))
	default:
		h.undecided(w, r, x, v.status)
	}
	return false
}

// reviewedForFallback reviews a bearer caller's token for a request the
// local apiserver failed, which peers may take instead; false when no
// apiserver could (the caller gets the local failure's 503).
func (h *Handler) reviewedForFallback(r *http.Request, x *exchange) bool {
	if x.reviewed != nil || !x.bearer() {
		return true
	}
	if x.tokenErr != nil {
		return false
	}
	v := h.tokenVerdict(r.Context(), x.token)
	if v.status != http.StatusCreated || v.user.User == nil {
		return false
	}
	x.reviewed, x.tokenAccepted = &v.user, true
	return true
}

// toPeers is how a request presents its caller to a peer, always with the
// peer mark: a bearer caller as the user its token's review named (see
// reviewToken, which must have run), anyone else as to the local server.
// Whoever skewgate names, the apiserver authenticates by the front-proxy
// certificate's headers first: a token beside them (Authorization, a
// websocket bearer subprotocol) would only hand the peer a credential, so
// none goes; forward refuses a request that still carries one.
func (h *Handler) toPeers(x *exchange) forward.Identity {
	c := x.caller
	if x.reviewed != nil {
		c = *x.reviewed
	}
	return forward.Identity{Anonymous: c.User == nil, Set: func(hdr http.Header) {
		forward.StripCredentials(hdr)
		h.auth.setIdentity(hdr, c, true)
	}}
}
