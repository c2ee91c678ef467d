package forward

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// auditingServer stands in for kube-apiserver's Audit-ID handling
// (WithAuditInit): it logs each request under the caller's Audit-ID or one
// it makes, and echoes it. answer writes the rest of its answer.
type auditingServer struct {
	*httptest.Server
	mu sync.Mutex
	// logged are the IDs it logged requests under; sent whether each
	// request came with one.
	logged []string
	sent   []bool
}

func newAuditingServer(t *testing.T, name string, answer func(http.ResponseWriter)) *auditingServer {
	s := &auditingServer{}
	s.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get(HeaderAuditID)
		s.mu.Lock()
		s.sent = append(s.sent, id != "")
		if id == "" {
			id = name + "-made"
		}
		s.logged = append(s.logged, id)
		s.mu.Unlock()
		w.Header().Set(HeaderAuditID, id)
		answer(w)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *auditingServer) log() ([]string, []bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.logged...), append([]bool(nil), s.sent...)
}

func answerOK(w http.ResponseWriter) { io.WriteString(w, "ok") }

// A request sent once to one server carries no Audit-ID from skewgate: a
// value unique to each request would churn the HPACK table of skewgate's
// connection to the apiserver on every request. The server makes it, and
// the caller gets it; a caller's own goes through untouched.
func TestAuditIDOfARequestSentOnce(t *testing.T) {
	up := newAuditingServer(t, "local", answerOK)
	b := backendFor(t, "local", up.Server, trustFor(t, up.Server))
	w := httptest.NewRecorder()
	Forward(w, httptest.NewRequest(http.MethodGet, "/api/v1/namespaces", nil), Request{Candidates: []*Backend{b}, Idempotent: true})
	w2 := httptest.NewRecorder()
	withID := httptest.NewRequest(http.MethodGet, "/api/v1/namespaces", nil)
	withID.Header.Set(HeaderAuditID, "callers")
	Forward(w2, withID, Request{Candidates: []*Backend{b}, Idempotent: true})

	logged, sent := up.log()
	if len(sent) != 2 || sent[0] || !sent[1] || logged[1] != "callers" {
		t.Fatalf("server logged %q (came with an ID: %v), want the first under its own ID, the second under the caller's", logged, sent)
	}
	if got := w.Header().Values(HeaderAuditID); len(got) != 1 || got[0] != "local-made" {
		t.Errorf("caller without an ID got Audit-ID %q, want the server's, once", got)
	}
	if got := w2.Header().Values(HeaderAuditID); len(got) != 1 || got[0] != "callers" {
		t.Errorf("caller with an ID got Audit-ID %q, want its own, once", got)
	}
}

// A request that goes to a second server goes with the ID the first logged
// it under (a stale 404 it answered, a shutting-down refusal), or, if the
// first never answered, one skewgate makes; skewgate's own answer, if every
// server failed it, carries the ID the servers saw.
func TestAuditIDFollowsARequestToTheNextServer(t *testing.T) {
	stale := newAuditingServer(t, "stale", func(w http.ResponseWriter) {
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, "404 page not found\n")
	})
	peer := newAuditingServer(t, "peer", answerOK)
	w := httptest.NewRecorder()
	Forward(w, httptest.NewRequest(http.MethodGet, "/apis/g/v/rs", nil), Request{
		Candidates: []*Backend{backendFor(t, "stale", stale.Server, trustFor(t, stale.Server)), backendFor(t, "peer", peer.Server, trustFor(t, peer.Server))},
		Idempotent: true, Listed: true, Stale: func(id string) bool { return id == "stale" },
	})
	peerLog, _ := peer.log()
	if w.Code != http.StatusOK || len(peerLog) != 1 || peerLog[0] != "stale-made" || w.Header().Get(HeaderAuditID) != "stale-made" {
		t.Errorf("after a stale 404: %d, the peer logged %q, the caller got %q; want 200, both under the first server's stale-made",
			w.Code, peerLog, w.Header().Get(HeaderAuditID))
	}

	// The first is unreachable: the second gets a new ID, and the caller
	// the same.
	alive := newAuditingServer(t, "alive", answerOK)
	w = httptest.NewRecorder()
	Forward(w, httptest.NewRequest(http.MethodGet, "/apis/g/v/rs", nil), Request{
		Candidates: []*Backend{deadBackend(t, trustFor(t, alive.Server)), backendFor(t, "alive", alive.Server, trustFor(t, alive.Server))},
		Idempotent: true,
	})
	aliveLog, sent := alive.log()
	if w.Code != http.StatusOK || len(sent) != 1 || !sent[0] || aliveLog[0] != w.Header().Get(HeaderAuditID) {
		t.Errorf("after a dead server: %d, alive logged %q (sent with one: %v), the caller got %q; want 200 and one ID skewgate made for both",
			w.Code, aliveLog, sent, w.Header().Get(HeaderAuditID))
	}

	// Nobody takes it: skewgate's 503 carries the ID it would have sent.
	trust := trustFor(t, alive.Server)
	w = httptest.NewRecorder()
	in := httptest.NewRequest(http.MethodGet, "/apis/g/v/rs", nil)
	Forward(w, in, Request{Candidates: []*Backend{deadBackend(t, trust), deadBackend(t, trust)}, Idempotent: true})
	if id := w.Header().Get(HeaderAuditID); w.Code != http.StatusServiceUnavailable || id == "" || id != in.Header.Get(HeaderAuditID) {
		t.Errorf("nobody reachable: %d with Audit-ID %q (the request's: %q), want 503 with the ID skewgate made", w.Code, id, in.Header.Get(HeaderAuditID))
	}
}

// skewgate's own answers carry an Audit-ID even when the caller sent none.
func TestOwnAnswerCarriesAnAuditID(t *testing.T) {
	w := httptest.NewRecorder()
	Unavailable(w, httptest.NewRequest(http.MethodGet, "/api", nil), "x")
	if len(w.Header().Get(HeaderAuditID)) != 36 {
		t.Errorf("own 503 Audit-ID = %q, want a UUID", w.Header().Get(HeaderAuditID))
	}
}
