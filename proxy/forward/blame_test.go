package forward

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sony/gobreaker/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// smallHeaderServer is an HTTP/2 apiserver stand-in that advertises a
// small SETTINGS_MAX_HEADER_LIST_SIZE (Go derives it from MaxHeaderBytes,
// as kube-apiserver's 1 MiB becomes 1 MiB + 320), and counts requests.
func smallHeaderServer(t *testing.T) (*httptest.Server, *atomic.Int32) {
	var hits atomic.Int32
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Write([]byte("ok"))
	}))
	up.Config.MaxHeaderBytes = 4 << 10
	up.EnableHTTP2 = true
	up.StartTLS()
	t.Cleanup(up.Close)
	return up, &hits
}

// Bug (issue 22): one anonymous request with a header larger than the
// apiserver's advertised header list limit was refused by Go's HTTP/2
// client after it had a connection ("request header list larger than
// peer's advertised limit") and counted as the server failing: five of
// them opened a healthy server's breaker. The transport refused the
// request by itself, before writing it: the caller gets 431, as from the
// apiserver, and no server is blamed.
func TestOversizedHeaderIsTheCallers(t *testing.T) {
	up, hits := smallHeaderServer(t)
	b := backendFor(t, "local", up, trustFor(t, up))
	b.BreakOnFailures()
	var failed []string
	fr := Request{Candidates: []*Backend{b}, Idempotent: true, Anonymous: true,
		Failed: func(id string, kind FailureKind, _ error) { failed = append(failed, id+"/"+string(kind)) }}
	// A connection is open and its SETTINGS known, as they are to an
	// apiserver skewgate probes: the transport checks the limit itself.
	w := httptest.NewRecorder()
	Forward(w, httptest.NewRequest(http.MethodGet, "/api/v1/pods", nil), fr)
	if w.Code != http.StatusOK {
		t.Fatalf("a plain request: %d %s", w.Code, w.Body)
	}
	for i := range 8 {
		r := httptest.NewRequest(http.MethodGet, "/api/v1/pods", nil)
		r.Header.Set("X-Big", strings.Repeat("x", 8<<10))
		w := httptest.NewRecorder()
		Forward(w, r, fr)
		if w.Code != http.StatusRequestHeaderFieldsTooLarge {
			t.Fatalf("request %d with an 8 KiB header: %d %s, want 431", i, w.Code, w.Body)
		}
		var st metav1.Status
		if err := runtime.DecodeInto(statusCodecs.UniversalDecoder(), w.Body.Bytes(), &st); err != nil || st.Code != http.StatusRequestHeaderFieldsTooLarge {
			t.Fatalf("request %d: the answer is no 431 Status: %v %s", i, err, w.Body)
		}
	}
	if len(failed) != 0 {
		t.Errorf("the server was blamed for the callers' headers: %v", failed)
	}
	if s := b.breaker.State(); s != gobreaker.StateClosed {
		t.Errorf("breaker %s after oversized requests, want closed", s)
	}
	if n := hits.Load(); n != 1 {
		t.Errorf("the server saw %d requests, want only the plain one", n)
	}
	w = httptest.NewRecorder()
	Forward(w, httptest.NewRequest(http.MethodGet, "/api/v1/pods", nil), fr)
	if w.Code != http.StatusOK {
		t.Errorf("a plain request after them: %d %s", w.Code, w.Body)
	}
}
