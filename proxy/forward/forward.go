package forward

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/apimachinery/pkg/util/proxy"
)

// Response headers skewgate adds to every answer it forwards or gives.
const (
	HeaderRoute  = "X-Skewgate-Route"
	HeaderServer = "X-Skewgate-Server"
	// HeaderAuditID correlates audit logs; apiservers echo it.
	HeaderAuditID = "Audit-ID"
)

// Request is one request to forward.
type Request struct {
	// Candidates are tried in order; only the first unless Idempotent.
	Candidates []*Backend
	// Idempotent requests (get, list, watch set-up) move on to the next
	// candidate when one fails them before its answer began: nothing has
	// reached the caller yet, and reading twice changes nothing. Writes
	// move on only when no byte of them was sent; never twice.
	Idempotent bool
	// Fallback, if set, lists further candidates once Candidates failed a
	// request (asked only then; for a write only if none of it was sent):
	// the peers that serve what the local server was chosen for, and the
	// identity they get instead of Anonymous and SetIdentity (a request
	// sent to a peer carries the peer mark, and a bearer token's caller
	// goes as the user its review named).
	Fallback func() ([]*Backend, Identity)
	// Failed, if set, learns of every failed exchange with a backend: kind
	// FailConnect (no connection: the server should leave routing at once)
	// or FailRequest (the connection broke after bytes were sent).
	Failed func(id string, kind FailureKind, err error)
	// Anonymous requests carry no identity from skewgate (a bearer token
	// or nothing): they go without the front-proxy certificate, so the
	// apiserver judges them exactly as if they had come directly. To a
	// peer a bearer token never goes (ErrTokenToPeer).
	Anonymous bool
	// SetIdentity writes the identity headers (and the peer mark) onto
	// the request to the backend. It runs last, in the round tripper,
	// after the reverse proxy removed hop-by-hop headers: a client that
	// names X-Remote-Group in its Connection header cannot remove what
	// skewgate sets, as with kube-aggregator's auth-proxy round tripper.
	SetIdentity func(http.Header)
	// ShowErrors puts why a backend failed (its address, the dial or TLS
	// error) into the 503 the caller gets. Only for callers skewgate
	// verified: others learn nothing about the control plane's inside.
	ShowErrors bool
	// LongRunning requests, as kube-apiserver classifies them (watches,
	// logs, proxy, exec, attach, port-forward), do not count against a
	// backend's in-flight limit; only they are spliced as upgrades.
	LongRunning bool
	// Listed: routing chose the candidates because their discovery lists
	// the resource, and the request's shape is one of the type's routes.
	// An apiserver that then answers that it has no such type may have
	// changed since its discovery was read (it restarted on another
	// version). Stale judges: true keeps that 404 from the caller (the
	// request moves to the next candidate, or gets a 503), false passes it
	// on as the type's own answer.
	Listed bool
	Stale  func(id string) bool
	// End, if set, ends a watch's answer cleanly when it closes, between
	// two events, as a watch the server timed out ends (see endAt).
	End <-chan struct{}
	// Overflow, if set, decides a request the first candidate has no slot
	// for (LimitInFlight): true sends it on without one (the caller is one
	// API Priority and Fairness isolates, and the apiserver decides
	// whether it waits); false means Overflow has answered it. Unset: a
	// plain 429.
	Overflow func(w http.ResponseWriter, r *http.Request, server string) bool
}

// Identity is how a request presents its caller to a set of backends: as
// Request.Anonymous and Request.SetIdentity.
type Identity struct {
	Anonymous bool
	Set       func(http.Header)
}

// errStale is an apiserver that denied serving what its discovery lists.
var errStale = errors.New("the apiserver no longer serves the resource its discovery listed; its discovery is being read again")

// kube-apiserver's two answers for a type it does not have: a Status
// under a group it serves, Go's plain 404 under a group it does not (its
// mux's NotFoundHandler). An object that does not exist is a Status that
// names it.
var (
	notFoundResource = []byte("the server could not find the requested resource")
	notFoundPage     = []byte("404 page not found")
)

