package forward

import (
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
)

// RetryAfterSeconds is what a 503 asks clients to wait: about one health
// probe period, after which a recovered peer is routed to again.
const RetryAfterSeconds = 1

// statusCodecs encode metav1.Status as JSON, YAML or protobuf, whichever the
// client's Accept header asks for, like the apiserver's own errors.
var statusCodecs = func() serializer.CodecFactory {
	scheme := runtime.NewScheme()
	metav1.AddToGroupVersion(scheme, schema.GroupVersion{Version: "v1"})
	return serializer.NewCodecFactory(scheme)
}()

// Unavailable answers 503 ServiceUnavailable as a content-negotiated
// metav1.Status with Retry-After, never a plain-text body.
func Unavailable(w http.ResponseWriter, r *http.Request, msg string) {
	err := apierrors.NewServiceUnavailable(msg)
	err.ErrStatus.Details = &metav1.StatusDetails{RetryAfterSeconds: RetryAfterSeconds}
	w.Header().Set(HeaderRoute, "unavailable")
	w.Header().Set(HeaderServer, "skewgate") // nobody else answered
	Error(w, r, err)
}

// MayHaveProcessed answers a write whose exchange with the apiserver
// broke after its bytes may have reached it: 502, a Status that says so,
// and no Retry-After. A 503 with Retry-After tells client-go the request
// was not processed, and it sends it again — a create the server had
// taken then fails with 409 "already exists". The caller learns what a
// broken connection would have told it on the direct path.
func MayHaveProcessed(w http.ResponseWriter, r *http.Request) {
	w.Header().Set(HeaderRoute, "unavailable")
	w.Header().Set(HeaderServer, "skewgate")
	Error(w, r, &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: http.StatusBadGateway,
		Reason:  metav1.StatusReasonInternalError,
		Message: "the connection to the apiserver broke after this request was sent: the apiserver may have processed it; skewgate does not send it again"}})
}

// TooMany answers 429 TooManyRequests as a Status with Retry-After: the
// server chosen for the request has as many in flight as skewgate sends it.
func TooMany(w http.ResponseWriter, r *http.Request, server string) {
	w.Header().Set(HeaderRoute, "unavailable")
	w.Header().Set(HeaderServer, "skewgate")
	Error(w, r, apierrors.NewTooManyRequests("too many requests in flight to the apiserver serving this request; retry", RetryAfterSeconds))
}

// Error answers err as a content-negotiated metav1.Status (a StatusError
// keeps its code; anything else is a 500), carrying the request's Audit-ID
// (EnsureAuditID: made now if it has none).
func Error(w http.ResponseWriter, r *http.Request, err error) {
	w.Header().Set(HeaderAuditID, EnsureAuditID(r.Header))
	responsewriters.ErrorNegotiated(err, statusCodecs, schema.GroupVersion{Version: "v1"}, w, r)
}
