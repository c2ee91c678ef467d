package forward

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync/atomic"
	"syscall"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Whose fault a failed exchange with an apiserver was is decided in one
// place, blame, for every request skewgate sends on a caller's behalf
// (forwarded requests, merged discovery's check with the local server, the
// token review). A server is blamed only on positive evidence: dialing it
// or the TLS handshake with it failed, or the connection broke under the
// request (reset, closed, timed out, ended by a GOAWAY with an error) or
// the server failed the request after it was written. Everything else is
// the caller's: it left, its body could not be read, or the transport
// refused to send what it asked for. A caller can send anything, and what
// it sends must never take a server out of routing or open its breaker.

// CallerError is a request that failed through the caller's own doing: it
// left, its body could not be read, or the transport refused to send it.
// It is answered 400 (431 for headers too large; nothing to a caller that
// left), and never counts against a server.
type CallerError struct{ Err error }

func (e *CallerError) Error() string { return "the request could not be forwarded: " + e.Err.Error() }
func (e *CallerError) Unwrap() error { return e.Err }

// ServerError is a failed exchange that blames the server: Kind
// FailConnect (no connection: dial or TLS failed, nothing was sent) or
// FailRequest (the connection broke or the server failed the request after
// bytes of it may have reached it).
type ServerError struct {
	Kind FailureKind
	Err  error
}

func (e *ServerError) Error() string { return e.Err.Error() }
func (e *ServerError) Unwrap() error { return e.Err }

// ErrHeaderTooLarge is a request whose header list the transport refused
// to send: larger than the apiserver accepts.
var ErrHeaderTooLarge = errors.New("request header fields too large")

// errCaller is what the breaker is told of an exchange the caller ended
// or spoiled, or that nobody failed: excluded, it counts neither way.
var errCaller = errors.New("the caller's request failed, not the server")

// attempt is what happened to one exchange on its way to a server.
type attempt struct {
	// connected: a connection was obtained, so bytes of the request may
	// have been sent.
	connected bool
	// dialFailed: dialing or the TLS handshake failed.
	dialFailed bool
	// wrote: the transport wrote the request's headers (or tried to): the
	// request is on the wire, whatever happens next is the exchange's.
	wrote bool
	// conn is the connection the exchange got, if any.
	conn *trackedConn
}

// roundTrip sends req to b and reports how far it got.
func roundTrip(req *http.Request, b *Backend, anonymous bool, setIdentity func(http.Header), review bool) (*http.Response, attempt, error) {
	var connected, dialFailed, wrote atomic.Bool
	var conn atomic.Pointer[trackedConn]
	// The transport may try again itself — a request a graceful GOAWAY
	// refused, or a connection that proved unusable before the request
	// went out — and does so only when the server did not take it: what
	// counts is the last attempt, which begins with GetConn.
	trace := &httptrace.ClientTrace{
		GetConn: func(string) {
			connected.Store(false)
			dialFailed.Store(false)
			wrote.Store(false)
			conn.Store(nil)
		},
		GotConn: func(info httptrace.GotConnInfo) {
			connected.Store(true)
			conn.Store(tracked(info.Conn))
		},
		ConnectDone: func(_, _ string, err error) {
			if err != nil {
				dialFailed.Store(true)
			}
		},
		TLSHandshakeDone: func(_ tls.ConnectionState, err error) {
			if err != nil {
				dialFailed.Store(true)
			}
		},
		WroteHeaders: func() { wrote.Store(true) },
	}
	resp, err := b.do(req.WithContext(httptrace.WithClientTrace(req.Context(), trace)), anonymous, setIdentity, review)
	return resp, attempt{connected: connected.Load(), dialFailed: dialFailed.Load(), wrote: wrote.Load(), conn: conn.Load()}, err
}

// tracked is the connection skewgate dialed under c (a TLS connection).
func tracked(c net.Conn) *trackedConn {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	t, _ := c.(*trackedConn)
	return t
}

