package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"

	"k8s.io/apiserver/pkg/endpoints/responsewriter"

	"github.com/skewgate/skewgate/proxy/forward"
)

// recorder remembers the status code written; responsewriter keeps the
// Flusher and Hijacker of the writer it wraps, which watches and upgrades
// need. With show set, it also removes the route headers from an answer
// whose caller may not see them, when the answer's status is known.
type recorder struct {
	http.ResponseWriter
	code int
	// show reports whether the caller may see the route headers on an
	// answer of code from server (X-Skewgate-Server as set); nil: always.
	show func(code int, server string) bool
	// route and server are X-Skewgate-Route and X-Skewgate-Server as they
	// were when the status was written, shown or not: who answered.
	route, server string
}

// routeHeaders tell how skewgate routed a request.
var routeHeaders = []string{forward.HeaderRoute, forward.HeaderServer}

func record(w http.ResponseWriter) (http.ResponseWriter, *recorder) {
	r := &recorder{ResponseWriter: w}
	return responsewriter.WrapForHTTP1Or2(r), r
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

func (r *recorder) WriteHeader(code int) {
	if code >= 100 && code < 200 && code != http.StatusSwitchingProtocols {
		r.informational(code)
		return
	}
	r.seal(code)
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	r.seal(http.StatusOK)
	return r.ResponseWriter.Write(b)
}

// Flush sends the status too if none was written (200, as net/http does),
// so it must decide on the route headers first.
func (r *recorder) Flush() {
	r.seal(http.StatusOK)
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// seal records the final status, once, and removes the route headers if
// the caller may not see them: after this they would go out as they are.
func (r *recorder) seal(code int) {
	if r.code != 0 {
		return
	}
	r.code = code
	r.route, r.server = r.Header().Get(forward.HeaderRoute), r.Header().Get(forward.HeaderServer)
	if r.show != nil && !r.show(code, r.server) {
		for _, k := range routeHeaders {
			r.Header().Del(k)
		}
	}
}

// informational writes a 1xx answer, which net/http sends at once with the
// header map as it is, without the route headers unless the caller may see
// them; the final answer decides for itself.
func (r *recorder) informational(code int) {
	if r.show == nil || r.show(code, r.Header().Get(forward.HeaderServer)) {
		r.ResponseWriter.WriteHeader(code)
		return
	}
	saved := http.Header{}
	for _, k := range routeHeaders {
		if v := r.Header().Values(k); len(v) > 0 {
			saved[k] = v
			r.Header().Del(k)
		}
	}
	r.ResponseWriter.WriteHeader(code)
	for k, v := range saved {
		r.Header()[k] = v
	}
}

// Hijack hands over the client's connection for an upgrade. The upgrade
// handler copies the apiserver's response to it byte for byte, bypassing
// the header map: the connection it gets adds skewgate's route headers to
// that response (if the caller may see them, decided by its status) and
// reads its status code.
func (r *recorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	h, ok := r.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("response writer cannot be hijacked")
	}
	conn, rw, err := h.Hijack()
	if err != nil {
		return nil, nil, err
	}
	extra := http.Header{}
	for _, k := range routeHeaders {
		if v := r.Header().Values(k); len(v) > 0 {
			extra[k] = v
		}
	}
	var lines bytes.Buffer
	extra.Write(&lines) // sanitizes values: no CR or LF gets through
	uc := &upgradeConn{Conn: conn, extra: lines.Bytes(), code: &r.code}
	if r.show != nil {
		server := extra.Get(forward.HeaderServer)
		uc.show = func(code int) bool { return r.show(code, server) }
	}
	// rw writes through to conn, not uc; the handler writes to the conn.
	return uc, rw, nil
}

// status is the code sent, 101 for a hijacked upgrade that wrote nothing
// through the writer.
func (r *recorder) status() int {
	if r.code == 0 {
		return http.StatusSwitchingProtocols
	}
	return r.code
}

// upgradeConn inserts header lines after the status line of the first
// response written to it and records that response's status code.
type upgradeConn struct {
	net.Conn
	extra []byte
	// show, if set, decides by the status code whether extra goes in.
	show func(code int) bool
	code *int
	line []byte // the status line so far
	done bool
}

// maxStatusLine bounds what is buffered to find the status line; past it
// the bytes pass through untouched.
const maxStatusLine = 512

func (c *upgradeConn) Write(p []byte) (int, error) {
	if c.done {
		return c.Conn.Write(p)
	}
	i := bytes.IndexByte(p, '\n')
	if i < 0 {
		c.line = append(c.line, p...)
		c.done = len(c.line) > maxStatusLine
		return c.Conn.Write(p)
	}
	c.done = true
	c.line = append(c.line, p[:i+1]...)
	code := statusCode(c.line)
	if code != 0 && *c.code == 0 {
		*c.code = code
	}
	if c.show != nil && !c.show(code) {
		return c.Conn.Write(p)
	}
	buf := make([]byte, 0, len(p)+len(c.extra))
	buf = append(append(append(buf, p[:i+1]...), c.extra...), p[i+1:]...)
	if _, err := c.Conn.Write(buf); err != nil {
		return 0, err
	}
	return len(p), nil
}

// statusCode reads "HTTP/1.1 101 Switching Protocols"; 0 if it cannot.
func statusCode(line []byte) int {
	f := strings.Fields(string(line))
	if len(f) < 2 || !strings.HasPrefix(f[0], "HTTP/") {
		return 0
	}
	code, err := strconv.Atoi(f[1])
	if err != nil || code < 100 || code > 999 {
		return 0
	}
	return code
}
