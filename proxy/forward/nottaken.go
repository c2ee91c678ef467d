package forward

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A kube-apiserver that is shutting down refuses requests before any
// handler runs — before authentication, admission or storage — with one of
// two answers (k8s.io/apiserver pkg/server/filters). Either means the
// server did not take the request: like a stream its GOAWAY refused, it
// may go to another server, writes included. They are recognised exactly
// (status, headers and body), never by status alone: a 503 or 429 from
// inside a handler (an aggregated API's backend, priority and fairness)
// may follow work that was done.
const (
	// waitgroup.go, once the server's request wait group no longer takes
	// requests: 503 and this metav1.Status, with Retry-After: 1.
	shuttingDownMessage = "apiserver is shutting down"
	// with_retry_after.go, once the shutdown delay elapsed: 429 and this
	// line as text, with Retry-After: 5 and Connection: close.
	retryAfterShutdown = "The apiserver is shutting down, please try again later.\n"
)

// maxNotTaken is more than either answer's body.
const maxNotTaken = 512

// NotTaken reports whether resp is a shutting-down apiserver's refusal of
// a request it never began. It keeps resp's body readable.
func NotTaken(resp *http.Response) bool {
	switch {
	case resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") == "1" &&
		resp.Header.Get("Content-Type") == "application/json":
	case resp.StatusCode == http.StatusTooManyRequests && resp.Header.Get("Retry-After") == "5" &&
		resp.Header.Get("Content-Type") == "text/plain; charset=utf-8":
	default:
		return false
	}
	if resp.Header.Get("X-Content-Type-Options") != "nosniff" || resp.ContentLength > maxNotTaken {
		return false
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxNotTaken+1))
	if err != nil || len(body) > maxNotTaken {
		// Not either answer: passed on as it came, what was read first.
		resp.Body = readCloser{io.MultiReader(bytes.NewReader(body), resp.Body), resp.Body}
		return false
	}
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if resp.StatusCode == http.StatusTooManyRequests {
		return string(body) == retryAfterShutdown
	}
	var st metav1.Status
	if json.Unmarshal(body, &st) != nil {
		return false
	}
	return st.Kind == "Status" && st.APIVersion == "v1" && st.Status == metav1.StatusFailure &&
		st.Code == http.StatusServiceUnavailable && st.Reason == metav1.StatusReasonServiceUnavailable &&
		st.Message == shuttingDownMessage && st.Details == nil
}

// readCloser reads from one reader and closes another.
type readCloser struct {
	io.Reader
	io.Closer
}
