package forward

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
)

// shuttingDown is an apiserver stand-in that refuses every request as
// kube-apiserver's shutdown filters do (k8s.io/apiserver v0.37.2,
// pkg/server/filters, copied line for line: importing the package would
// bring etcd's client into the module graph). refusal "waitgroup" is waitgroup.go's 503, "retryafter"
// with_retry_after.go's 429.
func shuttingDown(t *testing.T, refusal string) *httptest.Server {
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch refusal {
		case "waitgroup": // waitGroupWriteRetryAfterToResponse
			w.Header().Add("Retry-After", "1")
			w.Header().Set("Content-Type", runtime.ContentTypeJSON)
			w.Header().Set("X-Content-Type-Options", "nosniff")
			statusErr := apierrors.NewServiceUnavailable("apiserver is shutting down").Status()
			w.WriteHeader(int(statusErr.Code))
			fmt.Fprintln(w, runtime.EncodeOrDie(scheme.Codecs.LegacyCodec(corev1.SchemeGroupVersion), &statusErr))
		case "retryafter": // withRetryAfter, shutdownRetryAfterParams
			w.Header().Set("Connection", "close")
			w.Header().Set("Retry-After", "5")
			http.Error(w, "The apiserver is shutting down, please try again later.", http.StatusTooManyRequests)
		}
	}))
	up.EnableHTTP2 = true
	up.StartTLS()
	t.Cleanup(up.Close)
	return up
}

// Issue 23: the local apiserver's own "503 apiserver is shutting down"
// (Retry-After: 1), given before any handler runs, reached clients. The
// server did not take the request: it goes to the next capable server,
// writes included, with their whole body; so does the 429 its
// WithRetryAfter gives once the shutdown delay elapsed.
func TestShuttingDownAnswerMovesOn(t *testing.T) {
	for _, refusal := range []string{"waitgroup", "retryafter"} {
		leaving := shuttingDown(t, refusal)
		var got atomic.Value
		alive := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			got.Store(string(body))
			w.WriteHeader(http.StatusCreated)
		}))
		t.Cleanup(alive.Close)
		const body = `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"}}`
		for _, method := range []string{http.MethodPost, http.MethodGet} {
			got.Store("")
			var failed []string
			w := httptest.NewRecorder()
			Forward(w, httptest.NewRequest(method, "/api/v1/namespaces/n/configmaps", strings.NewReader(body)), Request{
				Candidates: []*Backend{backendFor(t, "local", leaving, trustFor(t, leaving))},
				Idempotent: method == http.MethodGet,
				Failed:     func(id string, kind FailureKind, _ error) { failed = append(failed, id+"/"+string(kind)) },
				Fallback: func() ([]*Backend, Identity) {
					return []*Backend{backendFor(t, "peer", alive, trustFor(t, alive))}, Identity{}
				},
			})
			if w.Code != http.StatusCreated || w.Header().Get(HeaderServer) != "peer" {
				t.Errorf("%s: %s refused by a shutting-down server: %d from %q %s, want 201 from the peer", refusal, method, w.Code, w.Header().Get(HeaderServer), w.Body)
			}
			if got.Load() != body {
				t.Errorf("%s: %s: the peer got body %q, want %q", refusal, method, got.Load(), body)
			}
			if len(failed) != 0 {
				t.Errorf("%s: %s: a shutting-down server blamed as failed: %v", refusal, method, failed)
			}
		}
		// With nobody else to ask, the caller gets the apiserver's own
		// answer, as before.
		w := httptest.NewRecorder()
		Forward(w, httptest.NewRequest(http.MethodPost, "/api/v1/namespaces/n/configmaps", strings.NewReader(body)),
			Request{Candidates: []*Backend{backendFor(t, "local", leaving, trustFor(t, leaving))}})
		if want := map[string]int{"waitgroup": 503, "retryafter": 429}[refusal]; w.Code != want || !strings.Contains(w.Body.String(), "shutting down") {
			t.Errorf("%s with no other server: %d %s, want the apiserver's %d", refusal, w.Code, w.Body, want)
		}
	}
}

// A 503 or 429 from inside a handler may follow work that was done: only
// the shutdown filters' exact answers move on.
func TestOtherUnavailableAnswersStay(t *testing.T) {
	for name, answer := range map[string]func(http.ResponseWriter){
		"a handler's Status with the same message": func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"apiserver is shutting down","reason":"ServiceUnavailable","details":{"name":"x"},"code":503}`)
		},
		"an aggregated API's 503": func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("X-Content-Type-Options", "nosniff")
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"service unavailable","reason":"ServiceUnavailable","code":503}`)
		},
		"priority and fairness's 429": func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.Header().Set("X-Content-Type-Options", "nosniff")
			w.Header().Set("Retry-After", "5")
			w.WriteHeader(http.StatusTooManyRequests)
			io.WriteString(w, "Too many requests, please try again later.\n")
		},
	} {
		up := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { answer(w) }))
		other := newUpstream(t)
		w := httptest.NewRecorder()
		Forward(w, httptest.NewRequest(http.MethodPost, "/api/v1/namespaces/n/configmaps", strings.NewReader("{}")),
			Request{Candidates: []*Backend{backendFor(t, "local", up, trustFor(t, up)), backendFor(t, "other", other.Server, trustFor(t, other.Server))}})
		if w.Code == http.StatusOK || other.hits.Load() != 0 || w.Header().Get(HeaderServer) != "local" {
			t.Errorf("%s: moved on (%d from %q): a server's own answer must be passed on", name, w.Code, w.Header().Get(HeaderServer))
		}
		up.Close()
	}
}
