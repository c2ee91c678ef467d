package forward

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/iotest"
	"time"

	"golang.org/x/net/http2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
)

// upstream is a TLS test server standing in for an apiserver in these edge
// cases; the lab's real apiservers prove forwarding end to end.
type upstream struct {
	*httptest.Server
	hits atomic.Int32
}

func newUpstream(t *testing.T) *upstream {
	u := &upstream{}
	u.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.hits.Add(1)
		w.Write([]byte("ok"))
	}))
	t.Cleanup(u.Close)
	return u
}

func trustFor(t *testing.T, srv *httptest.Server) Trust {
	t.Helper()
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	ca, err := dynamiccertificates.NewStaticCAContent("test", caPEM)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM := keyPair(t, "front-proxy-client", x509.ExtKeyUsageClientAuth)
	client, err := dynamiccertificates.NewStaticCertKeyContent("client", certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return Trust{PeerCA: ca, ClientCert: client}
}

// keyPair is a throwaway self-signed certificate valid for 127.0.0.1.
func keyPair(t *testing.T, cn string, usage x509.ExtKeyUsage) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{usage}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	pk, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pk})
}

// deadBackend points at a port nobody listens on: connecting fails before
// any byte of a request is sent.
func deadBackend(t *testing.T, trust Trust) *Backend {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return NewBackend("dead", &url.URL{Scheme: "https", Host: addr}, trust)
}

func backendFor(t *testing.T, id string, srv *httptest.Server, trust Trust) *Backend {
	u, _ := url.Parse(srv.URL)
	return NewBackend(id, u, trust)
}

func TestIdempotentFailsOverBeforeFirstByte(t *testing.T) {
	up := newUpstream(t)
	trust := trustFor(t, up.Server)
	var failed []string
	fr := Request{
		Candidates: []*Backend{deadBackend(t, trust), backendFor(t, "alive", up.Server, trust)},
		Idempotent: true,
		Failed:     func(id string, kind FailureKind, _ error) { failed = append(failed, id+"/"+string(kind)) },
	}
	w := httptest.NewRecorder()
	Forward(w, httptest.NewRequest(http.MethodGet, "/apis/g/v/rs", nil), fr)
	if w.Code != http.StatusOK || w.Header().Get(HeaderServer) != "alive" || up.hits.Load() != 1 {
		t.Fatalf("GET = %d from %q (%d upstream hits), want 200 from alive", w.Code, w.Header().Get(HeaderServer), up.hits.Load())
	}
	if len(failed) != 1 || failed[0] != "dead/connect" {
		t.Errorf("failures reported: %v, want [dead/connect]", failed)
	}
}

