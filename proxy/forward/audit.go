package forward

import (
	"net/http"

	"github.com/google/uuid"
)

// Audit-ID. kube-apiserver logs every request under an Audit-ID and echoes
// it in its answer: the caller's, or one it makes (k8s.io/apiserver
// WithAuditInit). skewgate passes on the caller's. A request without one
// that skewgate sends once, to one server, gets none from skewgate either:
// that server makes it and its answer tells the caller, as on the direct
// path. skewgate does not make one for every request because a value unique
// to each request costs both ends of its HTTP/2 connection to the apiserver
// on every request: HPACK indexes every header field (Go's client has no
// never-indexed fields), so each request would add an entry to the
// connection's header table and evict older ones, the apiserver's decoder
// mirroring each (BenchmarkHopParallel, both ends in one process: about
// 9 µs of CPU per request, a fifth of what skewgate added to the bare Go
// hop; against a real apiserver only skewgate's end counts, within make
// bench's run-to-run noise). One ID follows a
// request wherever it touches more than one server or skewgate answers it
// itself: EnsureAuditID, at each such place.

// EnsureAuditID returns h's Audit-ID, setting a new one first if h has none.
func EnsureAuditID(h http.Header) string {
	if id := h.Get(HeaderAuditID); id != "" {
		return id
	}
	id := uuid.NewString()
	h.Set(HeaderAuditID, id)
	return id
}

// carryAuditID gives a request about to go to another server, and the
// caller's request in, the Audit-ID it goes there with: the one it has, or
// the one the server that did not keep it answered with (it logged the
// request under it), or a new one.
func carryAuditID(out, in http.Header, answered string) {
	if out.Get(HeaderAuditID) == "" && answered != "" {
		out.Set(HeaderAuditID, answered)
	}
	in.Set(HeaderAuditID, EnsureAuditID(out))
}
