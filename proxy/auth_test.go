package proxy

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	"k8s.io/apiserver/pkg/authentication/user"
)

func TestSetIdentityStripsForgedHeaders(t *testing.T) {
	forged := map[string]string{
		"X-Remote-User": "admin", "x-remote-group": "system:masters", "X-Remote-Uid": "0",
		"X-Remote-Extra-Scopes": "all", "X-REMOTE-EXTRA-foo": "bar", PeerProxiedHeader: "true",
	}
	cases := []struct {
		name     string
		caller   Caller
		fromPeer bool
		want     http.Header
	}{
		{"anonymous or token", Caller{}, false, http.Header{"Authorization": {"Bearer t"}}},
		{"certificate user", Caller{User: &user.DefaultInfo{Name: "lab-user", UID: "u1", Groups: []string{"dev"}, Extra: map[string][]string{"scopes": {"read"}}}}, false,
			http.Header{"Authorization": {"Bearer t"}, "X-Remote-User": {"lab-user"}, "X-Remote-Uid": {"u1"},
				"X-Remote-Group": {"dev"}, "X-Remote-Extra-Scopes": {"read"}}},
		{"verified peer", Caller{User: &user.DefaultInfo{Name: "bob"}, Peer: true}, true,
			http.Header{"Authorization": {"Bearer t"}, "X-Remote-User": {"bob"}, PeerProxiedHeader: {"true"}}},
		{"verified peer without the mark", Caller{User: &user.DefaultInfo{Name: "bob"}, Peer: true}, false,
			http.Header{"Authorization": {"Bearer t"}, "X-Remote-User": {"bob"}}},
	}
	for _, tc := range cases {
		r := httptest.NewRequest(http.MethodGet, "/api/v1/pods", nil)
		r.Header.Set("Authorization", "Bearer t")
		for k, v := range forged {
			r.Header[k] = []string{v} // raw keys: a client need not canonicalize
		}
		setIdentity(r.Header, tc.caller, tc.fromPeer)
		for k := range r.Header {
			if !slices.Equal(r.Header[k], tc.want[k]) {
				t.Errorf("%s: header %s = %q, want %q", tc.name, k, r.Header[k], tc.want[k])
			}
		}
		for k := range tc.want {
			if len(r.Header[k]) == 0 {
				t.Errorf("%s: header %s missing", tc.name, k)
			}
		}
	}
}