// A write whose connection failed before any byte was sent was never sent:
// the next candidate gets its first send. One whose bytes may have reached
// a server is never sent again.
func TestWriteIsNeverSentTwice(t *testing.T) {
	up := newUpstream(t)
	trust := trustFor(t, up.Server)
	w := httptest.NewRecorder()
	Forward(w, httptest.NewRequest(http.MethodPost, "/apis/g/v/namespaces/n/rs", strings.NewReader("{}")),
		Request{Candidates: []*Backend{deadBackend(t, trust), backendFor(t, "alive", up.Server, trust)}})
	if w.Code != http.StatusOK || up.hits.Load() != 1 {
		t.Fatalf("a write refused at dial: %d, %d hits on the next server, want 200 and 1", w.Code, up.hits.Load())
	}
	var resetHits atomic.Int32
	reset := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		resetHits.Add(1)
		if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
			conn.Close() // the request arrived; the answer never comes
		}
	}))
	defer reset.Close()
	up.hits.Store(0)
	w = httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodPost, "/apis/g/v/namespaces/n/rs", strings.NewReader("{}"))
	r.Header.Set("Accept", "application/json")
	Forward(w, r, Request{Candidates: []*Backend{backendFor(t, "reset", reset, trustFor(t, reset)), backendFor(t, "alive", up.Server, trust)}})
	if resetHits.Load() != 1 || up.hits.Load() != 0 {
		t.Fatalf("a write that reached a server: sent there %d times, to the next %d times; want 1 and 0", resetHits.Load(), up.hits.Load())
	}
	// Bug (make scale: 55 creates answered 409 "already exists"): the
	// answer was a 503 with Retry-After, which client-go takes as "not
	// processed" and sends again — a create the server had taken then
	// failed with 409. The caller is told the server may have processed
	// it, without Retry-After, as a broken connection would tell it.
	if w.Code != http.StatusBadGateway || w.Header().Get("Retry-After") != "" || w.Header().Get(HeaderServer) != "skewgate" {
		t.Fatalf("a write that may have been processed: %d Retry-After=%q server=%q, want 502 without Retry-After from skewgate",
			w.Code, w.Header().Get("Retry-After"), w.Header().Get(HeaderServer))
	}
	var st metav1.Status
	if err := runtime.DecodeInto(statusCodecs.UniversalDecoder(), w.Body.Bytes(), &st); err != nil || st.Code != http.StatusBadGateway ||
		!strings.Contains(st.Message, "may have processed") || st.Details != nil && st.Details.RetryAfterSeconds != 0 {
		t.Fatalf("Status %+v (%v)", st, err)
	}
	// A read on such a connection is safe to send again: 503, retry.
	w = httptest.NewRecorder()
	Forward(w, httptest.NewRequest(http.MethodGet, "/apis/g/v/namespaces/n/rs", nil),
		Request{Candidates: []*Backend{backendFor(t, "reset", reset, trustFor(t, reset))}, Idempotent: true})
	assertUnavailable(t, w)
}

func TestUntrustedServerIsNotForwardedTo(t *testing.T) {
	trusted := newUpstream(t)
	// The impostor serves a certificate of its own making for the same
	// address; the peer CA (trusted's) did not sign it.
	up := &upstream{}
	up.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { up.hits.Add(1) }))
	certPEM, keyPEM := keyPair(t, "impostor", x509.ExtKeyUsageServerAuth)
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	up.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	up.StartTLS()
	t.Cleanup(up.Close)
	fr := Request{Candidates: []*Backend{backendFor(t, "impostor", up.Server, trustFor(t, trusted.Server))}, Idempotent: true}
	w := httptest.NewRecorder()
	Forward(w, httptest.NewRequest(http.MethodGet, "/api/v1/pods", nil), fr)
	if up.hits.Load() != 0 {
		t.Fatal("request reached a server whose certificate the peer CA does not trust")
	}
	assertUnavailable(t, w)
}

func assertUnavailable(t *testing.T, w *httptest.ResponseRecorder) {
	t.Helper()
	if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" || w.Header().Get(HeaderRoute) != "unavailable" || w.Header().Get(HeaderServer) != "skewgate" {
		t.Fatalf("got %d Retry-After=%q route=%q, want 503 with Retry-After, route unavailable", w.Code, w.Header().Get("Retry-After"), w.Header().Get(HeaderRoute))
	}
	var st metav1.Status
	if err := runtime.DecodeInto(statusCodecs.UniversalDecoder(), w.Body.Bytes(), &st); err != nil {
		t.Fatalf("body is not a Status: %v: %s", err, w.Body)
	}
	if st.Reason != metav1.StatusReasonServiceUnavailable || st.Code != 503 {
		t.Errorf("status = %s %d", st.Reason, st.Code)
	}
}

func TestUnavailableNegotiatesProtobuf(t *testing.T) {
	w := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodGet, "/api/v1/pods", nil)
	r.Header.Set("Accept", "application/vnd.kubernetes.protobuf")
	Unavailable(w, r, "peer gone")
	if ct := w.Header().Get("Content-Type"); ct != "application/vnd.kubernetes.protobuf" {
		t.Errorf("content type %q, want protobuf as asked", ct)
	}
	var st metav1.Status
	if err := runtime.DecodeInto(statusCodecs.UniversalDecoder(), w.Body.Bytes(), &st); err != nil || st.Code != 503 {
		t.Errorf("protobuf Status: %v %+v", err, st)
	}
}

