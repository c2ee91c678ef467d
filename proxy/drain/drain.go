// Package drain stops an http.Server without dropping a request it
// accepted. Go's server drops, without an answer, an HTTP/1.1 request it
// reads once its shutdown has begun (net/http, conn.serve): a client
// that connected just before would see EOF — on a skewgate that hands its
// sockets to a successor, the last connections the old process took.
// So a stopping server closes its listener, ends keep-alives, waits for
// every connection it accepted to bring its first request in, and only
// then shuts down. An HTTP/2 connection needs no wait: the shutdown's
// GOAWAY tells its client which streams were not taken, and the client
// sends those again.
package drain

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// FirstRequestWait bounds how long Stop waits for the connections
// accepted to send their first request: as long as Go's server spares a
// new connection from closing as idle.
const FirstRequestWait = 5 * time.Second

// Server is an http.Server whose stop answers every connection it
// accepted.
type Server struct {
	*http.Server
	mu      sync.Mutex
	waiting map[net.Conn]bool // accepted, no request handled yet
}

type connKey struct{}

// conn is a connection as its requests see it.
type conn struct {
	c      net.Conn
	served atomic.Bool // a request of it reached the handler
}

// Track wraps srv's Handler, ConnState and ConnContext (each still runs)
// to follow its connections; call it before srv serves.
func Track(srv *http.Server) *Server {
	s := &Server{Server: srv, waiting: map[net.Conn]bool{}}
	h, state, connCtx := srv.Handler, srv.ConnState, srv.ConnContext
	if h == nil {
		h = http.DefaultServeMux
	}
	srv.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Once per connection: later requests touch no shared lock.
		if e, ok := r.Context().Value(connKey{}).(*conn); ok && !e.served.Swap(true) {
			s.done(e.c)
		}
		h.ServeHTTP(w, r)
	})
	srv.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		if connCtx != nil {
			ctx = connCtx(ctx, c)
		}
		return context.WithValue(ctx, connKey{}, &conn{c: c})
	}
	srv.ConnState = func(c net.Conn, st http.ConnState) {
		s.mu.Lock()
		switch {
		case st == http.StateNew:
			s.waiting[c] = true
		case !s.waiting[c]: // its first request came
		case st == http.StateClosed || st == http.StateHijacked || isHTTP2(c):
			delete(s.waiting, c)
		}
		s.mu.Unlock()
		if state != nil {
			state(c, st)
		}
	}
	return s
}

func (s *Server) done(c net.Conn) {
	s.mu.Lock()
	delete(s.waiting, c)
	s.mu.Unlock()
}

// Stop closes ln (the listener s serves), so no connection is taken from
// now on; ends keep-alives, so each answer closes its connection; waits
// at most FirstRequestWait for every connection accepted to bring its
// first request in; then shuts s down gracefully until ctx ends
// (Shutdown: what is still active then is left to the caller).
func (s *Server) Stop(ctx context.Context, ln net.Listener) error {
	ln.Close()
	s.SetKeepAlivesEnabled(false)
	deadline := time.Now().Add(FirstRequestWait)
	for time.Now().Before(deadline) && s.pending() > 0 {
		time.Sleep(10 * time.Millisecond)
	}
	return s.Shutdown(ctx)
}

func (s *Server) pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.waiting)
}

func isHTTP2(c net.Conn) bool {
	tc, ok := c.(*tls.Conn)
	return ok && tc.ConnectionState().NegotiatedProtocol == "h2"
}
