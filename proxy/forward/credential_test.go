package forward

import (
	"encoding/base64"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
)

// Credential reads a token where kube-apiserver's authenticators read it,
// and refuses a bearer subprotocol where they answer 401.
func TestCredentialAsTheAPIServerReadsIt(t *testing.T) {
	b64 := func(s string) string {
		return bearerProtocolPrefix + base64.RawURLEncoding.EncodeToString([]byte(s))
	}
	ws := map[string]string{"Connection": "Upgrade", "Upgrade": "websocket"}
	for _, tc := range []struct {
		name    string
		headers map[string]string
		lines   []string // Sec-WebSocket-Protocol lines
		want    string
		err     error
	}{
		{"nothing", nil, nil, "", nil},
		{"Authorization", map[string]string{"Authorization": "Bearer a"}, nil, "Bearer a", nil},
		{"Authorization first", map[string]string{"Authorization": "Bearer a", "Connection": "Upgrade", "Upgrade": "websocket"},
			[]string{"v5.channel.k8s.io", b64("b")}, "Bearer a", nil},
		{"a websocket's subprotocol", ws, []string{"v5.channel.k8s.io, " + b64("b")}, "Bearer b", nil},
		{"over two lines", ws, []string{"v5.channel.k8s.io", b64("b")}, "Bearer b", nil},
		{"not a websocket: not read", map[string]string{"Connection": "Upgrade", "Upgrade": "SPDY/3.1"}, []string{"v5.channel.k8s.io, " + b64("b")}, "", nil},
		{"two tokens", ws, []string{"v5.channel.k8s.io, " + b64("b") + ", " + b64("c")}, "", ErrBearerProtocol},
		{"no other subprotocol", ws, []string{b64("b")}, "", ErrBearerProtocol},
		{"not base64url", ws, []string{"v5.channel.k8s.io, " + bearerProtocolPrefix + "a+b/"}, "", ErrBearerProtocol},
		{"not UTF-8", ws, []string{"v5.channel.k8s.io, " + bearerProtocolPrefix + base64.RawURLEncoding.EncodeToString([]byte{0xff})}, "", ErrBearerProtocol},
	} {
		r := httptest.NewRequest(http.MethodGet, "/api/v1/namespaces/n/pods/p/exec", nil)
		for k, v := range tc.headers {
			r.Header.Set(k, v)
		}
		for _, l := range tc.lines {
			r.Header.Add("Sec-WebSocket-Protocol", l)
		}
		got, err := Credential(r)
		if got != tc.want || !errors.Is(err, tc.err) {
			t.Errorf("%s: %q %v, want %q %v", tc.name, got, err, tc.want, tc.err)
		}
	}
}

// StripCredentials leaves the subprotocols a server chooses from, and
// nothing a server would read as a token.
func TestStripCredentials(t *testing.T) {
	bearer := bearerProtocolPrefix + base64.RawURLEncoding.EncodeToString([]byte("secret"))
	h := http.Header{
		"Authorization":          {"Bearer a"},
		"authorization":          {"Basic b"},
		"Sec-Websocket-Protocol": {"v5.channel.k8s.io, " + bearer, "v4.channel.k8s.io"},
		"sec-websocket-protocol": {"BASE64URL.BEARER.AUTHORIZATION.K8S.IO.eA"},
		"Cookie":                 {"session=1"},
	}
	StripCredentials(h)
	if carriesCredential(h) {
		t.Errorf("after stripping, still a credential: %v", h)
	}
	if got := protocols(h); !slices.Equal(got, []string{"v5.channel.k8s.io", "v4.channel.k8s.io"}) {
		t.Errorf("subprotocols left: %q, want the two channel protocols", got)
	}
	if h.Get("Cookie") == "" {
		t.Error("a cookie (no apiserver credential) was removed")
	}
	h = http.Header{"Sec-Websocket-Protocol": {bearer}}
	if StripCredentials(h); len(h) != 0 {
		t.Errorf("only a bearer subprotocol: %v left, want no header", h)
	}
}