// A caller skewgate did not verify learns nothing of the control plane's
// inside from a 503: no addresses, no dial or TLS errors.
func TestUnavailableShowsErrorsOnlyToVerifiedCallers(t *testing.T) {
	up := newUpstream(t)
	dead := deadBackend(t, trustFor(t, up.Server))
	for _, show := range []bool{false, true} {
		w := httptest.NewRecorder()
		Forward(w, httptest.NewRequest(http.MethodGet, "/api/v1/pods", nil), Request{Candidates: []*Backend{dead}, ShowErrors: show})
		assertUnavailable(t, w)
		if leaks := strings.Contains(w.Body.String(), dead.URL.Host); leaks != show {
			t.Errorf("ShowErrors %t: body names the server: %t: %s", show, leaks, w.Body)
		}
	}
}

// An apiserver may close the connection after an unauthenticated request.
// A flood of those must not cost bearer-token requests their connections:
// the two never share a pool.
func TestBearerRequestsKeepTheirConnections(t *testing.T) {
	var mu sync.Mutex
	bearerConns := map[string]bool{}
	up := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "" {
			w.Header().Set("Connection", "close") // as after an anonymous 401
			return
		}
		mu.Lock()
		bearerConns[r.RemoteAddr] = true
		mu.Unlock()
	}))
	defer up.Close()
	b := backendFor(t, "b", up, trustFor(t, up))
	for i := range 10 {
		r := httptest.NewRequest(http.MethodGet, "/api/v1/pods", nil)
		if i%2 == 0 {
			r.Header.Set("Authorization", "Bearer token")
		}
		w := httptest.NewRecorder()
		Forward(w, r, Request{Candidates: []*Backend{b}, Anonymous: true})
		if w.Code != http.StatusOK {
			t.Fatalf("request %d: %d %s", i, w.Code, w.Body)
		}
	}
	if len(bearerConns) != 1 {
		t.Errorf("5 bearer-token requests between anonymous ones used %d connections, want 1", len(bearerConns))
	}
}

// fullPeer is a peer with an in-flight limit of 1, which a request it
// holds until the test ends takes; arrived tells of later requests that
// reach it.
func fullPeer(t *testing.T) (*Backend, chan struct{}) {
	release, arrived := make(chan struct{}), make(chan struct{}, 10)
	up := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { arrived <- struct{}{}; <-release }))
	t.Cleanup(up.Close)
	t.Cleanup(func() { close(release) })
	b := backendFor(t, "peer", up, trustFor(t, up))
	b.LimitInFlight(1)
	go Forward(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/slow", nil), Request{Candidates: []*Backend{b}})
	<-arrived // the first request holds the only slot
	return b, arrived
}

// A peer at its in-flight limit gets no more short requests: the caller
// gets 429 with Retry-After; watches do not count.
func TestInFlightLimit(t *testing.T) {
	b, arrived := fullPeer(t)
	w := httptest.NewRecorder()
	Forward(w, httptest.NewRequest(http.MethodGet, "/api/v1/pods", nil), Request{Candidates: []*Backend{b}})
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") == "" {
		t.Fatalf("over the limit: %d Retry-After=%q, want 429 with Retry-After", w.Code, w.Header().Get("Retry-After"))
	}
	watch := make(chan int, 1)
	go func() {
		ww := httptest.NewRecorder()
		Forward(ww, httptest.NewRequest(http.MethodGet, "/api/v1/pods?watch=true", nil), Request{Candidates: []*Backend{b}, LongRunning: true})
		watch <- ww.Code
	}()
	select {
	case code := <-watch:
		t.Errorf("a watch over the limit was answered %d, want it forwarded", code)
	case <-arrived: // forwarded: the upstream holds it
	}
}

