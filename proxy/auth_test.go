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
		newCallerAuth(&swapCA{}, RequestHeader{}).setIdentity(r.Header, tc.caller, tc.fromPeer)
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

// Bug: the names were hard-coded to X-Remote-*. kube-apiserver unions groups
// across every name it trusts, so a name skewgate did not strip let a
// certificate user add system:masters under skewgate's front-proxy
// certificate.
func TestStripsEveryTrustedName(t *testing.T) {
	a := newCallerAuth(&swapCA{}, RequestHeader{Names: HeaderNames{
		User: []string{"X-Front-User", "X-Remote-User"}, UID: []string{"X-Front-Uid"},
		Group: []string{"X-Front-Group", "X-Remote-Group"}, ExtraPrefix: []string{"X-Front-Extra-", "X-Remote-Extra-"},
	}})
	a.Trust(HeaderNames{Group: []string{"X-Lab-Group"}, ExtraPrefix: []string{"X-Lab-Extra-"}}) // what the cluster publishes
	h := http.Header{}
	for _, k := range []string{"x-lab-group", "X-LAB-GROUP", "X-Remote-Group", "x-front-group", "X-Remote-User", "X-Lab-Extra-Scopes",
		"x-front-extra-foo", "X-Front-Uid", "X-Kubernetes-Peer-Proxied"} {
		h[k] = []string{"system:masters", "again"} // raw keys, repeated values
	}
	h.Set("Authorization", "Bearer t")
	u := &user.DefaultInfo{Name: "alice", UID: "42", Groups: []string{"dev"}, Extra: map[string][]string{"scopes": {"read"}}}
	a.setIdentity(h, Caller{User: u}, false)
	want := http.Header{"Authorization": {"Bearer t"}, "X-Front-User": {"alice"}, "X-Front-Uid": {"42"},
		"X-Front-Group": {"dev"}, "X-Front-Extra-Scopes": {"read"}}
	if len(h) != len(want) {
		t.Errorf("headers after setIdentity: %v, want %v", h, want)
	}
	for k, v := range want {
		if !slices.Equal(h[k], v) {
			t.Errorf("%s = %q, want %q (all: %v)", k, h[k], v, h)
		}
	}
}
