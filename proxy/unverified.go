package proxy

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"net/http"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/skewgate/skewgate/proxy/forward"
	"github.com/skewgate/skewgate/proxy/route"
)

// Answers skewgate gives itself (a 503 while the servers of a type are
// away, a 429 at a peer's in-flight limit) tell which types exist on peers
// and how the control plane fares. kube-apiserver tells an unauthenticated
// caller none of that: it answers 401 (or, to an anonymous caller, what
// its authorizer allows). So a caller skewgate did not verify itself —
// a bearer token, or nothing — hears them only once the apiserver has
// authenticated its token; an invalid token gets 401, and a caller
// without one gets the local apiserver's own answer.

// credentialTTL is how long an apiserver's verdict on a token is kept.
const credentialTTL = 10 * time.Second

// credentialCache keeps verdicts on tokens, by their hash, briefly and
// boundedly.
type credentialCache struct {
	mu       sync.Mutex
	verdicts map[[32]byte]credentialVerdict
}

type credentialVerdict struct {
	status int // of the SelfSubjectReview: 201 authenticated, 401 not
	at     time.Time
}

func (c *credentialCache) get(key [32]byte, now time.Time) (int, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.verdicts[key]
	if !ok || now.Sub(v.at) > credentialTTL {
		return 0, false
	}
	return v.status, true
}

func (c *credentialCache) put(key [32]byte, status int, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.verdicts == nil || len(c.verdicts) >= 4096 {
		c.verdicts = map[[32]byte]credentialVerdict{} // bounded: a flood of tokens costs lookups, not memory
	}
	c.verdicts[key] = credentialVerdict{status, now}
}

// selfReview asks nothing but who the caller is; every authenticated user
// may create one (system:basic-user, Kubernetes ≥ 1.28).
var selfReview = []byte(`{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`)

// mayTell reports whether the caller may hear skewgate's own answer. If
// not, it has answered: 401 for a token the apiserver rejects, else the
// local apiserver's own answer to the request.
func (h *Handler) mayTell(w http.ResponseWriter, r *http.Request, x *exchange) bool {
	if x.caller.User != nil || x.caller.Peer {
		return true
	}
	if auth := r.Header.Get("Authorization"); auth != "" {
		switch h.tokenVerdict(r.Context(), auth) {
		case http.StatusCreated:
			return true
		case http.StatusUnauthorized:
			reject(w, r, apierrors.NewUnauthorized("Unauthorized"))
			return false
		}
	}
	x.decision = route.Decision{Route: route.Local, Servers: []string{h.members.LocalID()}, Rule: route.RuleNotResource,
		Reason: "a caller skewgate did not verify gets the apiserver's own answer, not skewgate's"}
	w.Header().Set(forward.HeaderRoute, string(route.Local))
	forward.Forward(w, r, forward.Request{Candidates: h.members.Backends(x.decision.Servers), Anonymous: true,
		SetIdentity: h.identity(x.caller, false), LongRunning: x.req.LongRunning()})
	return false
}

// tokenVerdict asks the local apiserver (or, while it is away, a healthy
// peer) to authenticate a token: the status of a SelfSubjectReview made
// with it, or 0 when no server could tell.
func (h *Handler) tokenVerdict(ctx context.Context, auth string) int {
	key, now := sha256.Sum256([]byte(auth)), time.Now()
	if status, ok := h.tokens.get(key, now); ok {
		return status
	}
	ids := []string{h.members.LocalID()}
	if t := h.members.Table(); !t.Local.Healthy {
		ids = append(healthyPeers(t), ids...)
	}
	for _, b := range h.members.Backends(ids) {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		req, err := http.NewRequestWithContext(rctx, http.MethodPost, b.URL.String()+"/apis/authentication.k8s.io/v1/selfsubjectreviews", bytes.NewReader(selfReview))
		if err != nil {
			cancel()
			return 0
		}
		req.Header.Set("Authorization", auth)
		req.Header.Set("Content-Type", "application/json")
		resp, err := b.Send(req, true, nil)
		cancel()
		if err != nil {
			if kind, ok := forward.Blame(err); ok {
				h.forwardFailed(b.ID, kind, err)
			}
			if ctx.Err() != nil || errors.As(err, new(*forward.CallerError)) && !errors.Is(err, context.DeadlineExceeded) {
				// The caller left, or its token cannot be sent (the
				// transport refused it): no server will tell.
				return 0
			}
			continue // the next server may tell
		}
		resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusCreated, http.StatusUnauthorized:
			h.tokens.put(key, resp.StatusCode, now)
			return resp.StatusCode
		}
		return resp.StatusCode
	}
	return 0
}
