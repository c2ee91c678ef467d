package proxy

import (
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"net/url"
	"strings"
	"testing"
)

// Issue 41: a websocket bearer subprotocol reached peers on exec and attach
// upgrades, although no other credential did. A peer stand-in records every
// request skewgate sends it — each route a caller's request can take there
// (reads, watches, writes, a peer-only group's discovery, logs, and
// exec/attach/port-forward over SPDY and websockets), for every way a
// caller presents itself (a token in Authorization or in a bearer
// subprotocol, a certificate user who also sends both, nobody with a
// subprotocol that is no credential) — and every request is scanned for
// every credential form kube-apiserver accepts: Authorization, a bearer
// subprotocol, the token itself anywhere in it, a client certificate other
// than the front-proxy one. (kube-apiserver takes no cookie; a Cookie is a
// proxied backend's and passes, as kube-apiserver passes it.) The caller's
// identity still goes, as requestheader headers.
func TestNoCredentialReachesAPeer(t *testing.T) {
	rig := newIdentityRig(t)
	peer := rig.newPeerStandIn(t, apiserverLeaf)
	rig.withPeers(t, peer)

	bearer := "base64url.bearer.authorization.k8s.io." + base64.RawURLEncoding.EncodeToString([]byte(canaryToken))
	const pod = "/api/v1/namespaces/default/pods/p1"
	routes := []struct {
		name, method, uri, headers, body string
		websocket                        bool
	}{
		{"list", "GET", peerWorkloads, "", "", false},
		{"watch", "GET", peerWorkloads + "?watch=true", "", "", false},
		{"create", "POST", peerWorkloads, "Content-Type: application/json\nContent-Length: 2\n", "{}", false},
		{"discovery of a peer-only group", "GET", "/apis/scheduling.k8s.io/v1alpha2", "", "", false},
		{"logs", "GET", pod + "/log?follow=true", "", "", false},
		{"exec over SPDY", "POST", pod + "/exec?command=ls&stdout=true", "Connection: Upgrade\nUpgrade: SPDY/3.1\nX-Stream-Protocol-Version: v4.channel.k8s.io\n", "", false},
		{"exec over a websocket", "GET", pod + "/exec?command=ls&stdout=true", "", "", true},
		{"attach over a websocket", "GET", pod + "/attach?stdout=true", "", "", true},
		{"port-forward over a websocket", "GET", pod + "/portforward?ports=80", "", "", true},
	}
	callers := []struct {
		name        string
		certs       []tls.Certificate
		headers     string
		subprotocol bool // the caller's token in a bearer subprotocol too
		onlyWS      bool // only a websocket's subprotocol is a credential
	}{
		{"a token in Authorization", nil, "Authorization: Bearer " + canaryToken + "\n", false, false},
		{"a token in a bearer subprotocol", nil, "", true, true},
		{"a certificate user with a token in both", []tls.Certificate{rig.client}, "Authorization: Bearer " + canaryToken + "\n", true, false},
		// On a websocket route the subprotocol is this caller's credential.
		{"a cookie and a bearer subprotocol", nil, "Cookie: session=backend\n", true, false},
	}
	for _, c := range callers {
		for _, rt := range routes {
			if c.onlyWS && !rt.websocket {
				continue // there it is nobody's credential: the last caller's case
			}
			name := c.name + ", " + rt.name
			h := c.headers
			protocols := []string{}
			if rt.websocket {
				h += "Connection: Upgrade\nUpgrade: websocket\nSec-WebSocket-Version: 13\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\n"
				protocols = append(protocols, "v5.channel.k8s.io")
			}
			if c.subprotocol {
				protocols = append(protocols, bearer)
			}
			if len(protocols) > 0 {
				h += "Sec-WebSocket-Protocol: " + strings.Join(protocols, ", ") + "\n"
			}
			// Who the peer must be told of, under which certificate.
			cn, user := "front-proxy-client", "system:serviceaccount:kube-system:generic-garbage-collector"
			switch {
			case c.certs != nil:
				user = "alice"
			case !strings.Contains(c.headers, "Authorization") && !(c.subprotocol && rt.websocket):
				cn, user = "", "" // anonymous
			}
			raw := fmt.Sprintf("%s %s HTTP/1.1\nHost: 127.0.0.1\n%s\n%s", rt.method, rt.uri, h, rt.body)
			code, _ := rig.sendWith(t, c.certs, raw)
			u, _ := url.Parse(rt.uri)
			got, cns := peer.take("/")
			reached := 0
			for i, s := range got {
				scanForCredentials(t, name, s, cns[i])
				if strings.HasPrefix(s.uri, u.Path) {
					reached++
					if cns[i] != cn || s.header.Get("X-Remote-User") != user {
						t.Errorf("%s: the peer saw client certificate %q, user %q; want %q, %q", name, cns[i], s.header.Get("X-Remote-User"), cn, user)
					}
				}
			}
			if reached != 1 {
				t.Errorf("%s: %d requests reached the peer (answer %d), want 1", name, reached, code)
			}
		}
	}
}

// A bearer subprotocol kube-apiserver refuses (here: no other subprotocol
// to answer with) gets its 401 on a peer's route too, and goes nowhere.
func TestRefusedBearerSubprotocolGoesNowhere(t *testing.T) {
	rig := newIdentityRig(t)
	peer := rig.newPeerStandIn(t, apiserverLeaf)
	rig.withPeers(t, peer)
	bearer := "base64url.bearer.authorization.k8s.io." + base64.RawURLEncoding.EncodeToString([]byte(canaryToken))
	code, _ := rig.sendWith(t, nil, "GET /api/v1/namespaces/default/pods/p1/exec?command=ls HTTP/1.1\nHost: 127.0.0.1\n"+
		"Connection: Upgrade\nUpgrade: websocket\nSec-WebSocket-Version: 13\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\n"+
		"Sec-WebSocket-Protocol: "+bearer+"\n\n")
	if got, _ := peer.take("/api/v1/namespaces"); code != 401 || len(got) != 0 {
		t.Errorf("a lone bearer subprotocol: %d, %d requests reached the peer; want 401 and none", code, len(got))
	}
}

// scanForCredentials fails t for any credential kube-apiserver accepts in
// what a peer received: Authorization, a bearer subprotocol, the caller's
// token anywhere, a client certificate but the front-proxy one (cn).
func scanForCredentials(t *testing.T, name string, s seen, cn string) {
	t.Helper()
	b64 := base64.RawURLEncoding.EncodeToString([]byte(canaryToken))
	if strings.Contains(s.uri, canaryToken) || strings.Contains(s.uri, b64) {
		t.Errorf("%s: the token in %s", name, s.uri)
	}
	for k, vs := range s.header {
		for _, v := range vs {
			lv := strings.ToLower(v)
			switch {
			case strings.EqualFold(k, "Authorization"):
				t.Errorf("%s: the peer saw %s: %q (%s)", name, k, v, s.uri)
			case strings.Contains(lv, "bearer.authorization.k8s.io"):
				t.Errorf("%s: the peer saw a bearer subprotocol in %s: %q (%s)", name, k, v, s.uri)
			case strings.Contains(v, canaryToken) || strings.Contains(v, b64):
				t.Errorf("%s: the peer saw the token in %s: %q (%s)", name, k, v, s.uri)
			}
		}
	}
	if cn != "" && cn != "front-proxy-client" {
		t.Errorf("%s: the peer saw client certificate %q (%s)", name, cn, s.uri)
	}
}