// blame decides whose fault err, the failure of an exchange made on behalf
// of the caller of ctx, was: a *CallerError, a *ServerError, or err itself
// when it is nobody's (skewgate closed the connection before the request
// was written, as the server left routing).
func blame(ctx context.Context, body *bodyReader, at attempt, err error) error {
	switch {
	case errors.Is(err, ErrTokenToPeer):
		return err // skewgate's own refusal, before any connection: nobody's
	case ctx.Err() != nil:
		return &CallerError{ctx.Err()}
	case body != nil && body.failed() != nil:
		return &CallerError{body.failed()}
	case headerTooLarge(err):
		// Headers or trailers: refused by the transport itself, wherever
		// it was in writing the request.
		return &CallerError{errors.Join(ErrHeaderTooLarge, err)}
	case at.dialFailed:
		return &ServerError{FailConnect, err}
	case at.wrote, at.conn != nil && at.conn.broken.Load(), connectionEnded(err):
		return &ServerError{FailRequest, err}
	case at.conn != nil && at.conn.closed.Load():
		return err
	}
	// No dial failed and nothing was written: the transport refused the
	// request by itself (an invalid method, header or path), with or
	// without a connection in hand.
	return &CallerError{err}
}

// Blame reports whether err, from Send, is positive evidence against the
// server, and of which kind.
func Blame(err error) (FailureKind, bool) {
	var se *ServerError
	if errors.As(err, &se) {
		return se.Kind, true
	}
	return "", false
}

// requestHeaderListSize is how Go's HTTP/2 client says it refused a header
// (or trailer) list larger than the server's SETTINGS_MAX_HEADER_LIST_SIZE.
// The error is internal to net/http; TestOversizedHeaderIsTheCallers fails
// if its text changes.
const requestHeaderListSize = "request header list larger than peer's advertised limit"

func headerTooLarge(err error) bool {
	return errors.Is(err, ErrHeaderTooLarge) || strings.Contains(err.Error(), requestHeaderListSize)
}

// connectionEnded reports errors that only a connection ending under the
// exchange produces: the peer closed it (an EOF, often after a TLS
// close_notify, which the socket never sees as an error), reset it, or
// stopped answering.
func connectionEnded(err error) bool {
	var ne net.Error
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNABORTED) ||
		errors.As(err, &ne) && ne.Timeout() ||
		strings.Contains(err.Error(), "server sent GOAWAY and closed the connection") ||
		strings.Contains(err.Error(), "client connection lost")
}

// Send sends req to b on its caller's behalf, once, with b's pools (see
// Backend.Do). A failure is a *CallerError, a *ServerError (see Blame), or
// neither; the caller's body is read once and not kept.
func (b *Backend) Send(req *http.Request, anonymous bool, setIdentity func(http.Header)) (*http.Response, error) {
	return b.send(req, anonymous, setIdentity, false)
}

// Review sends a token review — a SelfSubjectReview with the caller's
// bearer token, without the front-proxy certificate — as Send does. It is
// the one request that takes a caller's token to a peer: one whose serving
// certificate proved it an apiserver of this cluster (ProveAPIServer)
// before the request was written.
func (b *Backend) Review(req *http.Request) (*http.Response, error) {
	return b.send(req, true, nil, true)
}

func (b *Backend) send(req *http.Request, anonymous bool, setIdentity func(http.Header), review bool) (*http.Response, error) {
	req = req.WithContext(req.Context()) // the caller's request keeps its body
	body := watchBody(req)
	resp, at, err := roundTrip(req, b, anonymous, setIdentity, review)
	if err != nil {
		return nil, blame(req.Context(), body, at, err)
	}
	return resp, nil
}

// RefuseCaller answers a request that failed through the caller's doing as
// the apiserver would have: 431 for headers it would not take, else 400.
func RefuseCaller(w http.ResponseWriter, r *http.Request, ce *CallerError) {
	w.Header().Set(HeaderRoute, "rejected")
	w.Header().Set(HeaderServer, "skewgate")
	if errors.Is(ce, ErrHeaderTooLarge) {
		Error(w, r, HeaderTooLarge())
		return
	}
	Error(w, r, apierrors.NewBadRequest(ce.Error()))
}

// HeaderTooLarge is the 431 Status for a request whose headers the
// apiserver would not take. metav1 has no reason for it: BadRequest, with
// the code saying which.
func HeaderTooLarge() *apierrors.StatusError {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusRequestHeaderFieldsTooLarge,
		Reason: metav1.StatusReasonBadRequest, Message: "request header fields too large",
	}}
}
