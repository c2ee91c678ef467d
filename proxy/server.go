package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"golang.org/x/net/http2"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"

	"github.com/skewgate/skewgate/proxy/drain"
	"github.com/skewgate/skewgate/proxy/headercount"
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
	// Admission, if set, bounds the connections whose caller has not
	// proved who it is, and counts the others in its Load.
	Admission *Admission
}

// handshakeTimeout is how long a client has to finish its TLS handshake,
// and an HTTP/1.1 request's header.
const handshakeTimeout = 10 * time.Second

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

	srv := &http.Server{
		Handler:   h,
		TLSConfig: &tls.Config{GetConfigForClient: ctrl.GetConfigForClient, NextProtos: base.NextProtos},
		// Also the TLS handshake's deadline: a connection that never
		// finishes one is pending (see Admission) for 10 s at most.
		ReadHeaderTimeout: handshakeTimeout,
		// An idle connection is closed, so no verdict on a client
		// certificate outlives its use for long.
		IdleTimeout:    90 * time.Second,
		MaxHeaderBytes: FrontHeaderBytes,
		ConnContext:    withConnVerdict,
	}
	if a := t.Admission; a != nil {
		srv.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
			return a.ConnContext(withConnVerdict(ctx, c), c)
		}
		srv.ConnState = a.ConnState
	}
	headercount.Set(srv) // a caller in thousands of groups, as kube-apiserver takes
	if t.MaxStreams > 0 {
		srv.HTTP2 = &http.HTTP2Config{MaxConcurrentStreams: t.MaxStreams}
	}
	if err := http2.ConfigureServer(srv, &http2.Server{NewWriteScheduler: newWriteScheduler}); err != nil {
		return fmt.Errorf("serve %s: %w", ln.Addr(), err)
	}
	tracked := drain.Track(srv)
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
	if t.EndLongRunning != nil {
		srv.RegisterOnShutdown(t.EndLongRunning)
	}
	// Every connection accepted is answered (see drain).
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tracked.Stop(sctx, ln); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
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