// sniffBytes bounds what TypeNotFound reads of a 404: kube-apiserver's
// answers for a missing type are well under 1 KiB.
const sniffBytes = 64 << 10

// TypeNotFound reports whether resp is a 404 of a server that has no such
// type, keeping its body readable whole: it reads at most sniffBytes and
// puts them back in front of the rest, so a larger 404 (a proxied backend's,
// an aggregated server's) reaches the caller entire, under the
// Content-Length it came with.
func TypeNotFound(resp *http.Response) bool {
	if resp.StatusCode != http.StatusNotFound {
		return false
	}
	head, _ := io.ReadAll(io.LimitReader(resp.Body, sniffBytes))
	// A read error is left for the rest of the body to report to whoever
	// copies it.
	resp.Body = sniffedBody{io.MultiReader(bytes.NewReader(head), resp.Body), resp.Body}
	return bytes.Contains(head, notFoundResource) || bytes.Equal(bytes.TrimSpace(head), notFoundPage)
}

// sniffedBody reads the sniffed head, then the rest; closing it closes the
// response's own body.
type sniffedBody struct {
	io.Reader
	io.Closer
}

// Forward sends r (its identity headers already set) to the first candidate
// that takes it and streams the answer back: watches flush as events
// arrive, and exec/attach/port-forward upgrades are spliced through. When
// no candidate can be reached, the client gets a 503 metav1.Status.
func Forward(w http.ResponseWriter, r *http.Request, fr Request) {
	if len(fr.Candidates) == 0 {
		Unavailable(w, r, "no apiserver to forward to")
		return
	}
	first := fr.Candidates[0]
	if !fr.LongRunning {
		release, ok := first.acquire()
		switch {
		case ok:
			defer release()
		case fr.Overflow == nil:
			TooMany(w, r, first.ID)
			return
		case !fr.Overflow(w, r, first.ID):
			return
		}
	}
	loc := *first.URL
	// The query too: UpgradeAwareHandler dials upgrades (exec, attach,
	// port-forward) at exactly this location.
	loc.Path, loc.RawPath, loc.RawQuery = r.URL.Path, r.URL.RawPath, r.URL.RawQuery
	// Only what kube-apiserver runs long may be spliced: any other request
	// naming "upgrade" in its Connection header is an ordinary one (a new
	// TLS connection per request would otherwise be the price of a header).
	upgrade := fr.LongRunning && httpstream.IsUpgradeRequest(r)
	rt := &failover{req: fr, retry: fr.Idempotent && !upgrade, bearer: r.Header.Get("Authorization") != "", in: r.Header}
	if !upgrade {
		pp := plainProxy(&loc, rt, responder{show: fr.ShowErrors}, fr.LongRunning)
		if fr.End != nil {
			rewrite := pp.Rewrite
			pp.Rewrite = func(pr *httputil.ProxyRequest) { rewrite(pr); plainEvents(pr.Out) }
			pp.ModifyResponse = endAt(fr.End)
		}
		pp.ServeHTTP(w, r)
		return
	}
	// The upgrade dial bypasses round trippers and writes the request as
	// it is, with no hop-by-hop processing: the identity goes on now.
	// Record the server now too.
	if fr.SetIdentity != nil {
		fr.SetIdentity(r.Header)
	}
	if first.refusesToken(r.Header, false) {
		Unavailable(w, r, Unreachable) // see ErrTokenToPeer
		return
	}
	w.Header().Set(HeaderRoute, first.route())
	w.Header().Set(HeaderServer, first.ID)
	proxy.NewUpgradeAwareHandler(&loc, rt, false, false, responder{show: fr.ShowErrors}).ServeHTTP(w, r)
}

// plainProxy forwards a request that is no upgrade: the standard library's
// reverse proxy, as UpgradeAwareHandler uses for these, but with pooled copy
// buffers (UpgradeAwareHandler's proxy allocates 32 KiB per request, 60 %
// of the bytes skewgate allocated), without its extra copy of every header,
// and without its flush timer: an answer of known length goes out when it
// is complete, often in one write with its headers, while answers of
// unknown length (watches, streamed lists) are flushed as they arrive.
func plainProxy(loc *url.URL, rt http.RoundTripper, rs responder, longRunning bool) *httputil.ReverseProxy {
	buffers := copyBuffers
	if longRunning {
		buffers = streamBuffers
	}
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL = loc
			forwardedFor(pr)
		},
		Transport:    rt,
		BufferPool:   buffers,
		ErrorHandler: rs.Error,
	}
}

