package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"

	"github.com/skewgate/skewgate/lab"
	"github.com/skewgate/skewgate/proxy/drain"
)

// TestShutdownAnswersAcceptedConnections: a connection the server accepted
// just before it began to stop brings its first request after — a
// skewgate that handed its listening socket to a successor, or withdrew
// steering, still owes it an answer. Go's server drops an HTTP/1.1
// request it reads once its shutdown has begun (the DaemonSet rollout
// saw 1 fresh connection in ~400 end with EOF as the old pod left).
func TestShutdownAnswersAcceptedConnections(t *testing.T) {
	serving, clientCA, roots := servingPKI(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, ln, h, TLS{Serving: serving, ClientCAs: clientCA}) }()

	dial := func(proto string) *tls.Conn {
		c, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", NextProtos: []string{proto}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	fresh := dial("http/1.1") // accepted, its request not sent yet
	idle := dial("http/1.1")  // one that never sends one
	cancel()
	time.Sleep(200 * time.Millisecond) // the shutdown is under way
	io.WriteString(fresh, "GET /version HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(fresh), nil)
	if err != nil {
		t.Fatalf("a connection accepted before the shutdown began got no answer: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || string(body) != "ok" {
		t.Errorf("answer %d %q, want 200 ok", resp.StatusCode, body)
	}
	if !resp.Close {
		t.Errorf("answer without Connection: close while the server stops")
	}
	// One that never sends a request holds the shutdown only so long.
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve: %v", err)
		}
	case <-time.After(drain.FirstRequestWait + 10*time.Second):
		t.Fatalf("Serve still running %s after the shutdown began, a connection without a request open", drain.FirstRequestWait+10*time.Second)
	}
	idle.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := idle.Read(make([]byte, 1)); err == nil {
		t.Errorf("the connection that sent nothing is still open after Serve returned")
	}
	// No new connection is accepted once the shutdown began.
	if c, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second); err == nil {
		c.Close()
		t.Errorf("the listener still accepts after Serve returned")
	}
}

// servingPKI is a serving certificate for 127.0.0.1, the client CA, and
// the roots that verify the serving certificate.
func servingPKI(t *testing.T) (dynamiccertificates.CertKeyContentProvider, dynamiccertificates.CAContentProvider, *x509.CertPool) {
	t.Helper()
	pki, err := lab.GeneratePKI(t.TempDir(), []lab.Node{{Name: "node-a", IP: mustIP("127.0.0.1")}})
	if err != nil {
		t.Fatal(err)
	}
	serving, err := dynamiccertificates.NewDynamicServingContentFromFiles("serving", pki.Serving["node-a"].CertFile, pki.Serving["node-a"].KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	clientCA, err := dynamiccertificates.NewDynamicCAContentFromFile("client-ca", pki.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := lab.LoadCA(pki.CAFile, pki.CAKey)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	return serving, clientCA, roots
}

// Serve's HTTP/2 (x/net's server, for its write scheduler) keeps what Go's
// built-in one gave: the stream limit is advertised, and an answer with
// Connection: close (the hand-back) ends the connection gracefully — a
// GOAWAY: no new stream on it, the one in flight finishes.
func TestServeHTTP2(t *testing.T) {
	serving, clientCA, roots := servingPKI(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	entered, release := make(chan struct{}), make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/close":
			w.Header().Set("Connection", "close")
		case "/slow":
			close(entered)
			<-release
		}
		io.WriteString(w, "ok")
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, ln, h, TLS{Serving: serving, ClientCAs: clientCA, MaxStreams: 7}) }()
	defer func() { cancel(); <-done }()

	conn, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cc, err := (&http2.Transport{}).NewClientConn(conn)
	if err != nil {
		t.Fatal(err)
	}
	get := func(path string) error {
		req, _ := http.NewRequest(http.MethodGet, "https://127.0.0.1"+path, nil)
		resp, err := cc.RoundTrip(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err == nil && (resp.StatusCode != http.StatusOK || string(body) != "ok") {
			err = fmt.Errorf("GET %s: %d %q", path, resp.StatusCode, body)
		}
		return err
	}
	if err := get("/"); err != nil {
		t.Fatal(err)
	}
	if got := cc.State().MaxConcurrentStreams; got != 7 {
		t.Errorf("the server advertised %d concurrent streams, want 7", got)
	}
	slow := make(chan error, 1)
	go func() { slow <- get("/slow") }()
	<-entered
	if err := get("/close"); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); cc.CanTakeNewRequest(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the connection still takes new requests after an answer with Connection: close")
		}
	}
	close(release)
	if err := <-slow; err != nil {
		t.Errorf("the request in flight at the GOAWAY: %v", err)
	}
}
