package proxy

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/iotest"
)

// FuzzRequest sends what a client controls (the method, authority, path,
// one header, the body, and whether reading the body fails mid-way, as a
// malformed chunk does) through skewgate's handler to an apiserver
// stand-in. Whatever it is, no server may be blamed for it (the bug: one
// request with an invalid method took a healthy server out of routing) and
// skewgate's own answer is never a 5xx of its making for a healthy server.
func FuzzRequest(f *testing.F) {
	for _, seed := range []struct {
		method, authority, path, name, value string
		body                                 []byte
		broken                               bool
	}{
		{"GET", "127.0.0.1", "/api/v1/namespaces/default/configmaps", "Accept", "application/json", nil, false},
		{"GET X", "127.0.0.1", "/api/v1/namespaces/default/configmaps", "", "", nil, false},
		{"POST", "127.0.0.1", "/api/v1/namespaces/default/configmaps", "Content-Type", "application/json", []byte(`{"metadata":{"name":"x"}}`), true},
		{"PATCH", "h:1", "/apis/apps/v1/namespaces/x/deployments/d/scale", "Connection", "x-upgrade", []byte("{}"), false},
		{"GET", "127.0.0.1", "/api/v1/pods/foo", "Upgrade", "websocket", nil, false},
		{"DELETE", "", "/apis/scheduling.k8s.io/v1alpha2/namespaces/n/workloads/w", "X-Remote-User", "root", nil, false},
		{"GET", "127.0.0.1", "/apis", "Accept", "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList", nil, false},
	} {
		f.Add(seed.method, seed.authority, seed.path, seed.name, seed.value, seed.body, seed.broken)
	}
	rig := newIdentityRig(f)
	f.Fuzz(func(t *testing.T, method, authority, path, name, value string, body []byte, broken bool) {
		if !strings.HasPrefix(path, "/") {
			path = "/" + path
		}
		r, err := http.NewRequest(http.MethodGet, "https://127.0.0.1"+path, nil)
		if err != nil {
			return // not a request line a server would parse
		}
		r.Method, r.Host, r.RequestURI, r.RemoteAddr = method, authority, path, "127.0.0.1:40000"
		if name != "" {
			r.Header[name] = []string{value}
		}
		var rd io.Reader = strings.NewReader(string(body))
		if broken {
			rd = io.MultiReader(rd, iotest.ErrReader(errors.New("invalid byte in chunk length")))
		}
		r.Body, r.ContentLength = io.NopCloser(rd), -1
		w := httptest.NewRecorder()
		rig.handler.ServeHTTP(w, r)
		for _, st := range rig.members.Statuses() {
			if st.LastError != "" {
				t.Fatalf("%q %q: server %s blamed: %s", method, path, st.ID, st.LastError)
			}
		}
		if w.Code >= 500 && w.Header().Get("X-Skewgate-Server") == "skewgate" && w.Code != http.StatusServiceUnavailable {
			t.Fatalf("%q %q: skewgate answered %d: %s", method, path, w.Code, w.Body)
		}
	})
}