// forwardedFor appends the client's address to the X-Forwarded-For it
// sent, as UpgradeAwareHandler's proxy did, so that audit logs keep the
// client's address.
func forwardedFor(pr *httputil.ProxyRequest) {
	host, _, err := net.SplitHostPort(pr.In.RemoteAddr)
	if err != nil {
		return
	}
	if prior := pr.In.Header["X-Forwarded-For"]; len(prior) > 0 {
		host = strings.Join(prior, ", ") + ", " + host
	}
	pr.Out.Header["X-Forwarded-For"] = []string{host}
}

// copyBuffers are the reverse proxy's response copy buffers; a watch holds
// its buffer as long as it is open, so watches take smaller ones (an event
// rarely exceeds 8 KiB; a larger one takes several reads): 500 watches hold
// 4 MiB, not 16.
var (
	copyBuffers   = newBufferPool(32 << 10)
	streamBuffers = newBufferPool(8 << 10)
)

func newBufferPool(size int) *bufferPool {
	return &bufferPool{pool: sync.Pool{New: func() any { b := make([]byte, size); return &b }}}
}

type bufferPool struct{ pool sync.Pool }

func (p *bufferPool) Get() []byte  { return *p.pool.Get().(*[]byte) }
func (p *bufferPool) Put(b []byte) { p.pool.Put(&b) }

// FailureKind says how an exchange with a backend failed.
type FailureKind string

const (
	// FailConnect: no connection was obtained, no byte of the request
	// was sent; an idempotent request moves on to the next candidate.
	FailConnect FailureKind = "connect"
	// FailRequest: the request may have reached the server; it is never
	// sent again.
	FailRequest FailureKind = "request"
)

// failover is the round tripper behind UpgradeAwareHandler. It also
// unwraps to the first candidate's transport, which is what the handler
// dials upgrade requests with.
type failover struct {
	req    Request
	retry  bool
	bearer bool
	// in is the caller's request's header: an Audit-ID a second attempt
	// goes with is set there too, for skewgate's own answer should every
	// attempt fail.
	in http.Header
}

func (f *failover) WrappedRoundTripper() http.RoundTripper {
	return f.req.Candidates[0].transportFor(f.req.Anonymous, f.bearer)
}