// A peer that takes connections but fails every exchange is left alone
// after five failures in a row: the sixth request is not sent to it.
func TestBreakerStopsSendingToAFailingPeer(t *testing.T) {
	var hits atomic.Int32
	up := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close() // a reset after the request arrived
		}
	}))
	defer up.Close()
	b := backendFor(t, "peer", up, trustFor(t, up))
	b.BreakOnFailures()
	for i := range 8 {
		w := httptest.NewRecorder()
		Forward(w, httptest.NewRequest(http.MethodGet, "/api/v1/pods", nil), Request{Candidates: []*Backend{b}, Idempotent: true})
		if w.Code != http.StatusServiceUnavailable {
			t.Fatalf("request %d: %d, want 503", i, w.Code)
		}
	}
	if n := hits.Load(); n != 5 {
		t.Errorf("the failing peer got %d of 8 requests, want 5 before the breaker opened", n)
	}
}

// Bug: a method the outgoing transport refuses ("GET X", which Go's HTTP/2
// server accepts) failed before any connection and counted as the server
// failing to connect: one anonymous request took a healthy server out of
// routing. The caller gets 400; no server is blamed.
func TestRefusedRequestIsTheCallers(t *testing.T) {
	up := newUpstream(t)
	b := backendFor(t, "peer", up.Server, trustFor(t, up.Server))
	b.BreakOnFailures()
	var failed []string
	for range 6 {
		r := httptest.NewRequest(http.MethodGet, "/api/v1/pods", nil)
		r.Method = "GET X"
		w := httptest.NewRecorder()
		Forward(w, r, Request{Candidates: []*Backend{b}, Idempotent: true, Anonymous: true,
			Failed: func(id string, kind FailureKind, _ error) { failed = append(failed, id+"/"+string(kind)) }})
		if w.Code != http.StatusBadRequest {
			t.Fatalf("invalid method: %d %s, want 400", w.Code, w.Body)
		}
	}
	if len(failed) != 0 {
		t.Errorf("the server was blamed: %v", failed)
	}
	w := httptest.NewRecorder()
	Forward(w, httptest.NewRequest(http.MethodGet, "/api/v1/pods", nil), Request{Candidates: []*Backend{b}, Idempotent: true})
	if w.Code != http.StatusOK {
		t.Errorf("a good request after the refused ones: %d %s", w.Code, w.Body)
	}
}

// Bug: five requests whose bodies could not be read (an invalid chunk
// size) each counted as the peer failing, and opened its breaker for
// everyone. A caller's body is the caller's: 400, and the peer stays in.
func TestMalformedBodyIsTheCallers(t *testing.T) {
	var hits atomic.Int32
	up := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		io.Copy(io.Discard, r.Body)
	}))
	defer up.Close()
	b := backendFor(t, "peer", up, trustFor(t, up))
	b.BreakOnFailures()
	var failed []string
	for i := range 6 {
		body := io.MultiReader(strings.NewReader("{"), iotest.ErrReader(errors.New("invalid byte in chunk length")))
		r := httptest.NewRequest(http.MethodPost, "/api/v1/namespaces/n/configmaps", body)
		w := httptest.NewRecorder()
		Forward(w, r, Request{Candidates: []*Backend{b}, Anonymous: true,
			Failed: func(id string, kind FailureKind, _ error) { failed = append(failed, id+"/"+string(kind)) }})
		if w.Code != http.StatusBadRequest {
			t.Fatalf("request %d with a malformed body: %d %s, want 400", i, w.Code, w.Body)
		}
	}
	if len(failed) != 0 {
		t.Errorf("the peer was blamed for the callers' bodies: %v", failed)
	}
	w := httptest.NewRecorder()
	Forward(w, httptest.NewRequest(http.MethodPost, "/api/v1/namespaces/n/configmaps", strings.NewReader("{}")), Request{Candidates: []*Backend{b}})
	if w.Code != http.StatusOK {
		t.Errorf("a well-formed request after them: %d %s (circuit open?)", w.Code, w.Body)
	}
}

