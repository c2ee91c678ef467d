package proxy

import (
	"net/http"

	"k8s.io/apiserver/pkg/endpoints/responsewriter"
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

// status is the code sent, 101 for a hijacked upgrade that wrote nothing
// through the writer.
func (r *recorder) status() int {
	if r.code == 0 {
		return http.StatusSwitchingProtocols
	}
	return r.code
}
