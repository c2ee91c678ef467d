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
// need.
type recorder struct {
	http.ResponseWriter
	code int
}

func record(w http.ResponseWriter) (http.ResponseWriter, *recorder) {
	r := &recorder{ResponseWriter: w}
	return responsewriter.WrapForHTTP1Or2(r), r
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

func (r *recorder) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.code == 0 {
		r.code = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

// Hijack hands over the client's connection for an upgrade. The upgrade
// handler copies the apiserver's response to it byte for byte, bypassing
// the header map: the connection it gets adds skewgate's route headers to
// that response and reads its status code.
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
	for _, k := range []string{forward.HeaderRoute, forward.HeaderServer} {
		if v := r.Header().Values(k); len(v) > 0 {
			extra[k] = v
		}
	}
	var lines bytes.Buffer
	extra.Write(&lines) // sanitizes values: no CR or LF gets through
	uc := &upgradeConn{Conn: conn, extra: lines.Bytes(), code: &r.code}
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
	code  *int
	line  []byte // the status line so far
	done  bool
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
	if code := statusCode(c.line); code != 0 && *c.code == 0 {
		*c.code = code
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
