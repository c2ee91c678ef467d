package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
)

// TLS is the client-facing TLS material; both reload when their files
// change (run their controllers).
type TLS struct {
	Serving dynamiccertificates.CertKeyContentProvider
	// ClientCAs are advertised in the handshake so clients pick the right
	// certificate; verification happens per request (see callerAuth).
	ClientCAs dynamiccertificates.CAContentProvider
	// MinVersion and CipherSuites are the cluster's TLS policy, as
	// kube-apiserver's --tls-min-version and --tls-cipher-suites: once
	// steering puts skewgate on :6443 it must hold. Zero: Go's defaults,
	// at least TLS 1.2.
	MinVersion   uint16
	CipherSuites []uint16
	// MaxStreams is the HTTP/2 concurrent stream limit per connection
	// (kube-apiserver's --http2-max-streams-per-connection).
	MaxStreams int
	// Withdraw, if set, runs when the server is to stop, before the
	// listener closes: new connections stop coming, and if it reports
	// that connections may still sit in the listener's queue, those are
	// accepted and served first (a closing listener resets them). A
	// listener handed over to a successor is still open there: nothing
	// to wait for, and closing it at once leaves every new connection to
	// the successor.
	Withdraw func() (queued bool)
	// EndLongRunning, if set, runs as the server shuts down: watches end
	// instead of holding the shutdown until its timeout.
	EndLongRunning func()
	// ConnState, if set, learns of every client connection's state.
	ConnState func(net.Conn, http.ConnState)
}

// drainQueue is how long the listener keeps accepting after steering was
// withdrawn: connections the kernel assigned to it just before are in its
// accept queue, and a closing listener would reset them.
const drainQueue = 300 * time.Millisecond

// Serve serves h over TLS on ln until ctx ends, then shuts down gracefully
// (watches are cut after a grace period). It presents the apiserver's
// serving certificate, exactly as kube-apiserver would.
func Serve(ctx context.Context, ln net.Listener, h http.Handler, t TLS) error {
	if t.MinVersion < tls.VersionTLS12 {
		t.MinVersion = tls.VersionTLS12
	}
	base := tls.Config{
		MinVersion:   t.MinVersion,
		CipherSuites: t.CipherSuites,
		// Requested, not required: bearer-token and anonymous clients
		// send none, as with kube-apiserver.
		ClientAuth: tls.RequestClientCert,
		NextProtos: []string{"h2", "http/1.1"},
	}
	ctrl := dynamiccertificates.NewDynamicServingCertificateController(&base, t.ClientCAs, t.Serving, nil, nil)
	if err := ctrl.RunOnce(); err != nil {
		return fmt.Errorf("serving certificate: %w", err)
	}
	t.Serving.AddListener(ctrl)
	t.ClientCAs.AddListener(ctrl)
	go ctrl.Run(1, ctx.Done())

	fresh := &firstRequests{waiting: map[net.Conn]bool{}}
	srv := &http.Server{
		Handler:           fresh.handler(h),
		TLSConfig:         &tls.Config{GetConfigForClient: ctrl.GetConfigForClient, NextProtos: base.NextProtos},
		ReadHeaderTimeout: 30 * time.Second,
		// An idle connection is closed, so no verdict on a client
		// certificate outlives its use for long.
		IdleTimeout:    90 * time.Second,
		MaxHeaderBytes: FrontHeaderBytes,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(withConnVerdict(ctx, c), connKey{}, c)
		},
		ConnState: func(c net.Conn, st http.ConnState) {
			fresh.connState(c, st)
			if t.ConnState != nil {
				t.ConnState(c, st)
			}
		},
	}
	if t.MaxStreams > 0 {
		srv.HTTP2 = &http.HTTP2Config{MaxConcurrentStreams: t.MaxStreams}
	}
	if err := http2.ConfigureServer(srv, &http2.Server{NewWriteScheduler: newWriteScheduler}); err != nil {
		return fmt.Errorf("serve %s: %w", ln.Addr(), err)
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.ServeTLS(ln, "", "") }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	if t.Withdraw != nil && t.Withdraw() {
		time.Sleep(drainQueue) // the accept loop takes what was queued
	}
	// Every connection accepted is answered: none is taken from now on,
	// each answer closes its connection, and each connection taken
	// brings its first request in before the shutdown begins (see
	// firstRequests).
	ln.Close()
	srv.SetKeepAlivesEnabled(false)
	fresh.wait(firstRequestWait)
	if t.EndLongRunning != nil {
		srv.RegisterOnShutdown(t.EndLongRunning)
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}

// firstRequestWait bounds how long a stopping server waits for the
// connections it accepted to send their first request: as long as Go's
// server spares a new connection from closing as idle.
const firstRequestWait = 5 * time.Second

// connKey is the context key of a request's client connection.
type connKey struct{}

// firstRequests are the client connections accepted whose first request
// has not reached the handler yet. Go's server drops, without an answer,
// an HTTP/1.1 request it reads once its shutdown has begun (net/http,
// conn.serve): a client that connected just before would see EOF. So a
// stopping server closes its listener, waits for these to bring their
// request in, and only then shuts down. An HTTP/2 connection needs no
// wait: the shutdown's GOAWAY tells its client which streams were not
// taken, and the client sends those again.
type firstRequests struct {
	mu      sync.Mutex
	waiting map[net.Conn]bool
}

func (f *firstRequests) connState(c net.Conn, st http.ConnState) {
	switch {
	case st == http.StateNew:
		f.mu.Lock()
		f.waiting[c] = true
		f.mu.Unlock()
	case st == http.StateClosed || st == http.StateHijacked || isHTTP2(c):
		f.done(c)
	}
}

func (f *firstRequests) done(c net.Conn) {
	f.mu.Lock()
	delete(f.waiting, c)
	f.mu.Unlock()
}

// handler notes each request's connection as served before h serves it.
func (f *firstRequests) handler(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c, ok := r.Context().Value(connKey{}).(net.Conn); ok {
			f.done(c)
		}
		h.ServeHTTP(w, r)
	})
}

// wait returns once every connection accepted brought its first request,
// or after max.
func (f *firstRequests) wait(max time.Duration) {
	deadline := time.Now().Add(max)
	for time.Now().Before(deadline) {
		f.mu.Lock()
		n := len(f.waiting)
		f.mu.Unlock()
		if n == 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func isHTTP2(c net.Conn) bool {
	tc, ok := c.(*tls.Conn)
	return ok && tc.ConnectionState().NegotiatedProtocol == "h2"
}

// newWriteScheduler picks, for each HTTP/2 client connection, which
// stream's frame goes out next among those that have one queued. Go's
// default (round-robin) walks every open stream of the connection for each
// frame it writes, idle ones included: a client-go process multiplexes all
// its watches on one connection (hundreds for a controller-manager, up to
// the 1000 streams allowed), and with 900 watches open beside it a GET
// through skewgate spent a fifth of its CPU in that walk
// (BenchmarkHopBesideWatches). The random scheduler looks only at streams
// with frames queued; control frames still go first, and which ready
// stream goes next is arbitrary, as HTTP/2 allows. Its own settings come
// from http.Server.HTTP2, as with Go's built-in server. (With Go 1.27,
// x/net's server wraps net/http's and this choice has no effect.)
func newWriteScheduler() http2.WriteScheduler { return http2.NewRandomWriteScheduler() }
