package forward

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
)

// Bug: TypeNotFound read at most 64 KiB of a 404 to sniff it and passed on
// only those, so a larger 404 on a listed route (a proxied backend's page, an
// aggregated server's Status with a long message) reached the caller cut
// short under its original Content-Length. It passes whole, with or
// without a length, whether Stale is asked or not.
func TestLargeNotFoundPassesWhole(t *testing.T) {
	body := bytes.Repeat([]byte("0123456789abcdef"), 100<<10/16) // 100 KiB
	body = append([]byte(`{"kind":"Status","code":404,"message":"`), body...)
	body = append(body, `"}`...)
	for _, tc := range []struct {
		name   string
		length bool
		stale  bool
	}{
		{"with Content-Length, discovery current", true, false},
		{"with Content-Length, discovery stale", true, true},
		{"chunked", false, true},
	} {
		up := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if tc.length {
				w.Header().Set("Content-Length", strconv.Itoa(len(body)))
			}
			w.WriteHeader(http.StatusNotFound)
			w.Write(body)
		}))
		b := backendFor(t, "peer", up, trustFor(t, up))
		w := httptest.NewRecorder()
		Forward(w, httptest.NewRequest(http.MethodGet, "/apis/g/v/rs/x/proxy/page", nil), Request{Candidates: []*Backend{b}, Idempotent: true,
			Listed: true, Stale: func(string) bool { return tc.stale }})
		if w.Code != http.StatusNotFound || !bytes.Equal(w.Body.Bytes(), body) {
			t.Errorf("%s: %d, %d of %d bytes", tc.name, w.Code, w.Body.Len(), len(body))
		}
		if cl := w.Header().Get("Content-Length"); tc.length && cl != strconv.Itoa(len(body)) {
			t.Errorf("%s: Content-Length %q, want %d", tc.name, cl, len(body))
		}
		up.Close()
	}
}