// Both 404s kube-apiserver gives for a type it lacks are recognised where
// routing chose the server for that type; Stale decides whether it is kept
// from the caller (a stale discovery) or passed on (the type's own).
func TestTypeNotFoundGuard(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		stale      bool
		want       int
	}{
		{"status under a served group", `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"the server could not find the requested resource","reason":"NotFound","details":{},"code":404}`, true, 503},
		{"plain page of a group not served", "404 page not found\n", true, 503},
		{"the type's own 404, confirmed", "404 page not found\n", false, 404},
		{"an object that does not exist", `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"configmaps \"x\" not found","reason":"NotFound","details":{"name":"x","kind":"configmaps"},"code":404}`, true, 404},
		{"a body that merely contains the page text", "<html>404 page not found, try elsewhere</html>", true, 404},
	} {
		up := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, tc.body)
		}))
		b := backendFor(t, "peer", up, trustFor(t, up))
		var asked []string
		w := httptest.NewRecorder()
		Forward(w, httptest.NewRequest(http.MethodGet, "/apis/g/v/rs", nil), Request{Candidates: []*Backend{b}, Idempotent: true,
			Listed: true, Stale: func(id string) bool { asked = append(asked, id); return tc.stale }})
		if w.Code != tc.want {
			t.Errorf("%s: %d %s, want %d", tc.name, w.Code, w.Body, tc.want)
		}
		up.Close()
	}
}

// Only what kube-apiserver runs long is spliced as an upgrade or skips the
// in-flight limit: "Connection: x-upgrade" on a list does neither.
func TestUpgradeHeaderDoesNotSkipTheLimit(t *testing.T) {
	b, _ := fullPeer(t)
	r := httptest.NewRequest(http.MethodGet, "/api/v1/pods", nil)
	r.Header.Set("Connection", "x-upgrade")
	r.Header.Set("Upgrade", "websocket")
	w := httptest.NewRecorder()
	Forward(w, r, Request{Candidates: []*Backend{b}})
	if w.Code != http.StatusTooManyRequests {
		t.Fatalf("a list naming an upgrade over the limit: %d, want 429", w.Code)
	}
}

// A request the local server fails before answering moves to the peers
// Fallback names, with FallbackIdentity (the peer mark) instead of the
// local route's identity; writes only when none of them was sent.
func TestFallbackToPeersCarriesTheirIdentity(t *testing.T) {
	var mark atomic.Value
	up := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mark.Store(r.Header.Get("X-Mark"))
		io.Copy(io.Discard, r.Body)
	}))
	defer up.Close()
	trust := trustFor(t, up)
	for _, method := range []string{http.MethodGet, http.MethodPost} {
		mark.Store("")
		asked := 0
		w := httptest.NewRecorder()
		Forward(w, httptest.NewRequest(method, "/api/v1/namespaces/n/configmaps", strings.NewReader("{}")), Request{
			Candidates:  []*Backend{deadBackend(t, trust)},
			Idempotent:  method == http.MethodGet,
			SetIdentity: func(h http.Header) { h.Set("X-Mark", "local") },
			Fallback: func() ([]*Backend, Identity) {
				asked++
				return []*Backend{backendFor(t, "peer", up, trust)}, Identity{Set: func(h http.Header) { h.Set("X-Mark", "peer") }}
			},
		})
		if w.Code != http.StatusOK || w.Header().Get(HeaderServer) != "peer" || mark.Load() != "peer" || asked != 1 {
			t.Errorf("%s with the local server down: %d from %q, mark %q, fallback asked %d times", method, w.Code, w.Header().Get(HeaderServer), mark.Load(), asked)
		}
	}
}