func (f *failover) RoundTrip(req *http.Request) (*http.Response, error) {
	body := callerBody(req)
	defer body.release() // no attempt follows a return
	var errs []error
	candidates, more := f.req.Candidates, f.req.Fallback
	var moreIdentity Identity
	sent := false // bytes of the request may have reached a server
	// refused is the last answer of a server shutting down that did not
	// take the request: passed on if no other server takes it.
	var refused *http.Response
	var refusedBy *Backend
	// answeredID is the Audit-ID of the last answer not passed on: the
	// server that gave it logged the request under it.
	answeredID := ""
	for i := 0; i < len(candidates) || more != nil; i++ {
		if i > 0 && sent && !f.retry {
			break
		}
		if i == len(candidates) {
			// Every candidate failed the request, or refused it: ask
			// for more, once.
			peers, identity := more()
			candidates, moreIdentity = append(candidates[:len(candidates):len(candidates)], peers...), identity
			more = nil
			if i == len(candidates) {
				break
			}
		}
		b := candidates[i]
		if i > 0 {
			carryAuditID(req.Header, f.in, answeredID)
			if err := rewind(req, body); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", b.ID, err))
				break
			}
		}
		done, err := b.admit()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", b.ID, err))
			continue // nothing was sent: the next candidate may take it
		}
		fr := f.req
		if i >= len(f.req.Candidates) {
			fr.Anonymous, fr.SetIdentity = moreIdentity.Anonymous, moreIdentity.Set
		}
		resp, at, err := roundTrip(req, b, fr.Anonymous, fr.SetIdentity, false)
		if err == nil && NotTaken(resp) {
			done(errCaller) // it answered, but as no server in routing would
			answeredID = resp.Header.Get(HeaderAuditID)
			closeBody(refused)
			refused, refusedBy = resp, b
			errs = append(errs, fmt.Errorf("%s: shutting down, it did not take the request", b.ID))
			continue // it did not take the request: the next capable one may
		}
		if err == nil && f.req.Listed && TypeNotFound(resp) && f.req.Stale != nil && f.req.Stale(b.ID) {
			done(nil)
			answeredID = resp.Header.Get(HeaderAuditID)
			resp.Body.Close()
			errs = append(errs, fmt.Errorf("%s: %w", b.ID, errStale))
			continue // nothing was done there: the next capable one may answer
		}
		if err == nil {
			done(nil)
			return f.answer(resp, b, refused), nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", b.ID, err))
		err = blame(req.Context(), body, at, err)
		var se *ServerError
		switch {
		case errors.As(err, new(*CallerError)):
			// The caller's own doing: no server failed, nothing to retry.
			done(errCaller)
			closeBody(refused)
			return nil, err
		case errors.As(err, &se):
			done(err)
			f.failed(b.ID, se.Kind, err)
		default:
			done(errCaller) // nobody's: skewgate closed the connection
		}
		sent = sent || at.connected
		if sent && !f.retry {
			// Bytes of a write may have reached the server: never
			// send them again.
			break
		}
	}
	if refused != nil {
		return f.answer(refused, refusedBy, nil), nil
	}
	if sent && !f.retry {
		errs = append(errs, errMayHaveProcessed)
	}
	return nil, &forwardError{errors.Join(errs...)}
}

// errMayHaveProcessed marks a write whose bytes may have reached a server
// before its exchange failed: see MayHaveProcessed.
var errMayHaveProcessed = errors.New("the apiserver may have processed the request")

// answer is b's resp, once nothing else will be tried.
func (f *failover) answer(resp *http.Response, b *Backend, refused *http.Response) *http.Response {
	closeBody(refused)
	// Set, not added: a peer's own skewgate names itself on its answer.
	resp.Header.Set(HeaderRoute, b.route())
	resp.Header.Set(HeaderServer, b.ID)
	if f.req.LongRunning {
		resp.Body = cleanEnd{resp.Body}
	}
	return resp
}

func closeBody(resp *http.Response) {
	if resp != nil {
		resp.Body.Close()
	}
}

func (f *failover) failed(id string, kind FailureKind, err error) {
	if f.req.Failed != nil {
		f.req.Failed(id, kind, err)
	}
}

type forwardError struct{ err error }

func (e *forwardError) Error() string { return "forward: " + e.err.Error() }
func (e *forwardError) Unwrap() error { return e.err }

// responder answers every failure to reach an apiserver with a 503 Status,
// but a write that may have reached it with a 502 without Retry-After:
// see MayHaveProcessed.
type responder struct{ show bool }

// Unreachable is the 503 message for callers not shown errors.
const Unreachable = "the apiserver for this request is unreachable; retry"

func (rs responder) Error(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(r.Context().Err(), context.Canceled) {
		return // the client left; nobody to answer
	}
	if ce := (*CallerError)(nil); errors.As(err, &ce) {
		RefuseCaller(w, r, ce)
		return
	}
	if errors.Is(err, errMayHaveProcessed) {
		MayHaveProcessed(w, r)
		return
	}
	if !rs.show {
		Unavailable(w, r, Unreachable)
		return
	}
	Unavailable(w, r, err.Error())
}

// cleanEnd ends a watch whose server went away (skewgate closed the
// connection as the server left routing, or it broke) as the apiserver
// ends one that times out: the stream just ends, and the client watches
// again from its last resource version — elsewhere. Passed on as an error,
// the reverse proxy would reset the client's HTTP/2 stream (INTERNAL_ERROR).
type cleanEnd struct{ io.ReadCloser }

func (c cleanEnd) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		err = io.EOF
	}
	return n, err
}
