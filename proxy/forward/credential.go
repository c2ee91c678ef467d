package forward

import (
	"encoding/base64"
	"errors"
	"net/http"
	"slices"
	"strings"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/util/httpstream/wsstream"
)

// kube-apiserver accepts a token in two places: the Authorization header,
// and, on a websocket request (browsers cannot set headers there), a
// subprotocol base64url.bearer.authorization.k8s.io.<base64url(token)> in
// Sec-WebSocket-Protocol (k8s.io/apiserver's websocket
// ProtocolAuthenticator, after the Authorization one). Both are the
// caller's credential for every apiserver of the cluster: neither goes to
// a peer.
const bearerProtocolPrefix = "base64url.bearer.authorization.k8s.io."

const protocolHeader = "Sec-Websocket-Protocol" // canonical form of Sec-WebSocket-Protocol

// ErrBearerProtocol is a bearer subprotocol kube-apiserver refuses with
// 401: two of them, a token that is not base64url or UTF-8, or no other
// subprotocol to answer with.
var ErrBearerProtocol = errors.New("invalid websocket bearer subprotocol")

// Credential is the token r carries as kube-apiserver's token
// authenticators read it, as an Authorization value: the Authorization
// header if present, else the token of a websocket request's bearer
// subprotocol as "Bearer <token>". "" and nil: no token. A bearer
// subprotocol kube-apiserver would refuse is ErrBearerProtocol.
func Credential(r *http.Request) (string, error) {
	if auth := r.Header.Get("Authorization"); auth != "" {
		return auth, nil
	}
	if !wsstream.IsWebSocketRequest(r) {
		return "", nil // the apiserver reads no subprotocol of other requests
	}
	token, others, seen := "", 0, false
	for _, p := range protocols(r.Header) {
		if !strings.HasPrefix(p, bearerProtocolPrefix) {
			others++
			continue
		}
		raw, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(p, bearerProtocolPrefix))
		if seen || err != nil || !utf8.Valid(raw) {
			return "", ErrBearerProtocol
		}
		seen, token = true, string(raw)
	}
	switch {
	case token == "":
		return "", nil
	case others == 0:
		return "", ErrBearerProtocol
	}
	return "Bearer " + token, nil
}

// protocols are the subprotocols h lists, across every
// Sec-WebSocket-Protocol line (RFC 6455 11.3.4: one list).
func protocols(h http.Header) []string {
	var out []string
	for _, line := range h.Values(protocolHeader) {
		out = appendProtocols(out, line)
	}
	return out
}

func appendProtocols(out []string, line string) []string {
	for _, p := range strings.Split(line, ",") {
		out = append(out, strings.TrimSpace(p))
	}
	return out
}

// isBearerProtocol is broader than kube-apiserver's reading (any case):
// what is stripped and refused errs toward removing.
func isBearerProtocol(p string) bool {
	return len(p) >= len(bearerProtocolPrefix) && strings.EqualFold(p[:len(bearerProtocolPrefix)], bearerProtocolPrefix)
}

// StripCredentials removes every credential h carries that kube-apiserver
// accepts in a header — Authorization, and any bearer subprotocol (the
// other subprotocols stay, for the server to choose from) — under any
// spelling of their names, before a request goes to a peer, which gets the
// caller's identity instead.
func StripCredentials(h http.Header) {
	var keep []string
	seen := false
	for k, v := range h {
		switch {
		case strings.EqualFold(k, "Authorization"):
			delete(h, k)
		case strings.EqualFold(k, protocolHeader):
			seen = true
			for _, line := range v {
				keep = appendProtocols(keep, line)
			}
			delete(h, k)
		}
	}
	keep = slices.DeleteFunc(keep, isBearerProtocol)
	if seen && len(keep) > 0 {
		h[protocolHeader] = []string{strings.Join(keep, ", ")}
	}
}

// carriesCredential reports whether h holds a credential StripCredentials
// removes.
func carriesCredential(h http.Header) bool {
	for k, v := range h {
		switch {
		case strings.EqualFold(k, "Authorization") && len(v) > 0:
			return true
		case strings.EqualFold(k, protocolHeader):
			for _, line := range v {
				if slices.ContainsFunc(appendProtocols(nil, line), isBearerProtocol) {
					return true
				}
			}
		}
	}
	return false
}