// goAwayServer accepts one HTTP/2 connection, reads one request to its
// end, stops listening and answers with a graceful GOAWAY that does not
// include the request's stream: what a kube-apiserver shutting down (SIGTERM)
// sends a stream it had not seen when it began to shut down. The request
// was not processed, and the next dial is refused.
func goAwayServer(t *testing.T) (*Backend, Trust) {
	t.Helper()
	certPEM, keyPEM := keyPair(t, "apiserver", x509.ExtKeyUsageServerAuth)
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	done := make(chan struct{})
	t.Cleanup(func() { <-done })
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		if _, err := io.ReadFull(c, make([]byte, len(http2.ClientPreface))); err != nil {
			return
		}
		fr := http2.NewFramer(c, c)
		fr.WriteSettings()
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				return
			}
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if !f.IsAck() {
					fr.WriteSettingsAck()
				}
			case *http2.DataFrame, *http2.HeadersFrame:
				if f.Header().Flags.Has(http2.FlagDataEndStream) { // the same bit for HEADERS
					ln.Close()
					fr.WriteGoAway(0, http2.ErrCodeNo, nil)
					io.Copy(io.Discard, c) // until the client closes
					return
				}
			}
		}
	}()
	ca, err := dynamiccertificates.NewStaticCAContent("test", certPEM)
	if err != nil {
		t.Fatal(err)
	}
	trust := Trust{PeerCA: ca}
	return NewBackend("leaving", &url.URL{Scheme: "https", Host: ln.Addr().String()}, trust), trust
}

// Bug (seen in CI: TestXLocalRestart/graceful, "503 unavailable" for a
// create): a write sent on a connection the local apiserver was closing
// gracefully arrived after its GOAWAY. The server never saw it, so the
// transport may send it again — but only with Request.GetBody, which
// skewgate did not set once the body was written: the caller got a 503.
// A write the server provably did not take moves on like one refused at
// dial, with its whole body.
func TestWriteRefusedByGoAwayMovesOn(t *testing.T) {
	leaving, _ := goAwayServer(t)
	var got atomic.Value
	up := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got.Store(string(body))
		w.WriteHeader(http.StatusCreated)
	}))
	defer up.Close()
	var failed []string
	const body = `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"}}`
	w := httptest.NewRecorder()
	Forward(w, httptest.NewRequest(http.MethodPost, "/api/v1/namespaces/n/configmaps", strings.NewReader(body)),
		Request{Candidates: []*Backend{leaving, backendFor(t, "alive", up, trustFor(t, up))}, Anonymous: true,
			Failed: func(id string, kind FailureKind, _ error) { failed = append(failed, id+"/"+string(kind)) }})
	if w.Code != http.StatusCreated || w.Header().Get(HeaderServer) != "alive" {
		t.Fatalf("a write the leaving server did not take: %d from %q %s, want 201 from alive", w.Code, w.Header().Get(HeaderServer), w.Body)
	}
	if got.Load() != body {
		t.Errorf("the next server got body %q, want %q", got.Load(), body)
	}
	if len(failed) != 1 || failed[0] != "leaving/connect" {
		t.Errorf("failures reported: %v, want [leaving/connect]", failed)
	}
}

// A body is kept to be sent again up to MaxReplay bytes; a longer one is
// streamed once, and asking for it again is an error, never a partial body.
func TestBodyKeptUpToMaxReplay(t *testing.T) {
	for _, size := range []int{0, 1, MaxReplay, MaxReplay + 1} {
		r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(strings.Repeat("x", size)))
		body := callerBody(r)
		if body == nil {
			if size == 0 {
				continue // httptest gives an empty body http.NoBody
			}
			t.Fatalf("%d bytes: no body", size)
		}
		first, err := io.ReadAll(r.Body)
		if err != nil || len(first) != size {
			t.Fatalf("%d bytes: first read %d, %v", size, len(first), err)
		}
		again, err := r.GetBody()
		if size > MaxReplay {
			if !errors.Is(err, errTooLongToReplay) {
				t.Errorf("%d bytes: asked again: %v, want errTooLongToReplay", size, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%d bytes: asked again: %v", size, err)
		}
		if second, err := io.ReadAll(again); err != nil || len(second) != size {
			t.Errorf("%d bytes: second read %d, %v", size, len(second), err)
		}
		if body.failed() != nil {
			t.Errorf("%d bytes: a body read to its end failed: %v", size, body.failed())
		}
	}
}
